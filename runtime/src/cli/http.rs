//! The one HTTP exchange `cohort status` and `cohort admin` make with a
//! node's admin port: a request, `Connection: close`, the whole answer.
//!
//! Why by hand: the admin server is a tiny HTTP/1.1 server of our own (see
//! `telemetry::admin`), and its two command-line clients need one request
//! each; a client library would be a large dependency for a dozen lines.

use std::io::{Read, Write};
use std::net::ToSocketAddrs;
use std::time::Duration;

/// The largest answer read from an admin port.
const ANSWER_SIZE_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// An answer: the status code, the status line and the body.
pub(crate) struct Answer {
    pub code: u16,
    pub line: String,
    pub body: String,
}

/// Send `method path` (with `body`, if any) to `admin` and read the answer,
/// waiting up to `timeout` for it. The error says which address could not
/// be reached, or what came back instead of HTTP.
pub(crate) fn exchange(
    admin: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<Answer, String> {
    let address = admin
        .to_socket_addrs()
        .map_err(|error| format!("{admin}: not a HOST:PORT address ({error})"))?
        .next()
        .ok_or_else(|| format!("{admin}: the name resolves to no address"))?;
    let unreachable = |error: std::io::Error| {
        format!("cannot reach the node's admin port at {admin}: {error} (is the node running, with [node] admin set?)")
    };
    let connect_timeout = timeout.min(Duration::from_secs(3));
    let mut stream = std::net::TcpStream::connect_timeout(&address, connect_timeout).map_err(unreachable)?;
    stream.set_read_timeout(Some(timeout)).map_err(unreachable)?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n");
    if let Some(body) = body {
        request.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
    } else {
        request.push_str("\r\n");
    }
    stream.write_all(request.as_bytes()).map_err(unreachable)?;
    let mut answer = Vec::new();
    stream.take(ANSWER_SIZE_MAX_BYTES).read_to_end(&mut answer).map_err(unreachable)?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(|| format!("{admin}: not an HTTP answer"))?;
    let line = head.lines().next().unwrap_or_default().to_string();
    let code = line.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    Ok(Answer { code, line, body: body.to_string() })
}
