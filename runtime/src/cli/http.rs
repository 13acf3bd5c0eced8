//! The one HTTP exchange `cohort status` and `cohort admin` make with a
//! node's admin port, over reqwest's blocking client (the one the OTLP
//! exporter already brings; no TLS, no proxy: the admin port is plain HTTP,
//! on loopback unless an operator chose otherwise).
//!
//! The CLI runs no async runtime of its own, so the blocking client is the
//! natural fit; every exchange has a deadline and a bound on what it reads.

use std::io::Read;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use reqwest::blocking::Client;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};

use crate::admin::config::parse_listen_address;

/// The largest answer read from an admin port.
const ANSWER_SIZE_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// The longest a connection attempt may take.
const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(3);

/// An answer: the status code, the status line and the body.
pub(crate) struct Answer {
    pub code: u16,
    pub line: String,
    pub body: String,
}

/// What an exchange sends besides its path.
pub(crate) enum Call<'a> {
    /// `GET`.
    Get,
    /// `POST` with this JSON body.
    Post(&'a str),
}

/// Why an exchange got no answer; the message names the address.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExchangeError {
    /// `--admin` is not an address.
    #[error("{admin}: not a HOST:PORT address or a port ({reason})")]
    Address { admin: String, reason: String },
    /// The node could not be reached, or did not answer in time.
    #[error("cannot reach the node's admin port at {admin}: {reason} (is the node running, with [node] admin set?)")]
    Unreachable { admin: String, reason: String },
}

/// `admin` as an address: `HOST:PORT`, or a port alone for loopback (as
/// in the configuration).
fn resolve(admin: &str) -> Result<SocketAddr, ExchangeError> {
    if let Ok(address) = parse_listen_address(admin) {
        return Ok(address);
    }
    let address_error = |reason: String| ExchangeError::Address { admin: admin.into(), reason };
    admin
        .to_socket_addrs()
        .map_err(|error| address_error(error.to_string()))?
        .next()
        .ok_or_else(|| address_error("the name resolves to no address".into()))
}

/// An error with its causes, e.g. `error sending request: ...: Connection refused (os error 111)`.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Send `path` to `admin` (with `token` as a bearer token, if any) and read
/// the answer, waiting up to `timeout` for it.
pub(crate) fn exchange(
    admin: &str,
    call: Call<'_>,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<Answer, ExchangeError> {
    let address = resolve(admin)?;
    let unreachable =
        |error: &dyn std::error::Error| ExchangeError::Unreachable { admin: admin.into(), reason: with_causes(error) };
    let client = Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(CONNECT_TIMEOUT_MAX))
        .no_proxy()
        .build()
        .map_err(|error| unreachable(&error))?;
    let url = format!("http://{address}{path}");
    let mut request = match call {
        Call::Get => client.get(&url),
        Call::Post(body) => client.post(&url).header(CONTENT_TYPE, "application/json").body(body.to_owned()),
    };
    if let Some(token) = token {
        request = request.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = request.send().map_err(|error| unreachable(&error))?;
    let status = response.status();
    let line = format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or(""));
    let mut body = Vec::new();
    response.take(ANSWER_SIZE_MAX_BYTES).read_to_end(&mut body).map_err(|error| unreachable(&error))?;
    Ok(Answer {
        code: status.as_u16(),
        line: line.trim_end().to_owned(),
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t4_the_cli_takes_a_port_alone_for_loopback() {
        assert_eq!(resolve("7301").ok(), Some(SocketAddr::from(([127, 0, 0, 1], 7301))));
        assert_eq!(resolve("10.0.0.1:7301").ok(), Some(SocketAddr::from(([10, 0, 0, 1], 7301))));
        assert!(matches!(resolve("not an address"), Err(ExchangeError::Address { .. })));
    }

    #[test]
    fn an_unreachable_node_is_named_with_the_cause() {
        // A listener bound and dropped: its port refuses connections.
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
        let error = exchange(&port.to_string(), Call::Get, "/health", None, Duration::from_secs(2))
            .err()
            .expect("nothing listens");
        let text = error.to_string();
        assert!(text.starts_with(&format!("cannot reach the node's admin port at {port}: ")), "{text}");
        assert!(text.to_lowercase().contains("refused"), "{text}");
    }
}
