//! The admin port: HTTP for scrapers, probes and operators, served with
//! actix-web on its own actix-rt worker thread.
//!
//! What a host uses of it: [`AdminToken`], [`AdminLimits`] and
//! [`AdminOptions`] (what `NodeBuilder::admin_token` and friends take), and
//! [`NodeStatus`], the `/status` document (`NodeHandle::status`). The
//! server itself is private to the crate.
//!
//! | endpoint | who may call it |
//! | --- | --- |
//! | `GET /metrics`, `GET /health` | anyone (also on the metrics listener) |
//! | `GET /status` | anyone; session ids and incarnations only with the token (`status.rs`) |
//! | `GET /console` and its files | anyone, on a node's listener: the read-only web console (`console.rs`) |
//! | `POST /admin/operations`, `POST /admin/operations/{id}/cancel` | the token's holder, JSON bodies only (`operator.rs`) |
//!
//! `auth.rs` says who a caller is, `refusal.rs` answers and counts every
//! refusal (`cohort_refusals_total{port="admin",reason}`), `routes.rs` is
//! the actix-web app, `config.rs` the `[admin]` table, `token.rs` the secret
//! and `answers.rs` every JSON document the port serves. What a node serves
//! beyond `/metrics` and `/health` comes in as a `NodeRoutes` trait object,
//! so the server knows nothing of the node.
//!
//! Why actix-web: the node already runs on actix-rt, and a maintained HTTP/1
//! implementation with per-connection timers and a connection cap replaces
//! a hand-written parser whose limits were ours to get right (40 slow
//! connections once stopped it answering `/health`).
//!
//! Why a second listener for metrics ([`AdminOptions::metrics_listen`]):
//! scrapers often sit on another network than operators; a listener that
//! serves only `/metrics` and `/health` lets an operator expose those without
//! exposing the control plane, and each listener has its own server, worker
//! thread and connection budget, so a flood on one does not starve the other.
//!
//! The limits (see [`AdminLimits`]), and why each holds against a slow or
//! hostile client:
//! - a request head must arrive within `request_timeout` (actix-web answers
//!   `408` and closes), and a POST body within the same time again
//!   (`408`, counted as `body_timeout`);
//! - keep-alive is off: one request per connection, so a client cannot
//!   hold a connection past its one request by trickling a second head
//!   (actix-web times only a connection's first head);
//! - a closing connection gets `disconnect_timeout` to go;
//! - each listener holds at most `connections_max` connections; more wait
//!   in the kernel's backlog and are taken as slots free;
//! - a request head is at most 128 KiB and 96 headers (actix-web's own
//!   bounds; the connection is closed beyond them), a body at most
//!   `BODY_MAX_BYTES` (128 KiB, `413`). So one listener's connections hold at most
//!   `connections_max` × 128 KiB of heads (64 MiB with the defaults).

pub(crate) mod answers;
mod auth;
pub(crate) mod changes;
pub(crate) mod config;
mod console;
pub(crate) mod operator;
mod refusal;
mod routes;
pub(crate) mod status;
mod token;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Server;
use answers::AdminReply;
pub use answers::{
    ClusterStatus, FrozenStatus, GroupEntry, NodeEntry, NodeStatus, OperationStatus, OperationTotals, OwnerStatus,
    Secret, SessionCounters, SpecBody, StepStatus,
};
use cohort_actors::NodeMetrics;
pub(crate) use status::Audience;
pub use token::{ADMIN_TOKEN_MAX_BYTES, ADMIN_TOKEN_MIN_BYTES, AdminToken, TokenError};

/// The largest request body (a POST under `/admin/`) the port reads.
pub(crate) const BODY_MAX_BYTES: usize = 128 * 1024;

/// An answer of the admin port: an HTTP status code and a JSON body.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AdminAnswer {
    /// 200, 400, 404, 405, 409 or 503.
    pub(crate) status: u16,
    /// The JSON document.
    pub(crate) body: AdminReply,
}

/// The future of an answer under `/admin/`.
pub(crate) type AdminFuture<'a> = Pin<Box<dyn Future<Output = AdminAnswer> + Send + 'a>>;

/// What a node serves on its admin port beyond `/metrics` and `/health`.
pub(crate) trait NodeRoutes: Send + Sync + 'static {
    /// The document of `GET /status`, as `audience` may see it.
    fn status(&self, audience: Audience) -> NodeStatus;

    /// Answer `method path` with `body`, for a path under `/admin/`. The
    /// port has already authenticated a POST and checked its content type.
    fn admin<'a>(&'a self, method: &'a str, path: &'a str, body: &'a [u8]) -> AdminFuture<'a>;
}

/// The bounds the admin port enforces on every connection (the module docs
/// say why each holds; `[admin]` sets them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminLimits {
    /// Time a client has to send its request head, and again its body.
    pub request_timeout: Duration,
    /// Time a connection has to close once answered.
    pub disconnect_timeout: Duration,
    /// Connections each listener holds at once.
    pub connections_max: usize,
}

impl Default for AdminLimits {
    fn default() -> Self {
        AdminLimits {
            request_timeout: Duration::from_secs(5),
            disconnect_timeout: Duration::from_secs(1),
            connections_max: 512,
        }
    }
}

/// How a node's admin port runs (the `[admin]` table, or
/// `NodeBuilder::admin_token` and friends).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdminOptions {
    /// The token of operator commands; `None`: the node takes none.
    pub token: Option<AdminToken>,
    /// A listener of its own for `/metrics` and `/health`.
    pub metrics_listen: Option<SocketAddr>,
    /// The port's limits.
    pub limits: AdminLimits,
}

/// Seconds a stopping server gives its connections to finish.
const SHUTDOWN_TIMEOUT_SECS: u64 = 1;

/// Serve `/metrics` and `/health` only on `listener`. The returned server
/// runs once spawned or awaited on an actix System (its worker is a thread
/// of its own) and stops when dropped.
pub(crate) fn serve_metrics(
    listener: std::net::TcpListener,
    metrics: Arc<NodeMetrics>,
    limits: AdminLimits,
) -> io::Result<Server> {
    serve(
        listener,
        routes::AdminState { metrics, node: None, token: None, request_timeout: limits.request_timeout },
        limits,
    )
}

/// Serve a node's admin port on `listener`: `/metrics`, `/health`, and what
/// `routes` serves (`/status`, the operator commands under `/admin/`), with
/// `options`' token and limits. Runs and stops like [`serve_metrics`].
pub(crate) fn serve_node(
    listener: std::net::TcpListener,
    metrics: Arc<NodeMetrics>,
    routes: Arc<dyn NodeRoutes>,
    options: &AdminOptions,
) -> io::Result<Server> {
    let state = routes::AdminState {
        metrics,
        node: Some(routes),
        token: options.token.clone(),
        request_timeout: options.limits.request_timeout,
    };
    serve(listener, state, options.limits)
}

fn serve(listener: std::net::TcpListener, state: routes::AdminState, limits: AdminLimits) -> io::Result<Server> {
    refusal::export_at_zero(&state.metrics);
    let state = actix_web::web::Data::new(state);
    let server = actix_web::HttpServer::new(move || routes::app(state.clone()))
        .workers(1)
        .worker_max_blocking_threads(1)
        .disable_signals()
        .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS)
        .keep_alive(actix_web::http::KeepAlive::Disabled)
        .client_request_timeout(limits.request_timeout)
        .client_disconnect_timeout(limits.disconnect_timeout)
        .max_connections(limits.connections_max)
        .listen(listener)?;
    Ok(server.run())
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use cohort_core::{HeartbeatGauges, ShardMetrics};
    use serde_json::Value;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::time::timeout;

    use super::*;

    /// A bound on every exchange, so a hung server fails the test instead of hanging it.
    const ANSWER_WAIT_MAX: Duration = Duration::from_secs(5);

    fn start(limits: AdminLimits) -> (SocketAddr, Arc<NodeMetrics>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        let metrics = Arc::new(NodeMetrics::new());
        let server = serve_metrics(listener, Arc::clone(&metrics), limits).expect("serve");
        actix_rt::spawn(server);
        (address, metrics)
    }

    /// Send `request`, close our side, read the whole answer.
    async fn exchange(address: SocketAddr, request: &[u8]) -> io::Result<String> {
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(request).await?;
        stream.shutdown().await?;
        let mut answer = Vec::new();
        timeout(ANSWER_WAIT_MAX, stream.read_to_end(&mut answer)).await??;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }

    fn split(answer: &str) -> (&str, &str) {
        answer.split_once("\r\n\r\n").expect("a head and a body")
    }

    fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then_some(value.trim())
        })
    }

    #[actix_rt::test]
    async fn get_metrics_serves_the_registry_over_tcp() {
        let (address, metrics) = start(AdminLimits::default());
        metrics.set_peers_connected(2);
        let snapshot = ShardMetrics { commit_batches_sent: 7, ..ShardMetrics::default() };
        metrics.update_shard(0, &snapshot, &HeartbeatGauges::default());

        let answer = exchange(address, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n")
            .await
            .expect("answer");
        let (head, body) = split(&answer);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert_eq!(header(head, "content-type"), Some(cohort_actors::OPENMETRICS_CONTENT_TYPE), "{head}");
        assert_eq!(header(head, "content-length"), Some(body.len().to_string().as_str()), "{head}");
        assert_eq!(header(head, "connection"), Some("close"), "one request per connection: {head}");
        assert!(body.lines().any(|line| line == "cohort_peers_connected 2"), "{body}");
        assert!(body.lines().any(|line| line == "cohort_commit_batches_sent_total{shard=\"0\"} 7"), "{body}");
        assert!(body.ends_with("# EOF\n"));
    }

    #[actix_rt::test]
    async fn health_unknown_paths_and_other_methods_are_answered_and_counted() {
        let (address, metrics) = start(AdminLimits::default());
        let answer = exchange(address, b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n").await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert_eq!(split(&answer).1, "ok\n");

        let answer = exchange(address, b"GET /metrics?format=text HTTP/1.0\r\n\r\n").await.expect("answer");
        assert!(answer.starts_with("HTTP/1.0 200 OK\r\n") || answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");

        let answer = exchange(address, b"GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n").await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 404 Not Found\r\n"), "{answer}");
        assert_eq!(
            serde_json::from_str::<Value>(split(&answer).1).ok().map(|v| v["result"].clone()),
            Some("not_found".into())
        );

        let answer =
            exchange(address, b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n").await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{answer}");
        assert_eq!(header(split(&answer).0, "allow"), Some("GET"), "{answer}");

        // The metrics listener has no status and no operator commands.
        let answer = exchange(address, b"GET /status HTTP/1.1\r\nHost: t\r\n\r\n").await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
        let post = b"POST /admin/operations HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        let answer = exchange(address, post).await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");

        let port = cohort_actors::Port::Admin;
        assert_eq!(metrics.refused(port, "not_found"), 3);
        assert_eq!(metrics.refused(port, "method_not_allowed"), 1);
    }

    #[actix_rt::test]
    async fn garbage_and_oversized_heads_are_refused_and_the_server_goes_on() {
        let (address, _metrics) = start(AdminLimits::default());
        for request in
            [&b"\x00\xff\xfe\x80 garbage\r\n\r\n"[..], b"GET metrics HTTP/1.1\r\n\r\n", b"GET /metrics SPDY/3\r\n\r\n"]
        {
            match exchange(address, request).await {
                // A 4xx, or a close without an answer: both refuse.
                Ok(answer) => assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 4"), "{request:?}: {answer}"),
                Err(error) => assert_ne!(error.kind(), io::ErrorKind::TimedOut, "{request:?}"),
            }
        }
        let mut request = b"GET /metrics HTTP/1.1\r\nHost: t\r\nX-Padding: ".to_vec();
        request.resize(request.len() + 3 * 128 * 1024, b'a');
        request.extend_from_slice(b"\r\n\r\n");
        match exchange(address, &request).await {
            Ok(answer) => assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 431 "), "{answer}"),
            // A reset instead of the answer is an acceptable way to refuse.
            Err(error) => assert_ne!(error.kind(), io::ErrorKind::TimedOut),
        }
        let answer = exchange(address, b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n").await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    }

    #[actix_rt::test]
    async fn a_slow_client_gets_408() {
        let limits = AdminLimits { request_timeout: Duration::from_secs(1), ..AdminLimits::default() };
        let (address, _metrics) = start(limits);
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n").await.expect("send");
        let mut answer = Vec::new();
        timeout(ANSWER_WAIT_MAX, stream.read_to_end(&mut answer)).await.expect("answered in time").expect("read");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer}");
    }

    #[actix_rt::test]
    async fn connections_beyond_the_limit_wait_their_turn() {
        let limits =
            AdminLimits { connections_max: 1, request_timeout: Duration::from_secs(1), ..AdminLimits::default() };
        let (address, _metrics) = start(limits);
        // Holds the only slot until its head times out.
        let mut idle = TcpStream::connect(address).await.expect("connect");
        actix_rt::time::sleep(Duration::from_millis(50)).await;
        let answer = exchange(address, b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n").await.expect("answer");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        let mut first = Vec::new();
        timeout(ANSWER_WAIT_MAX, idle.read_to_end(&mut first)).await.expect("closed in time").expect("read");
        assert!(first.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&first));
    }
}
