//! `kvcc explore`: stateright's web explorer over one case, on loopback only. States
//! print as kvcc's named facts and actions in vLLM's vocabulary, as in traces.

use kvcc_model::ContractModel;
use kvcc_model::InputError;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

/// Resolves `--addr` to a loopback address that can be listened on; port 0 picks a free
/// port.
pub fn loopback(addr: &str) -> Result<SocketAddr, InputError> {
    let resolved: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| InputError::usage(format!("--addr {addr}: not an address: {e}")))?
        .collect();
    let Some(first) = resolved.first().copied() else {
        return Err(InputError::usage(format!(
            "--addr {addr}: resolves to no address"
        )));
    };
    if let Some(outside) = resolved.iter().find(|a| !a.ip().is_loopback()) {
        return Err(InputError::usage(format!(
            "--addr {addr}: {} is not a loopback address; the explorer serves this machine only (use 127.0.0.1)",
            outside.ip()
        )));
    }
    // Bind once to fail with a message rather than inside stateright, and to learn the
    // port when asked for any.
    let listener = TcpListener::bind(first)
        .map_err(|e| InputError::usage(format!("--addr {addr}: cannot listen: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| InputError::usage(format!("--addr {addr}: {e}")))?;
    drop(listener);
    Ok(bound)
}

/// Serves the explorer until the process is stopped.
pub fn serve(model: ContractModel, addr: SocketAddr) {
    use stateright::Model;
    model.checker().serve(addr);
}
