//! `kvcc explore`: stateright's web explorer over one case, on loopback only. States
//! print as kvcc's named facts and actions in vLLM's vocabulary, as in traces.

mod click;
mod gate;

use kvcc_model::ContractModel;
use kvcc_model::InputError;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, ToSocketAddrs};

/// Listens on `--addr`, which must be loopback; port 0 picks a free port.
pub fn loopback(addr: &str) -> Result<TcpListener, InputError> {
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
    TcpListener::bind(first)
        .map_err(|e| InputError::usage(format!("--addr {addr}: cannot listen: {e}")))
}

/// Successors one click lists unless `kvcc explore --successors-max` says otherwise.
pub const SUCCESSORS_LISTED: usize = gate::SUCCESSORS_LISTED;

/// Serves the explorer on `listener` until the process is stopped: stateright's server
/// listens on a private loopback port behind kvcc's [`gate`], which answers clicks itself,
/// listing at most `successors_max` successors of a state.
pub fn serve(
    model: ContractModel,
    listener: TcpListener,
    successors_max: usize,
) -> Result<(), InputError> {
    use stateright::Model;
    let internal = |e: std::io::Error| InputError::usage(format!("explorer: {e}"));
    // stateright serves its page from `./ui/` when the working directory has one: run it
    // where there is none, so the explorer never reads a file the user did not name.
    let empty = tempfile::tempdir().map_err(internal)?;
    std::env::set_current_dir(empty.path()).map_err(internal)?;
    // stateright takes an address, not a listener: learn a free port, then let it bind.
    let backend = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(internal)?;
    let clicks = model.clone();
    std::thread::spawn(move || model.checker().serve(backend));
    // Open the door only once stateright answers behind it.
    let up = (0..200).any(|_| {
        std::net::TcpStream::connect(backend).is_ok() || {
            std::thread::sleep(std::time::Duration::from_millis(25));
            false
        }
    });
    if !up {
        return Err(InputError::usage(format!(
            "explorer: stateright's server did not start on {backend}"
        )));
    }
    let mut bounds = gate::Bounds::default();
    bounds.click.successors_max = successors_max;
    gate::run(listener, backend, bounds, clicks);
    drop(empty);
    Ok(())
}
