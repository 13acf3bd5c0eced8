//! A replicated key-value store with an HTTP front end that curl can use:
//! an actix-web app that embeds cohort, the shape most host apps of an
//! actix library have.
//!
//! Three cohort nodes run in this process (loopback TCP); keys are spread
//! over `--partitions` groups by hash. Each group's keys are on disk, in a
//! redb file of their own (`cohort_examples::kv_store`, D1). Under
//! `--data-dir` (default: a temporary directory, removed on exit) node N
//! keeps its write-ahead log in `node-N/` and its groups' files in
//! `node-N/kv/group-<id>.redb`.
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

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use clap::Parser;
use cohort_examples::kv_store::{self, KvStore};
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
    /// Where the nodes keep their logs and key-value files (default: a
    /// temporary directory, removed on exit).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// Keys may take this many bytes.
const KEY_SIZE_MAX_BYTES: usize = 256;
const _: () = assert!(KEY_SIZE_MAX_BYTES <= kv_store::KEY_SIZE_MAX_BYTES);
/// A value (a PUT's body) may take this many bytes (`413` beyond).
const BODY_SIZE_MAX_BYTES: usize = 64 * 1024;
/// Connections served at once; more wait in the kernel's backlog.
const CONNECTIONS_MAX: usize = 256;
/// A connection must send its request head within this time (`408`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The partition of a key (FNV-1a, the same in every process).
fn partition(key: &[u8], partitions: u64) -> GroupId {
    let hash = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    GroupId(hash % partitions)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Flags { http, partitions, data_dir } = Flags::parse();
    let (dir, _removed_on_exit) = match data_dir {
        Some(dir) => (dir, None),
        None => tempfile::tempdir().map(|temporary| (temporary.path().to_owned(), Some(temporary)))?,
    };
    actix_rt::System::new().block_on(async move {
        let files = dir.clone();
        let cluster = LocalCluster::builder(3)
            .data_dir(dir)
            .group_kind_per_node("kv", move |node, group| {
                Box::new(KvStore::open_or_empty(&files.join(format!("node-{}", node.0)).join("kv"), group))
            })
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
            client.write(group, kv_store::put(key.as_bytes(), &body)).await.map(|_| (StatusCode::OK, b"ok\n".to_vec()))
        }
        Method::DELETE => {
            client.write(group, kv_store::delete(key.as_bytes())).await.map(|written| match &written.result[..] {
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
