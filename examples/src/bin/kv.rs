//! A replicated key-value store with an HTTP front end that curl can use.
//!
//! Three cohort nodes run in this process (loopback TCP, write-ahead logs in
//! a temporary directory); keys are spread over `--partitions` groups by hash.
//! The HTTP server (tokio only, one request per connection, bounded sizes)
//! turns requests into cohort writes and linearizable reads:
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
use std::time::Duration;

use cohort_examples::args::Args;
use cohort_examples::http::{read_request, write_response};
use cohort_runtime::prelude::*;

/// Keys may take this many bytes.
const KEY_SIZE_MAX_BYTES: usize = 256;
/// Connections served at once; more wait in the kernel's backlog.
const CONNECTIONS_MAX: usize = 256;
/// A connection must send its request within this time.
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
    let args = Args::from_env();
    let http: std::net::SocketAddr = args.value("--http", "127.0.0.1:8080".parse()?)?;
    let partitions: u64 = args.value("--partitions", 8)?;
    actix_rt::System::new().block_on(async move {
        let cluster = LocalCluster::builder(3)
            .group_kind("kv", |_| Box::new(Kv::default()))
            .groups("kv", (0..partitions).map(GroupId))
            .start()?;
        let listener = tokio::net::TcpListener::bind(http).await?;
        println!("kv: serving http://{} ({partitions} partitions on 3 nodes)", listener.local_addr()?);
        let handles = cluster.handles();
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => accepted?,
                _ = tokio::signal::ctrl_c() => break,
                _ = terminate.recv() => break,
            };
            let Ok(slot) = std::sync::Arc::clone(&slots).acquire_owned().await else { break };
            let client = Client::new(handles.clone());
            actix_rt::spawn(async move {
                serve(stream, client, partitions).await;
                drop(slot);
            });
        }
        println!("kv: stopping");
        cluster.stop();
        Ok(())
    })
}

/// Answer one request on `stream`.
async fn serve(mut stream: tokio::net::TcpStream, client: Client, partitions: u64) {
    let (status, reason, body) = match tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut stream)).await {
        Err(_) => (408, "Request Timeout", b"send the request faster\n".to_vec()),
        Ok(Err(error)) => match error.status() {
            Some((status, reason)) => (status, reason, format!("{error}\n").into_bytes()),
            None => return,
        },
        Ok(Ok(request)) => answer(&client, partitions, &request.method, &request.path, request.body).await,
    };
    let _ = write_response(&mut stream, status, reason, &body).await;
}

async fn answer(
    client: &Client,
    partitions: u64,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> (u16, &'static str, Vec<u8>) {
    let Some(key) = path.strip_prefix("/kv/").filter(|key| !key.is_empty() && key.len() <= KEY_SIZE_MAX_BYTES) else {
        return (404, "Not Found", format!("use /kv/<key>, a key of 1 to {KEY_SIZE_MAX_BYTES} bytes\n").into_bytes());
    };
    let group = partition(key.as_bytes(), partitions);
    let result = match method {
        "PUT" => client.write(group, put(key.as_bytes(), &body)).await.map(|_| (200, "OK", b"ok\n".to_vec())),
        "DELETE" => {
            client.write(group, [&b"D"[..], key.as_bytes()].concat()).await.map(|written| match &written.result[..] {
                b"existed" => (200, "OK", b"deleted\n".to_vec()),
                _ => (404, "Not Found", b"no such key\n".to_vec()),
            })
        }
        "GET" => client.read(group, key.to_string()).await.map(|read| match read.result.split_first() {
            Some((1, value)) => (200, "OK", value.to_vec()),
            _ => (404, "Not Found", b"no such key\n".to_vec()),
        }),
        _ => return (405, "Method Not Allowed", b"use GET, PUT or DELETE\n".to_vec()),
    };
    result.unwrap_or_else(|error| (503, "Service Unavailable", format!("{error}\n").into_bytes()))
}
