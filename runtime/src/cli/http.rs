//! The one HTTP exchange `cohort status`, `cohort groups` and `cohort
//! admin` make with a node's admin port, over reqwest's blocking client
//! (the one the OTLP exporter already brings; no TLS, no proxy: the admin
//! port is plain HTTP, on loopback unless an operator chose otherwise).
//!
//! Given several admin addresses, a command uses the first that answers,
//! so a profile that lists every node's keeps working when one is down; a
//! change (`POST`) goes on to the next address only when nothing reached
//! the previous one, so it is never sent twice.
//!
//! The CLI runs no async runtime of its own, so the blocking client is the
//! natural fit; every exchange has a deadline and a bound on what it reads.

use std::io::Read;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use reqwest::blocking::Client;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};

use super::exit::{CliError, Exit};
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
#[derive(Clone, Copy, Debug)]
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
    /// No connection: nothing was sent.
    #[error("cannot reach the node's admin port at {admin}: {reason} (is the node running, with [node] admin set?)")]
    Unreachable { admin: String, reason: String },
    /// The request was sent, and no full answer came in time.
    #[error("no answer from the node's admin port at {admin}: {reason}")]
    NoAnswer { admin: String, reason: String },
}

impl ExchangeError {
    /// How the command exits (see [`super::exit`]): a bad address is a
    /// usage error, no connection is `unreachable`; a request sent without
    /// an answer is `unreachable` too for a read (`GET`) and `unknown` for
    /// a change (`POST`: it may still apply).
    pub(crate) fn exit(&self, call: &Call<'_>) -> Exit {
        match (self, call) {
            (ExchangeError::Address { .. }, _) => Exit::Usage,
            (ExchangeError::Unreachable { .. }, _) | (ExchangeError::NoAnswer { .. }, Call::Get) => Exit::Unreachable,
            (ExchangeError::NoAnswer { .. }, Call::Post(_)) => Exit::Unknown,
        }
    }

    /// As a [`CliError`] of the command that made `call`.
    pub(crate) fn into_cli(self, call: &Call<'_>) -> CliError {
        CliError::new(self.exit(call), self.to_string())
    }
}

/// The addresses of `--admin`, `COHORT_ADMIN` or a profile: each
/// comma-separated item of each value, in order.
pub(crate) fn admin_list(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_string)
        .collect()
}

/// [`exchange`] with the first of `admins` that takes the connection (and,
/// for a `GET`, answers): a change is sent to the next address only when
/// nothing was sent to the previous one. The address that answered comes
/// back with the answer; the error, if every address failed, names them all.
pub(crate) fn exchange_first(
    admins: &[String],
    call: Call<'_>,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<(String, Answer), ExchangeError> {
    assert!(!admins.is_empty(), "the caller checks that an admin address was given");
    let mut failures = Vec::new();
    for admin in admins {
        match exchange(admin, call, path, token, timeout) {
            Ok(answer) => return Ok((admin.clone(), answer)),
            Err(error @ ExchangeError::NoAnswer { .. }) if matches!(call, Call::Post(_)) => return Err(error),
            Err(error @ ExchangeError::Address { .. }) => return Err(error),
            Err(error) => failures.push(error),
        }
    }
    match failures.len() {
        1 => Err(failures.remove(0)),
        _ => {
            let reasons: Vec<String> = failures
                .iter()
                .map(|failure| match failure {
                    ExchangeError::Unreachable { admin, reason } | ExchangeError::NoAnswer { admin, reason } => {
                        format!("{admin}: {reason}")
                    }
                    other => other.to_string(),
                })
                .collect();
            Err(ExchangeError::Unreachable {
                admin: format!("any of {}", admins.join(",")),
                reason: reasons.join("; "),
            })
        }
    }
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
    let no_answer =
        |error: &dyn std::error::Error| ExchangeError::NoAnswer { admin: admin.into(), reason: with_causes(error) };
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
    let response =
        request.send().map_err(|error| if error.is_connect() { unreachable(&error) } else { no_answer(&error) })?;
    let status = response.status();
    let line = format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or(""));
    let mut body = Vec::new();
    response.take(ANSWER_SIZE_MAX_BYTES).read_to_end(&mut body).map_err(|error| no_answer(&error))?;
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
    fn o4_every_admin_address_is_tried_and_named_and_a_bad_one_is_a_usage_error() {
        let closed = || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
        let (first, second) = (closed().to_string(), closed().to_string());
        let admins = admin_list(&[format!("{first}, {second}")]);
        assert_eq!(admins, [first.clone(), second.clone()]);
        let error = exchange_first(&admins, Call::Get, "/status", None, Duration::from_secs(2)).err().expect("closed");
        let text = error.to_string();
        assert!(
            text.contains(&format!("any of {first},{second}: {first}: ")) && text.contains(&format!("; {second}: ")),
            "{text}"
        );
        assert_eq!(error.exit(&Call::Get), Exit::Unreachable);
        let post = exchange_first(&admins, Call::Post("{}"), "/admin/freeze", None, Duration::from_secs(2));
        assert_eq!(post.err().map(|error| error.exit(&Call::Post("{}"))), Some(Exit::Unreachable), "nothing was sent");
        let bad = exchange_first(&["not an address".into()], Call::Get, "/status", None, Duration::from_secs(1));
        assert_eq!(bad.err().map(|error| error.exit(&Call::Get)), Some(Exit::Usage));
        let no_answer = ExchangeError::NoAnswer { admin: first, reason: "timed out".into() };
        assert_eq!((no_answer.exit(&Call::Get), no_answer.exit(&Call::Post("{}"))), (Exit::Unreachable, Exit::Unknown));
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
