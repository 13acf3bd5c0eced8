//! F1: a peer link notices a connection that makes no progress, or that the
//! peer closed, and dials again, on real loopback TCP. The "peer" here is a
//! bare listener, so the test controls what the other end does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;
use cohort_actors::test_support::{LinkIdentity, PeerLink, SendFrames};
use cohort_actors::{Drops, LinkEvent, LinkState, LinkTiming, NodeMetrics};
use cohort_messages::{ClusterId, NodeId};
use tokio::net::TcpListener;

fn timing() -> LinkTiming {
    LinkTiming {
        stall_timeout: Duration::from_millis(600),
        connect_timeout: Duration::from_millis(300),
        redial_backoff_max: Duration::from_millis(100),
        socket_unsent_max_bytes: 16 * 1024,
    }
}

fn start_link(address: SocketAddr, metrics: &Arc<NodeMetrics>) -> (Addr<PeerLink>, Arc<LinkState>) {
    start_link_with(address, metrics, timing())
}

fn start_link_with(
    address: SocketAddr,
    metrics: &Arc<NodeMetrics>,
    timing: LinkTiming,
) -> (Addr<PeerLink>, Arc<LinkState>) {
    let identity =
        LinkIdentity { cluster: ClusterId(7), node: NodeId(1), shard_count: 1, shard: 0, peer: NodeId(2), address };
    let state = Arc::new(LinkState::default());
    let drops = Arc::new(Drops::new(Arc::clone(metrics)));
    // Plaintext: the "peer" is a bare listener that only accepts or reads.
    (PeerLink::new(identity, timing, None, Arc::clone(&state), drops).start(), state)
}

async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

#[actix_rt::test]
async fn f1_a_connection_that_takes_nothing_is_replaced_after_the_stall_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    // The peer accepts and holds every connection but never reads: the
    // kernel buffers fill, and then the link's writes make no progress.
    let (accepted_tx, mut accepted) = tokio::sync::mpsc::unbounded_channel();
    actix_rt::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = accepted_tx.send(stream);
        }
    });
    let metrics = Arc::new(NodeMetrics::new());
    let (link, state) = start_link(address, &metrics);
    assert!(wait_for(Duration::from_secs(5), || state.connected.load(Ordering::Relaxed)).await, "the link connects");
    let first = accepted.recv().await.expect("the first connection");
    let chunk = Bytes::from(vec![0u8; 256 * 1024]);
    let started = Instant::now();
    let stalled = wait_for(Duration::from_secs(20), || {
        if state.connected.load(Ordering::Relaxed) && !state.congested.load(Ordering::Relaxed) {
            link.do_send(SendFrames { parts: vec![chunk.clone()], frames: 1 });
        }
        metrics.link_events(LinkEvent::Stalled) > 0
    })
    .await;
    assert!(stalled, "a connection whose writes are not taken is given up as stalled");
    assert!(started.elapsed() >= timing().stall_timeout, "not before the stall timeout");
    let second = tokio::time::timeout(Duration::from_secs(5), accepted.recv()).await;
    assert!(matches!(second, Ok(Some(_))), "the link dials again at once");
    assert!(wait_for(Duration::from_secs(5), || state.connected.load(Ordering::Relaxed)).await, "and is connected");
    assert!(metrics.link_events(LinkEvent::Connected) >= 2, "two connections made");
    drop(first);
}

#[actix_rt::test]
async fn f1_a_connection_the_peer_closes_is_noticed_without_a_write() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let (accepted_tx, mut accepted) = tokio::sync::mpsc::unbounded_channel();
    actix_rt::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = accepted_tx.send(stream);
        }
    });
    let metrics = Arc::new(NodeMetrics::new());
    let (_link, state) = start_link(address, &metrics);
    let first = accepted.recv().await.expect("the first connection");
    assert!(wait_for(Duration::from_secs(5), || state.connected.load(Ordering::Relaxed)).await, "the link connects");
    // The peer closes it; the link has nothing to send, yet notices.
    drop(first);
    let noticed = wait_for(Duration::from_secs(5), || metrics.link_events(LinkEvent::Closed) > 0).await;
    assert!(noticed, "an idle link notices the peer closing its connection");
    let second = tokio::time::timeout(Duration::from_secs(5), accepted.recv()).await;
    assert!(matches!(second, Ok(Some(_))), "and dials again");
}

#[actix_rt::test]
async fn f1_a_peer_that_comes_back_is_redialed_after_a_bounded_backoff() {
    // Find a free loopback port, and leave it closed for a while: every dial
    // is refused, counted, and tried again after a backoff that stops
    // growing at `redial_backoff_max`.
    let address = std::net::TcpListener::bind("127.0.0.1:0").and_then(|probe| probe.local_addr()).expect("a port");
    let metrics = Arc::new(NodeMetrics::new());
    let (_link, state) = start_link(address, &metrics);
    let failing = wait_for(Duration::from_secs(5), || metrics.link_events(LinkEvent::DialFailed) >= 5).await;
    assert!(failing, "refused dials are counted and repeated");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!state.connected.load(Ordering::Relaxed));
    // The peer is back: the link connects within about the longest backoff
    // plus a dial (0.4 s here; the limit leaves room for a busy machine).
    let listener = TcpListener::bind(address).await.expect("the port again");
    let accepted = tokio::time::timeout(Duration::from_secs(5), listener.accept()).await;
    assert!(matches!(accepted, Ok(Ok(_))), "the link dials the peer that came back");
}

#[actix_rt::test]
async fn k4_a_link_whose_peer_reads_slowly_turns_congested_then_drains_without_dropping() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let (accepted_tx, mut accepted) = tokio::sync::mpsc::unbounded_channel();
    actix_rt::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = accepted_tx.send(stream);
        }
    });
    let metrics = Arc::new(NodeMetrics::new());
    // A stall timeout longer than the test: only congestion is under test.
    let patient = LinkTiming { stall_timeout: Duration::from_secs(60), ..timing() };
    let (link, state) = start_link_with(address, &metrics, patient);
    let mut peer = accepted.recv().await.expect("the connection");
    assert!(wait_for(Duration::from_secs(5), || state.connected.load(Ordering::Relaxed)).await, "the link connects");
    let chunk = Bytes::from(vec![0u8; 256 * 1024]);
    let mut sent_bytes = 0usize;
    let congested = wait_for(Duration::from_secs(20), || {
        if !state.congested.load(Ordering::Relaxed) {
            link.do_send(SendFrames { parts: vec![chunk.clone()], frames: 1 });
            sent_bytes += chunk.len();
        }
        state.congested.load(Ordering::Relaxed)
    })
    .await;
    assert!(congested, "a peer that reads nothing congests the link once its unsent bytes pass the high-water mark");
    // The peer reads everything: the link drains and says so.
    let reader = actix_rt::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buffer = vec![0u8; 1 << 20];
        let mut read_bytes = 0usize;
        while let Ok(read) = peer.read(&mut buffer).await {
            if read == 0 {
                break;
            }
            read_bytes += read;
        }
        read_bytes
    });
    let drained = wait_for(Duration::from_secs(20), || !state.congested.load(Ordering::Relaxed)).await;
    assert!(drained, "the link drains once the peer reads");
    let dropped = metrics.dropped_total();
    assert_eq!(dropped, 0, "congestion slowed the sender; nothing was dropped");
    drop(link);
    let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
    assert!(sent_bytes > 0);
}
