//! A replicated key-value store with an HTTP front end that curl can use:
//! an actix-web app that embeds cohort, the shape most host apps of an
//! actix library have.
//!
//! Three cohort nodes run in this process (loopback TCP, write-ahead logs in
//! a temporary directory); keys are spread over `--partitions` groups by hash.
//! The actix-web app (request head timeout, connection cap and body limit set
//! below) turns requests into cohort writes and linearizable reads:
//!
//! ```text
//! cargo run -p cohort-examples --bin kv -- --http 127.0.0.1:8080
//! curl -X PUT --data-binary 'hello' http://127.0.0.1:8080/kv/greeting   # 200 "ok"
//! curl http://127.0.0.1:8080/kv/greeting                                # 200 "hello"
//! curl -X DELETE http://127.0.0.1:8080/kv/greeting                      # 200 "deleted"
//! curl -i http://127.0.0.1:8080/kv/greeting                             # 404
//! ```
//!
//! It stops on Ctrl-C or SIGTERM.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use clap::Parser;
use cohort_runtime::prelude::*;

/// The example's flags.
#[derive(Parser)]
#[command(about = "A replicated key-value store over HTTP, on three cohort nodes in this process")]
struct Flags {
    /// Where the HTTP front end listens (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// Partition groups the keys are spread over.
    #[arg(long, default_value_t = 8)]
    partitions: u64,
}

/// Keys may take this many bytes.
const KEY_SIZE_MAX_BYTES: usize = 256;
/// A value (a PUT's body) may take this many bytes (`413` beyond).
const BODY_SIZE_MAX_BYTES: usize = 64 * 1024;
/// Connections served at once; more wait in the kernel's backlog.
const CONNECTIONS_MAX: usize = 256;
/// A connection must send its request head within this time (`408`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One partition's keys. Operations: `P` key-length(u16) key value, or `D`
/// key. A read's query is the key; the answer is `1` value, or `0` if absent.
#[derive(Default)]
struct Kv(BTreeMap<Bytes, Bytes>);

fn put(key: &[u8], value: &[u8]) -> Bytes {
    [&b"P"[..], &(key.len() as u16).to_le_bytes(), key, value].concat().into()
}

/// Take a field prefixed by its little-endian length of `width` bytes.
fn take(input: &mut &[u8], width: usize) -> Result<Bytes, String> {
    let prefix = input.get(..width).ok_or("truncated length")?;
    let length = prefix.iter().rev().fold(0usize, |n, byte| (n << 8) | usize::from(*byte));
    let field = Bytes::copy_from_slice(input.get(width..width + length).ok_or("truncated field")?);
    *input = &input[width + length..];
    Ok(field)
}

impl StateMachine for Kv {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        let existed = match operation.split_first() {
            Some((b'P', mut rest)) => match take(&mut rest, 2) {
                Ok(key) => self.0.insert(key, Bytes::copy_from_slice(rest)).is_some(),
                Err(_) => return Bytes::from_static(b"malformed"),
            },
            Some((b'D', key)) => self.0.remove(key).is_some(),
            _ => return Bytes::from_static(b"malformed"),
        };
        Bytes::from_static(if existed { b"existed" } else { b"new" })
    }

    fn read(&self, key: &[u8]) -> Bytes {
        match self.0.get(key) {
            Some(value) => [&[1u8][..], value].concat().into(),
            None => Bytes::from_static(&[0]),
        }
    }

    fn snapshot(&self) -> Bytes {
        let mut out = Vec::new();
        for (key, value) in &self.0 {
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        out.into()
    }

    fn restore(&mut self, mut snapshot: &[u8]) -> Result<(), String> {
        self.0.clear();
        while !snapshot.is_empty() {
            let key = take(&mut snapshot, 2)?;
            let value = take(&mut snapshot, 4)?;
            self.0.insert(key, value);
        }
        Ok(())
    }
}

/// The partition of a key (FNV-1a, the same in every process).
fn partition(key: &[u8], partitions: u64) -> GroupId {
    let hash = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    GroupId(hash % partitions)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Flags { http, partitions } = Flags::parse();
    actix_rt::System::new().block_on(async move {
        let cluster = LocalCluster::builder(3)
            .group_kind("kv", |_| Box::new(Kv::default()))
            .groups("kv", (0..partitions).map(GroupId))
            .start()?;
        let listener = std::net::TcpListener::bind(http)?;
        println!("kv: serving http://{} ({partitions} partitions on 3 nodes)", listener.local_addr()?);
        let handles = cluster.handles();
        // The factory runs once per worker thread; each worker has its own client.
        let server = HttpServer::new(move || {
            let store = Store { client: Client::new(handles.clone()), partitions };
            App::new()
                .app_data(web::Data::new(store))
                .app_data(web::PayloadConfig::new(BODY_SIZE_MAX_BYTES))
                .service(web::resource("/kv/{key:.*}").to(answer))
                .default_service(web::to(not_found))
        })
        .client_request_timeout(REQUEST_TIMEOUT)
        .max_connections(CONNECTIONS_MAX)
        // This example stops on its own signals, below, then stops cohort.
        .disable_signals()
        .listen(listener)?
        .run();
        let stopper = server.handle();
        let serving = actix_rt::spawn(server);
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        println!("kv: stopping");
        stopper.stop(true).await;
        let _ = serving.await;
        cluster.stop();
        Ok(())
    })
}

/// What every request of one worker shares.
struct Store {
    client: Client,
    partitions: u64,
}

fn text(status: actix_web::http::StatusCode, body: impl Into<Vec<u8>>) -> HttpResponse {
    HttpResponse::build(status).content_type("text/plain; charset=utf-8").body(body.into())
}

async fn not_found() -> HttpResponse {
    let usage = format!("use /kv/<key>, a key of 1 to {KEY_SIZE_MAX_BYTES} bytes\n");
    text(actix_web::http::StatusCode::NOT_FOUND, usage)
}

/// `PUT`, `GET` or `DELETE` one key (the path as sent, after `/kv/`).
async fn answer(request: HttpRequest, body: web::Bytes, store: web::Data<Store>) -> HttpResponse {
    use actix_web::http::{Method, StatusCode};
    let Some(key) =
        request.path().strip_prefix("/kv/").filter(|key| !key.is_empty() && key.len() <= KEY_SIZE_MAX_BYTES)
    else {
        return not_found().await;
    };
    let (client, group) = (&store.client, partition(key.as_bytes(), store.partitions));
    let result = match *request.method() {
        Method::PUT => {
            client.write(group, put(key.as_bytes(), &body)).await.map(|_| (StatusCode::OK, b"ok\n".to_vec()))
        }
        Method::DELETE => {
            client.write(group, [&b"D"[..], key.as_bytes()].concat()).await.map(|written| match &written.result[..] {
                b"existed" => (StatusCode::OK, b"deleted\n".to_vec()),
                _ => (StatusCode::NOT_FOUND, b"no such key\n".to_vec()),
            })
        }
        Method::GET => client.read(group, key.to_string()).await.map(|read| match read.result.split_first() {
            Some((1, value)) => (StatusCode::OK, value.to_vec()),
            _ => (StatusCode::NOT_FOUND, b"no such key\n".to_vec()),
        }),
        _ => return text(StatusCode::METHOD_NOT_ALLOWED, "use GET, PUT or DELETE\n"),
    };
    let (status, body) =
        result.unwrap_or_else(|error| (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n").into_bytes()));
    text(status, body)
}
