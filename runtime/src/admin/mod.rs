//! The admin port: a deliberately tiny HTTP/1.1 server for `GET /metrics`,
//! `GET /health` and, on a node, `GET /status` (JSON: the node's session and
//! the cluster metadata as it sees it; `cohort status` prints it) and the
//! operator commands `POST /admin/operations` and
//! `POST /admin/operations/{id}/cancel` (see [`operator`]; `cohort admin`
//! sends them). What a node serves beyond `/metrics` and `/health` comes in
//! as [`NodeRoutes`], so the server knows nothing of the node.
//!
//! Why not an HTTP framework: the port answers two fixed paths to scrapers
//! and probes, one request per connection. A framework would bring a large
//! dependency tree and its own runtime assumptions into a node whose data
//! path runs on actix; a few dozen lines over tokio sockets are enough, and
//! every limit is visible here.
//!
//! Every input is bounded, because the port may be reachable by anything on
//! the network:
//! - a request head larger than [`AdminLimits::request_head_max_bytes`] gets
//!   `431` and the connection is closed;
//! - a head not complete within [`AdminLimits::read_timeout`] gets `408`;
//! - at most [`AdminLimits::connections_max`] connections are served at once
//!   (further ones wait in the listen backlog);
//! - bytes that are not a request line get `400`; parsing never panics;
//! - only `/admin/` requests have a body, read by `Content-Length` up to
//!   [`BODY_MAX_BYTES`] (`413` beyond, `411` for a chunked body)
//!   within the same read timeout.
//!
//! Each response carries `Connection: close`: one request per connection
//! keeps the server free of keep-alive state, and a scrape every few seconds
//! does not need connection reuse.

pub mod operator;
pub mod status;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::timeout;

use cohort_actors::metrics::{NodeMetrics, OPENMETRICS_CONTENT_TYPE};
use serde_json::Value;

/// The largest request body (under `/admin/`) the server reads.
pub const BODY_MAX_BYTES: usize = 128 * 1024;

/// An answer of the admin port: an HTTP status code and a JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct AdminAnswer {
    /// 200, 400, 404, 409 or 503.
    pub status: u16,
    /// The JSON document.
    pub body: Value,
}

/// The future of an answer under `/admin/`.
pub type AdminFuture<'a> = Pin<Box<dyn Future<Output = AdminAnswer> + Send + 'a>>;

/// What a node serves on its admin port beyond `/metrics` and `/health`.
pub trait NodeRoutes: Send + Sync + 'static {
    /// The document of `GET /status`.
    fn status(&self) -> Value;

    /// Answer `method path` with `body`, for a path under `/admin/`.
    fn admin<'a>(&'a self, method: &'a str, path: &'a str, body: &'a [u8]) -> AdminFuture<'a>;
}

/// The bounds the admin server enforces on every connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminLimits {
    /// Longest request head (request line and headers) read before `431`.
    pub request_head_max_bytes: usize,
    /// Time a client has to send its whole request head before `408`.
    pub read_timeout: Duration,
    /// Time a client has to take the whole response before it is dropped.
    pub write_timeout: Duration,
    /// Connections served at the same time.
    pub connections_max: usize,
}

impl Default for AdminLimits {
    fn default() -> Self {
        AdminLimits {
            request_head_max_bytes: 8 * 1024,
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
            connections_max: 16,
        }
    }
}

/// After a response, bytes of the request still read and discarded before
/// closing, so that a client that sent more than we read sees the response
/// instead of a reset.
const LINGER_BYTES_MAX: usize = 64 * 1024;

/// How long closing waits for the client to read the response and close.
const LINGER_TIMEOUT: Duration = Duration::from_secs(1);

/// Pause after a failed `accept` (out of file descriptors, for instance),
/// so the loop does not spin while the condition lasts.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// Serve `metrics` on `listener` with [`AdminLimits::default`] until the
/// returned future is dropped or its task aborted.
///
/// Run it as its own task (`tokio::spawn(serve(listener, metrics))`); it
/// spawns one task per connection. Bind the listener with
/// `tokio::net::TcpListener::bind` on the configured admin address (port 0
/// picks a free port; read it back with `local_addr`).
pub async fn serve(listener: TcpListener, metrics: Arc<NodeMetrics>) {
    serve_with_limits(listener, metrics, AdminLimits::default()).await;
}

/// [`serve`] with explicit limits.
pub async fn serve_with_limits(listener: TcpListener, metrics: Arc<NodeMetrics>, limits: AdminLimits) {
    serve_all(listener, metrics, None, limits).await;
}

/// Serve a node's admin port: `/metrics`, `/health`, and what `routes`
/// serves (`/status`, the operator commands under `/admin/`), with
/// [`AdminLimits::default`].
pub async fn serve_node(listener: TcpListener, metrics: Arc<NodeMetrics>, routes: Arc<dyn NodeRoutes>) {
    serve_all(listener, metrics, Some(routes), AdminLimits::default()).await;
}

async fn serve_all(
    listener: TcpListener,
    metrics: Arc<NodeMetrics>,
    node: Option<Arc<dyn NodeRoutes>>,
    limits: AdminLimits,
) {
    let permits = Arc::new(Semaphore::new(limits.connections_max.max(1)));
    loop {
        // The semaphore is never closed, so acquiring only fails if it were.
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else { return };
        match listener.accept().await {
            Ok((stream, _peer)) => {
                let metrics = Arc::clone(&metrics);
                let node = node.clone();
                tokio::spawn(async move {
                    handle_connection(stream, &metrics, node.as_deref(), limits).await;
                    drop(permit);
                });
            }
            Err(_) => tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await,
        }
    }
}

/// Read one request, answer it, close.
async fn handle_connection(
    mut stream: TcpStream,
    metrics: &NodeMetrics,
    node: Option<&dyn NodeRoutes>,
    limits: AdminLimits,
) {
    let started = tokio::time::Instant::now();
    let response = match timeout(limits.read_timeout, read_head(&mut stream, limits.request_head_max_bytes)).await {
        Err(_elapsed) => Response::error(Status::RequestTimeout),
        // The client reset the connection: nobody to answer.
        Ok(Err(_)) => return,
        Ok(Ok(HeadRead::TooLarge)) => Response::error(Status::HeaderFieldsTooLarge),
        Ok(Ok(HeadRead::Incomplete)) => Response::error(Status::BadRequest),
        Ok(Ok(HeadRead::Complete(head, rest))) => match (node, parse_request_line(&head)) {
            (Some(node), Some(request)) if request.path.starts_with("/admin/") => {
                let deadline = started + limits.read_timeout;
                match tokio::time::timeout_at(deadline, read_body(&mut stream, &head, rest)).await {
                    Err(_elapsed) => Response::error(Status::RequestTimeout),
                    Ok(Err(_)) => return,
                    Ok(Ok(Err(status))) => Response::error(status),
                    Ok(Ok(Ok(body))) => {
                        let answer = node.admin(request.method, request.path, &body).await;
                        Response {
                            status: Status::Code(answer.status),
                            content_type: JSON_CONTENT_TYPE,
                            body: format!("{}\n", answer.body),
                        }
                    }
                }
            }
            _ => route(&head, metrics, node),
        },
    };
    // A client that does not take the response in time is simply dropped.
    if let Ok(Ok(())) = timeout(limits.write_timeout, stream.write_all(&response.to_bytes())).await {
        linger(&mut stream).await;
    }
}

/// Close our side, then discard what the client still sends (bounded) until
/// it closes too; closing with unread bytes would reset the connection and
/// could destroy the response before the client read it.
async fn linger(stream: &mut TcpStream) {
    let drain = async {
        stream.shutdown().await?;
        let mut discarded = 0;
        let mut chunk = [0u8; 4096];
        while discarded < LINGER_BYTES_MAX {
            match stream.read(&mut chunk).await? {
                0 => break,
                read => discarded += read,
            }
        }
        io::Result::Ok(())
    };
    // Whatever happens here, the connection is closed when `stream` drops.
    let _ = timeout(LINGER_TIMEOUT, drain).await;
}

/// What reading a request head produced.
#[derive(Debug, PartialEq, Eq)]
enum HeadRead {
    /// The head up to and excluding its terminating empty line (each of its
    /// lines ends with CRLF), and the bytes read after it (the start of a body).
    Complete(Vec<u8>, Vec<u8>),
    /// The client closed its side before the head ended.
    Incomplete,
    /// No end of head within the limit.
    TooLarge,
}

/// The empty line that ends a request head.
const HEAD_END: &[u8] = b"\r\n\r\n";

/// Read until the end of the request head, at most `head_max_bytes` bytes.
/// Bytes after the head (a body) are never read here.
async fn read_head(stream: &mut TcpStream, head_max_bytes: usize) -> io::Result<HeadRead> {
    let mut head = Vec::with_capacity(head_max_bytes.min(1024));
    let mut chunk = [0u8; 1024];
    loop {
        if head.len() >= head_max_bytes {
            return Ok(HeadRead::TooLarge);
        }
        let wanted = chunk.len().min(head_max_bytes - head.len());
        let read = stream.read(&mut chunk[..wanted]).await?;
        if read == 0 {
            return Ok(HeadRead::Incomplete);
        }
        // The terminator may straddle the previous chunk: look back 3 bytes.
        let search_from = head.len().saturating_sub(HEAD_END.len() - 1);
        head.extend_from_slice(&chunk[..read]);
        if let Some(end) = find(&head[search_from..], HEAD_END) {
            // Keep the last line's CRLF: every line of the head ends with one.
            let rest = head.split_off(search_from + end + HEAD_END.len());
            head.truncate(search_from + end + 2);
            return Ok(HeadRead::Complete(head, rest));
        }
    }
}

/// Read the body `head` announces with `Content-Length` (none: empty),
/// `rest` being what was read past the head; at most
/// [`BODY_MAX_BYTES`]. `Ok(Err(status))` refuses it.
async fn read_body(stream: &mut TcpStream, head: &[u8], mut rest: Vec<u8>) -> io::Result<Result<Vec<u8>, Status>> {
    let mut length = None;
    for line in head.split(|&byte| byte == b'\n').skip(1) {
        let line = String::from_utf8_lossy(line);
        let Some((name, value)) = line.split_once(':') else { continue };
        let name = name.trim().to_ascii_lowercase();
        if name == "transfer-encoding" {
            return Ok(Err(Status::LengthRequired));
        }
        if name == "content-length" {
            match value.trim().parse::<usize>() {
                Ok(value) if length.is_none_or(|length| length == value) => length = Some(value),
                _ => return Ok(Err(Status::BadRequest)),
            }
        }
    }
    let length = length.unwrap_or(0);
    if length > BODY_MAX_BYTES || rest.len() > length {
        return Ok(Err(if length > BODY_MAX_BYTES { Status::PayloadTooLarge } else { Status::BadRequest }));
    }
    let already = rest.len();
    rest.resize(length, 0);
    stream.read_exact(&mut rest[already..]).await?;
    Ok(Ok(rest))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// The parts of a request line the server looks at.
#[derive(Debug, PartialEq, Eq)]
struct RequestLine<'a> {
    method: &'a str,
    /// The target without its query string.
    path: &'a str,
}

/// Parse `METHOD SP TARGET SP HTTP/1.x` from the first line of `head`;
/// `None` for anything else.
fn parse_request_line(head: &[u8]) -> Option<RequestLine<'_>> {
    let line = head.split(|&byte| byte == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.strip_suffix('\r').unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    let well_formed = parts.next().is_none()
        && !method.is_empty()
        && method.bytes().all(|byte| byte.is_ascii_uppercase())
        && target.starts_with('/')
        && version.starts_with("HTTP/1.");
    if !well_formed {
        return None;
    }
    let path = target.split_once('?').map_or(target, |(path, _query)| path);
    Some(RequestLine { method, path })
}

/// The response to a complete request head.
fn route(head: &[u8], metrics: &NodeMetrics, node: Option<&dyn NodeRoutes>) -> Response {
    let Some(request) = parse_request_line(head) else {
        return Response::error(Status::BadRequest);
    };
    match (request.method, request.path) {
        ("GET", "/metrics") => {
            Response { status: Status::Ok, content_type: OPENMETRICS_CONTENT_TYPE, body: metrics.encode() }
        }
        ("GET", "/health") => Response { status: Status::Ok, content_type: TEXT_CONTENT_TYPE, body: "ok\n".to_owned() },
        ("GET", "/status") => match node {
            Some(node) => {
                Response { status: Status::Ok, content_type: JSON_CONTENT_TYPE, body: node.status().to_string() }
            }
            None => Response::error(Status::NotFound),
        },
        (_, "/metrics" | "/health" | "/status") => Response::error(Status::MethodNotAllowed),
        (_, path) if path.starts_with("/admin/") && node.is_some() => {
            // Served by `handle_connection`, which reads the body first.
            Response::error(Status::BadRequest)
        }
        _ => Response::error(Status::NotFound),
    }
}

const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";
const JSON_CONTENT_TYPE: &str = "application/json";

/// The statuses the server answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    RequestTimeout,
    HeaderFieldsTooLarge,
    LengthRequired,
    PayloadTooLarge,
    /// An operator answer's code (see `node::metadata::operator`).
    Code(u16),
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Status::Ok => "200 OK",
            Status::BadRequest => "400 Bad Request",
            Status::NotFound => "404 Not Found",
            Status::MethodNotAllowed => "405 Method Not Allowed",
            Status::RequestTimeout => "408 Request Timeout",
            Status::HeaderFieldsTooLarge => "431 Request Header Fields Too Large",
            Status::LengthRequired => "411 Length Required",
            Status::PayloadTooLarge => "413 Content Too Large",
            Status::Code(code) => match code {
                200 => "200 OK",
                400 => "400 Bad Request",
                404 => "404 Not Found",
                405 => "405 Method Not Allowed",
                409 => "409 Conflict",
                _ => "503 Service Unavailable",
            },
        }
    }
}

#[derive(Debug)]
struct Response {
    status: Status,
    content_type: &'static str,
    body: String,
}

impl Response {
    /// A plain-text error whose body repeats the status.
    fn error(status: Status) -> Response {
        Response { status, content_type: TEXT_CONTENT_TYPE, body: format!("{}\n", status.line()) }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let allow = match self.status {
            Status::MethodNotAllowed => "Allow: GET\r\n",
            Status::Code(405) => "Allow: POST\r\n",
            _ => "",
        };
        let head = format!(
            "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
            self.status.line(),
            self.content_type,
            self.body.len(),
        );
        let mut bytes = Vec::with_capacity(head.len() + self.body.len());
        bytes.extend_from_slice(head.as_bytes());
        bytes.extend_from_slice(self.body.as_bytes());
        bytes
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use cohort_core::{HeartbeatGauges, ShardMetrics};
    use proptest::prelude::*;
    use tokio::task::JoinHandle;

    use super::*;

    async fn start(limits: AdminLimits) -> (SocketAddr, Arc<NodeMetrics>, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let metrics = Arc::new(NodeMetrics::new());
        let server = tokio::spawn(serve_with_limits(listener, Arc::clone(&metrics), limits));
        (address, metrics, server)
    }

    /// Send `request`, close our side, read the whole answer.
    async fn exchange(address: SocketAddr, request: &[u8]) -> io::Result<String> {
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(request).await?;
        stream.shutdown().await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }

    fn split(answer: &str) -> (&str, &str) {
        answer.split_once("\r\n\r\n").expect("a head and a body")
    }

    #[tokio::test(flavor = "current_thread")]
    async fn get_metrics_serves_the_registry_over_tcp() {
        let (address, metrics, server) = start(AdminLimits::default()).await;
        metrics.set_peers_connected(2);
        let snapshot = ShardMetrics { commit_batches_sent: 7, ..ShardMetrics::default() };
        metrics.update_shard(0, &snapshot, &HeartbeatGauges::default());

        let answer =
            exchange(address, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n").await.unwrap();
        let (head, body) = split(&answer);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains(&format!("Content-Type: {OPENMETRICS_CONTENT_TYPE}\r\n")), "{head}");
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())), "{head}");
        assert!(body.lines().any(|line| line == "cohort_peers_connected 2"), "{body}");
        assert!(body.lines().any(|line| line == "cohort_commit_batches_sent_total{shard=\"0\"} 7"), "{body}");
        assert!(body.ends_with("# EOF\n"));
        server.abort();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn health_unknown_paths_and_other_methods() {
        let (address, _metrics, server) = start(AdminLimits::default()).await;
        let answer = exchange(address, b"GET /health HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert_eq!(split(&answer).1, "ok\n");

        let answer = exchange(address, b"GET /metrics?format=text HTTP/1.0\r\n\r\n").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");

        let answer = exchange(address, b"GET /nowhere HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 404 Not Found\r\n"), "{answer}");

        let answer = exchange(address, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{answer}");
        assert!(answer.contains("Allow: GET\r\n"), "{answer}");
        server.abort();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn garbage_and_truncated_requests_get_400() {
        let (address, _metrics, server) = start(AdminLimits::default()).await;
        for request in [
            &b"\x00\xff\xfe\x80 garbage\r\n\r\n"[..],
            b"GET\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1 extra\r\n\r\n",
            b"GET /metrics SPDY/3\r\n\r\n",
            b"\r\n\r\n",
            // The client closes its side before the head ends.
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n",
            b"",
        ] {
            let answer = exchange(address, request).await.unwrap();
            assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{request:?}: {answer}");
        }
        assert!(!server.is_finished());
        server.abort();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_oversized_head_gets_431_or_a_close_and_the_server_goes_on() {
        let (address, _metrics, server) = start(AdminLimits::default()).await;
        let mut request = b"GET /metrics HTTP/1.1\r\nX-Padding: ".to_vec();
        request.resize(request.len() + 3 * AdminLimits::default().request_head_max_bytes, b'a');
        request.extend_from_slice(b"\r\n\r\n");
        match exchange(address, &request).await {
            Ok(answer) => assert!(
                answer.is_empty() || answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
                "{answer}"
            ),
            // A reset instead of the answer is an acceptable way to refuse.
            Err(error) => assert_ne!(error.kind(), io::ErrorKind::TimedOut),
        }
        let answer = exchange(address, b"GET /health HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(!server.is_finished());
        server.abort();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_slow_client_gets_408() {
        let limits = AdminLimits { read_timeout: Duration::from_millis(100), ..AdminLimits::default() };
        let (address, _metrics, server) = start(limits).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
        let mut answer = Vec::new();
        timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await.unwrap().unwrap();
        let answer = String::from_utf8(answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer}");
        server.abort();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn connections_beyond_the_limit_wait_their_turn() {
        let limits =
            AdminLimits { connections_max: 1, read_timeout: Duration::from_millis(200), ..AdminLimits::default() };
        let (address, _metrics, server) = start(limits).await;
        // Holds the only slot until its read times out.
        let mut idle = TcpStream::connect(address).await.unwrap();
        let answer = exchange(address, b"GET /health HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        let mut first = Vec::new();
        idle.read_to_end(&mut first).await.unwrap();
        assert!(first.starts_with(b"HTTP/1.1 408"));
        server.abort();
    }

    #[test]
    fn request_lines_parse_strictly() {
        assert_eq!(
            parse_request_line(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a"),
            Some(RequestLine { method: "GET", path: "/metrics" })
        );
        assert_eq!(parse_request_line(b"HEAD /health HTTP/1.0"), None, "no CRLF: not a line");
        assert_eq!(parse_request_line(b"get /health HTTP/1.1\r\n"), None);
        assert_eq!(parse_request_line(b"GET  /health HTTP/1.1\r\n"), None);
        assert_eq!(parse_request_line(b"GET /h\xffalth HTTP/1.1\r\n"), None);
        assert_eq!(parse_request_line(b""), None);
    }

    proptest! {
        #[test]
        fn routing_never_panics(head in proptest::collection::vec(any::<u8>(), 0..512)) {
            let metrics = NodeMetrics::new();
            let response = route(&head, &metrics, None);
            prop_assert!(response.to_bytes().starts_with(b"HTTP/1.1 "));
        }

        #[test]
        fn routing_text_like_input_never_panics(head in "[A-Z]{0,8} /[a-z?=/]{0,16} HTTP/[0-9.]{0,4}\r\n.{0,32}") {
            let metrics = NodeMetrics::new();
            let response = route(head.as_bytes(), &metrics, None);
            prop_assert!(response.to_bytes().starts_with(b"HTTP/1.1 "));
        }
    }
}
