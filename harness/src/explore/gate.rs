//! The explorer's front door. stateright's explorer (tiny_http) gives every connection a
//! thread with no read timeout and answers requests one at a time on a single thread, so
//! a client that connects and never sends, or never reads its answer, holds the server.
//! kvcc listens itself and forwards only whole, well-formed requests to stateright on a
//! private loopback port; each client gets a bounded number of connections, a deadline
//! for its request head and a deadline for reading the answer, and the answer is buffered
//! here so stateright's thread is never held by a slow reader. A click (`GET /.states...`)
//! is answered here, bounded ([`super::click`]), and so is kvcc's own page
//! ([`super::page`]); only stateright's cheap endpoints reach stateright.

use super::click::{self, Answer, Limits, Stop};
use super::{page, Site};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a client may hold and how long it may take.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Connections one client address may have open at once (a browser opens about 6).
    pub per_client: usize,
    /// Connections open at once from all clients (every loopback address is a client).
    pub total: usize,
    /// Time to send the whole request head, and to read the whole answer.
    pub client_deadline: Duration,
    /// Time stateright may take to answer.
    pub backend_deadline: Duration,
    /// What one click (a state's successors) may cost.
    pub click: Limits,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            per_client: 32,
            total: 128,
            client_deadline: Duration::from_secs(5),
            backend_deadline: Duration::from_secs(120),
            click: Limits {
                successors_max: SUCCESSORS_LISTED,
                deadline: Duration::from_secs(10),
            },
        }
    }
}

/// Successors one click lists by default: more than a reader takes in, and few enough that
/// a state of 64 ranks' facts answers in a few MB.
pub const SUCCESSORS_LISTED: usize = 200;

/// A request head longer than this is refused (the explorer's longest path is a list of
/// action indices).
const MAX_HEAD: usize = 16 * 1024;
/// An answer longer than this is cut off with a 502 (stateright answers only its page and
/// status now; a click is answered here).
const MAX_ANSWER: usize = 256 * 1024 * 1024;

/// Accepts on `listener` forever, answering the page and clicks of `site` and forwarding
/// the rest to stateright at `backend`.
pub fn run(listener: TcpListener, backend: SocketAddr, bounds: Bounds, site: Site) {
    let site = Arc::new(site);
    let open: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        let admitted = {
            let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
            let total: usize = open.values().sum();
            let count = open.entry(peer.ip()).or_default();
            if *count < bounds.per_client && total < bounds.total {
                *count += 1;
                true
            } else {
                false
            }
        };
        if !admitted {
            refuse(stream, "503 Service Unavailable");
            continue;
        }
        let open = Arc::clone(&open);
        let site = Arc::clone(&site);
        std::thread::spawn(move || {
            serve(stream, backend, bounds, &site);
            let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(count) = open.get_mut(&peer.ip()) {
                *count -= 1;
                if *count == 0 {
                    open.remove(&peer.ip());
                }
            }
        });
    }
}

/// One connection: one request, one answer, then close.
fn serve(mut client: TcpStream, backend: SocketAddr, bounds: Bounds, site: &Site) {
    let _ = client.set_read_timeout(Some(bounds.client_deadline));
    let _ = client.set_write_timeout(Some(bounds.client_deadline));
    let answer = match read_head(&mut client, bounds.client_deadline) {
        Ok(head) => match request_line(&head) {
            Some(("GET", path)) if path.starts_with(CLICK) => {
                match click(&client, &path[CLICK.len()..], backend, bounds, &site.model) {
                    Some(answer) => answer,
                    // The client left: nobody to answer.
                    None => return,
                }
            }
            Some((method, path)) => match (method == "GET")
                .then(|| page::answer(site, path))
                .flatten()
            {
                Some(page) => Ok(with_head(page.status, page.content_type, page.body)),
                None => forward(method, path, backend, bounds.backend_deadline),
            },
            None => Err("400 Bad Request"),
        },
        Err(status) => Err(status),
    };
    let bytes = match answer {
        Ok(bytes) => bytes,
        Err(status) => status_only(status).into_bytes(),
    };
    let _ = client.write_all(&bytes);
    linger(client);
}

/// Closes after the answer is sent. Closing a socket with unread input makes the peer's
/// system reset the connection, which can destroy the answer before the client reads it:
/// so stop writing, then read and drop what is left (a little, briefly) before closing.
fn linger(client: TcpStream) {
    let _ = client.shutdown(Shutdown::Write);
    let _ = client.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = std::io::copy(&mut (&client).take(64 * 1024), &mut std::io::sink());
}

/// The request head, up to the blank line, within the deadline as a whole (a client that
/// sends one byte a second does not extend it).
fn read_head(client: &mut TcpStream, deadline: Duration) -> Result<Vec<u8>, &'static str> {
    let until = std::time::Instant::now() + deadline;
    let mut head = Vec::new();
    let mut chunk = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err("408 Request Timeout");
        }
        let _ = client.set_read_timeout(Some(left));
        match client.read(&mut chunk) {
            Ok(0) => return Err("400 Bad Request"),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err("408 Request Timeout")
            }
            Err(_) => return Err("400 Bad Request"),
        }
        if head.len() > MAX_HEAD {
            return Err("431 Request Header Fields Too Large");
        }
    }
    Ok(head)
}

/// The method and path of a request the explorer answers: `GET` of a printable path, or
/// the page's `POST /.runtocompletion` without a body.
fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let head = std::str::from_utf8(head).ok()?;
    let mut words = head.lines().next()?.split(' ');
    let (method, path, version) = (words.next()?, words.next()?, words.next()?);
    let printable = path.starts_with('/') && path.bytes().all(|b| b.is_ascii_graphic());
    let allowed = method == "GET" || (method == "POST" && path == "/.runtocompletion");
    (printable && allowed && version.starts_with("HTTP/1.") && words.next().is_none())
        .then_some((method, path))
}

/// The path of a click: the successors of a state (stateright's `/.states` endpoint).
const CLICK: &str = "/.states";

/// Answers a click on `path` (after `/.states`) within the click's limits; None when the
/// client left before it was answered.
fn click(
    client: &TcpStream,
    path: &str,
    backend: SocketAddr,
    bounds: Bounds,
    model: &kvcc_model::ContractModel,
) -> Option<Result<Vec<u8>, &'static str>> {
    let until = Instant::now() + bounds.click.deadline;
    // Every entry carries the properties and what stateright's checker has discovered;
    // only stateright knows the latter, and its status is cheap to ask for.
    let properties = properties(backend, bounds.click.deadline);
    let go_on = || {
        if Instant::now() >= until {
            Err(Stop::Deadline)
        } else if gone(client) {
            Err(Stop::ClientGone)
        } else {
            Ok(())
        }
    };
    match click::answer(model, path, &properties, &bounds.click, go_on) {
        Answer::Steps(json) => Some(Ok(with_head("200 OK", "application/json", json))),
        Answer::NotFound(why) => Some(Ok(with_head(
            "404 Not Found",
            "text/plain; charset=utf-8",
            why.into_bytes(),
        ))),
        Answer::Stopped(Stop::Deadline) => Some(Err("504 Gateway Timeout")),
        Answer::Stopped(Stop::ClientGone) => None,
    }
}

/// The `properties` of stateright's status: the model's properties and their discoveries
/// so far; an empty list when stateright cannot say in time.
fn properties(backend: SocketAddr, deadline: Duration) -> serde_json::Value {
    let status = forward("GET", "/.status", backend, deadline).ok();
    let body = status.as_deref().and_then(|answer| {
        let at = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
        answer
            .starts_with(b"HTTP/1.1 200")
            .then(|| &answer[at + 4..])
    });
    body.and_then(|body| serde_json::from_slice::<serde_json::Value>(body).ok())
        .and_then(|mut status| status.get_mut("properties").map(serde_json::Value::take))
        .filter(serde_json::Value::is_array)
        .unwrap_or_else(|| serde_json::json!([]))
}

/// Has the client gone: closed its end, or reset the connection? Asked between steps of
/// a click's work, without waiting. A client that only stopped sending (a half-close)
/// reads the same as one that left; browsers never do that.
fn gone(client: &TcpStream) -> bool {
    if client.set_nonblocking(true).is_err() {
        return true;
    }
    let gone = match client.peek(&mut [0u8; 1]) {
        Ok(0) => true,
        // More of a request than its head: still there.
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    };
    let _ = client.set_nonblocking(false);
    gone
}

/// An HTTP answer of `body`.
fn with_head(status: &str, content_type: &str, body: Vec<u8>) -> Vec<u8> {
    let mut answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend(body);
    answer
}

/// Asks stateright, on a connection of our own, and buffers its whole answer; stateright
/// has `deadline` to answer.
fn forward(
    method: &str,
    path: &str,
    backend: SocketAddr,
    deadline: Duration,
) -> Result<Vec<u8>, &'static str> {
    let unavailable = "502 Bad Gateway";
    let mut upstream = TcpStream::connect_timeout(&backend, deadline).map_err(|_| unavailable)?;
    let _ = upstream.set_read_timeout(Some(deadline));
    let _ = upstream.set_write_timeout(Some(deadline));
    write!(
        upstream,
        "{method} {path} HTTP/1.1\r\nHost: kvcc\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .map_err(|_| unavailable)?;
    let mut answer = Vec::new();
    (&mut upstream)
        .take(MAX_ANSWER as u64 + 1)
        .read_to_end(&mut answer)
        .map_err(|e| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => "504 Gateway Timeout",
            _ => unavailable,
        })?;
    if answer.len() > MAX_ANSWER || answer.is_empty() {
        return Err(unavailable);
    }
    Ok(answer)
}

/// Turns away a client over its connection limit, on the accepting thread: without
/// reading from it, and without waiting more than a moment for it.
fn refuse(mut client: TcpStream, status: &str) {
    let _ = client.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = client.write_all(status_only(status).as_bytes());
    let _ = client.shutdown(Shutdown::Both);
}

fn status_only(status: &str) -> String {
    format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

#[cfg(test)]
mod tests {
    use super::request_line;

    #[test]
    fn only_the_explorers_requests_pass() {
        let line = |s: &str| {
            request_line(format!("{s}\r\nHost: x\r\n\r\n").as_bytes())
                .map(|(m, p)| (m.to_string(), p.to_string()))
        };
        let pair = |m: &str, p: &str| Some((m.to_string(), p.to_string()));
        assert_eq!(
            line("GET /.states/0/1 HTTP/1.1"),
            pair("GET", "/.states/0/1")
        );
        assert_eq!(
            line("POST /.runtocompletion HTTP/1.0"),
            pair("POST", "/.runtocompletion")
        );
        // Twins: what the gate must stop before stateright sees it.
        assert_eq!(line("POST /.states HTTP/1.1"), None);
        assert_eq!(line("DELETE / HTTP/1.1"), None);
        assert_eq!(line("GET relative HTTP/1.1"), None);
        assert_eq!(line("GET /a\u{7f}b HTTP/1.1"), None);
        assert_eq!(line("GET / HTTP/1.1 extra"), None);
        assert_eq!(line("GET / SPDY/3"), None);
    }
}
