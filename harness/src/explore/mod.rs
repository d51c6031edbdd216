//! `kvcc explore`: kvcc's own explorer page over one case, on loopback only. It names the
//! spec and the point, groups the clauses by kind, links each violated clause to the
//! counterexample `kvcc check` prints for it, and shows any path as the trace does: its
//! steps, its sequence diagram, and the facts at its end with what changed marked.
//! `--trace FILE` opens it at a trace's path.
//!
//! The page ([`page`]) and the clicks a path is made of ([`path`]) are answered by kvcc
//! behind its gate ([`gate`]); stateright's server still runs on a private port for its
//! JSON endpoints (`/.status`, stateright's `/.states` list, answered bounded by
//! [`click`]).

mod click;
mod gate;
mod page;
mod path;
mod sequence;
mod verdict;

use crate::spec::point::Point;
use crate::spec::Spec;
use kvcc_model::Action;
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

/// What the explorer serves: one case of a spec, and where its page opens.
pub struct Site {
    pub model: ContractModel,
    pub spec_name: String,
    pub spec_file: String,
    pub description: Option<String>,
    pub point: Point,
    pub start: Start,
    /// What `kvcc check` concludes, filled in by a search of its own.
    verdict: verdict::Cell,
    /// Ways on from a state the page and a click list.
    pub successors_max: usize,
}

/// Where the page opens.
#[derive(Clone, Debug, Default)]
pub struct Start {
    /// The path's indices ([`path`]): empty for the initial state.
    pub indices: Vec<usize>,
    /// The trace file it came from (`--trace`).
    pub trace_file: Option<String>,
}

impl Site {
    /// The case's site, opening at the initial state; starts the search for its verdict
    /// (`spec` goes with it).
    pub fn new(spec: Spec, point: Point, model: ContractModel, successors_max: usize) -> Site {
        Site {
            model: model.clone(),
            spec_name: spec.name.clone(),
            spec_file: spec.file.clone(),
            description: spec.description.clone(),
            point: point.clone(),
            start: Start::default(),
            verdict: verdict::spawn(spec, point, model),
            successors_max,
        }
    }

    /// Opens the page at the path of `actions` (a trace's), read from `file`; an action the
    /// model cannot take there is an input error naming the step.
    pub fn open_at(mut self, file: &str, actions: &[Action]) -> Result<Site, InputError> {
        let indices = path::indices_of(&self.model, actions).map_err(|why| {
            InputError::file(
                file,
                format!("the trace's path cannot be opened: {why} (kvcc replay {file} says where it departs)"),
            )
        })?;
        self.start = Start {
            indices,
            trace_file: Some(file.to_string()),
        };
        Ok(self)
    }

    /// `name` or `name [point]`.
    pub fn title(&self) -> String {
        if self.point.is_empty() {
            self.spec_name.clone()
        } else {
            format!("{} [{}]", self.spec_name, self.point)
        }
    }
}

/// Serves the explorer on `listener` until the process is stopped: kvcc's page and clicks
/// behind kvcc's [`gate`], stateright's server on a private loopback port behind it.
pub fn serve(site: Site, listener: TcpListener) -> Result<(), InputError> {
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
    let model = site.model.clone();
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
    bounds.click.successors_max = site.successors_max;
    gate::run(listener, backend, bounds, site);
    drop(empty);
    Ok(())
}
