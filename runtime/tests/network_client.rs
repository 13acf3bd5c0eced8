//! C1 on real nodes: the network client (`cohort-client`) against a
//! `LocalCluster` whose nodes serve their client ports over mTLS, exactly
//! as separate processes would; and the embedded `Client` that uses it for
//! groups led by nodes it has no handle for.

use std::time::Duration;

use bytes::Bytes;
use cohort_runtime::client::Request;
use cohort_runtime::network::{ClientError as NetworkError, ClusterClient, TlsFiles, fresh_client_id};
use cohort_runtime::prelude::*;

const GROUPS: u64 = 6;

fn cluster(nodes: usize) -> LocalCluster {
    LocalCluster::builder(nodes)
        .client_ports()
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("register", (0..GROUPS).map(GroupId))
        .start()
        .expect("cluster starts")
}

fn client_files(cluster: &LocalCluster) -> TlsFiles {
    let files = &cluster.certs().client;
    TlsFiles { ca: files.ca.clone(), cert: files.cert.clone(), key: files.key.clone() }
}

/// A network client of `addresses` with the cluster's client certificate.
fn network(cluster: &LocalCluster, addresses: &[std::net::SocketAddr]) -> ClusterClient {
    ClusterClient::builder(cohort_runtime::local::LOCAL_CLUSTER_ID, addresses.iter().map(ToString::to_string))
        .tls(client_files(cluster))
        .timeout(Duration::from_secs(20))
        .build()
        .expect("a network client")
}

/// A fresh client's registration with `group` (H5).
fn registration(group: GroupId) -> Request {
    Request {
        client: fresh_client_id().expect("randomness"),
        request: RequestNumber(1),
        group,
        kind: RequestKind::Write,
        operation: Bytes::new(),
    }
}

/// The first write after `registration`, answered at `registered`:
/// numbered after that op (H5).
fn first_write(registration: &Request, registered: Op, value: &'static str) -> Request {
    Request {
        request: RequestNumber(registered.0 + 1),
        operation: Bytes::from_static(value.as_bytes()),
        ..registration.clone()
    }
}

#[actix_rt::test]
async fn c1_network_client_writes_to_every_group_from_any_node() {
    let cluster = cluster(3);
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let addresses = cluster.client_addresses();
    assert_eq!(addresses.len(), 3);
    for first in 0..addresses.len() {
        // The same list, starting at another node each time.
        let mut rotated = addresses.clone();
        rotated.rotate_left(first);
        let client = network(&cluster, &rotated);
        for group in (0..GROUPS).map(GroupId) {
            let value = format!("from node {} to {group}", first + 1);
            client.write(group, value.clone()).await.unwrap_or_else(|error| panic!("{group}: {error}"));
            let read = client.read(group, "").await.unwrap_or_else(|error| panic!("{group}: {error}"));
            assert_eq!(read.result, Bytes::from(value), "a linearizable read sees the write");
            assert!(client.route(group).is_some(), "{group}: the primary is cached");
        }
        assert!(client.connections_open() <= 3, "at most one connection per node");
    }
    // Any single node answers route queries for every group from its copy
    // of the metadata (owners are reported a moment after a group leads).
    let groups: Vec<GroupId> = (0..GROUPS).map(GroupId).collect();
    for address in &addresses {
        let client = network(&cluster, std::slice::from_ref(address));
        let mut known = 0;
        for _ in 0..50 {
            let routes = client.refresh_routes(&groups).await.expect("a route query");
            known = routes.iter().filter(|(_, route)| route.is_some()).count();
            if known == groups.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(known, groups.len(), "{address} names every group's primary");
    }
}

#[actix_rt::test]
async fn c1_network_client_follows_a_failover() {
    let mut cluster = cluster(3);
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let client = network(&cluster, &cluster.client_addresses());
    let group = GroupId(1);
    client.write(group, "before").await.expect("a write before the crash");
    let primary = client.route(group).expect("the primary is cached").node;
    // H1: on new disks every member recovers first; one that has not yet
    // taken the primary's log when the primary dies cannot vote. Give the
    // third member the round trips it takes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.stop_node(primary);
    // No new addresses: the client finds the new primary among the list.
    let written = client.write(group, "after").await.expect("a write after the primary's node died");
    let now = client.route(group).expect("the new primary is cached").node;
    assert_ne!(now, primary, "the route moved to the new primary");
    let read = client.read(group, "").await.expect("a read after the failover");
    assert_eq!(read.result, Bytes::from_static(b"after"));
    assert!(read.op >= written.op);
}

#[actix_rt::test]
async fn c1_network_client_pipelines_many_groups_on_one_connection_per_node() {
    let cluster = cluster(3);
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let client = network(&cluster, &cluster.client_addresses());
    let mut writes = tokio::task::JoinSet::new();
    for writer in 0..60u64 {
        let client = client.clone();
        // Ten writes per group in flight at once: the client orders each
        // group's writes, and sends the groups' side by side.
        writes.spawn(async move {
            let group = GroupId(writer % GROUPS);
            client.write(group, format!("writer {writer}")).await.map(|written| (group, written.op))
        });
    }
    let mut ops = std::collections::HashSet::new();
    while let Some(joined) = writes.join_next().await {
        let (group, op) = joined.expect("the task").expect("a pipelined write");
        assert!(ops.insert((group, op)), "{group}: op {op} acknowledged twice");
    }
    assert_eq!(ops.len(), 60);
    assert!(client.connections_open() <= 3, "one connection per node at most");
}

#[actix_rt::test]
async fn c1_a_retry_through_another_client_with_the_same_certificate_applies_once() {
    let cluster = cluster(3);
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let addresses = cluster.client_addresses();
    let first = network(&cluster, &addresses);
    let mut reversed = addresses.clone();
    reversed.reverse();
    // Another process with the same certificate and no cached routes.
    let second = network(&cluster, &reversed);
    let registration = registration(GroupId(2));
    let registered = first.retry(registration.clone()).await.expect("the registration");
    let request = first_write(&registration, registered.op, "once");
    let applied = first.retry(request.clone()).await.expect("the write");
    let again = second.retry(request.clone()).await.expect("its retry");
    assert_eq!(applied, again, "answered from the client table: the same op and result");
    let next = first.write(GroupId(2), "next").await.expect("a later write");
    assert!(next.op > applied.op, "the retry did not apply a second time");
}

#[actix_rt::test]
async fn c1_network_client_refuses_the_metadata_group_and_names_a_foreign_ca() {
    let cluster = cluster(1);
    let client = network(&cluster, &cluster.client_addresses());
    match client.write(GroupId::METADATA, "DeleteGroup").await {
        Err(NetworkError::Forbidden { .. }) => {}
        other => panic!("expected Forbidden, got {other:?}"),
    }
    let elsewhere = tempfile::tempdir().expect("temp dir");
    let foreign = cohort_runtime::tls::local_cluster(elsewhere.path(), [NodeId(1)]).expect("foreign certificates");
    let foreign = TlsFiles { ca: foreign.client.ca, cert: foreign.client.cert, key: foreign.client.key };
    let stranger = ClusterClient::builder(
        cohort_runtime::local::LOCAL_CLUSTER_ID,
        cluster.client_addresses().iter().map(ToString::to_string),
    )
    .tls(foreign)
    .timeout(Duration::from_secs(5))
    .build()
    .expect("a client of another CA");
    let started = std::time::Instant::now();
    match stranger.write(GroupId(0), "x").await {
        Err(NetworkError::Tls { .. }) => {}
        other => panic!("expected a TLS error, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(4), "a TLS failure is not retried until the timeout");
}

/// A group of `cluster` whose primary is not node 1, and one whose primary is.
async fn groups_led(cluster: &LocalCluster) -> (GroupId, GroupId) {
    let client = cluster.network_client().expect("a network client");
    let (mut elsewhere, mut here) = (None, None);
    for group in (0..GROUPS).map(GroupId) {
        client.write(group, "probe").await.expect("a probe write");
        match client.route(group).map(|route| route.node) {
            Some(NodeId(1)) => here = here.or(Some(group)),
            Some(_) => elsewhere = elsewhere.or(Some(group)),
            None => {}
        }
    }
    (elsewhere.expect("a group led by node 2 or 3"), here.expect("a group led by node 1"))
}

#[actix_rt::test]
async fn c1_embedded_client_with_one_handle_writes_to_a_group_led_by_another_node() {
    let cluster = cluster(3);
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let (elsewhere, _) = groups_led(&cluster).await;
    let node_1 = cluster.handle(NodeId(1)).expect("node 1");
    // Without the client ports: the primary is out of reach.
    let alone = Client::new([node_1.clone()]).timeout(Duration::from_secs(1));
    assert!(matches!(alone.write(elsewhere, "x").await, Err(ClientError::PrimaryElsewhere { .. })));
    // With them: the ordinary API works for every group.
    let addresses = cluster.client_addresses().iter().map(ToString::to_string).collect::<Vec<_>>();
    let client = Client::new([node_1])
        .client_ports(cohort_runtime::local::LOCAL_CLUSTER_ID, addresses, &cluster.certs().client)
        .expect("client ports")
        .timeout(Duration::from_secs(20));
    for group in (0..GROUPS).map(GroupId) {
        client.write(group, "through node 1's process").await.unwrap_or_else(|error| panic!("{group}: {error}"));
        let read = client.read(group, "").await.unwrap_or_else(|error| panic!("{group}: {error}"));
        assert_eq!(read.result, Bytes::from_static(b"through node 1's process"));
    }
}

#[actix_rt::test]
async fn c1_embedded_client_keeps_exactly_once_across_the_local_and_network_paths() {
    let cluster = cluster(3);
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let (_, here) = groups_led(&cluster).await;
    let addresses = cluster.client_addresses().iter().map(ToString::to_string).collect::<Vec<_>>();
    let client = Client::new([cluster.handle(NodeId(1)).expect("node 1")])
        .client_ports(cohort_runtime::local::LOCAL_CLUSTER_ID, addresses, &cluster.certs().client)
        .expect("client ports")
        .timeout(Duration::from_secs(20));
    let network = client.network_client().expect("the network client").clone();
    // Local first (node 1 leads `here`), then the same request over the network.
    let local_registration = registration(here);
    let registered = client.retry(local_registration.clone()).await.expect("the registration");
    let request = first_write(&local_registration, registered.op, "local first");
    let local = client.retry(request.clone()).await.expect("through node 1's handle");
    let remote = network.retry(request).await.expect("the same request over the client port");
    assert_eq!((local.op, local.result.clone()), (remote.op, remote.result), "one op, answered twice");
    // Network first, then the local path.
    let network_registration = registration(here);
    let registered = network.retry(network_registration.clone()).await.expect("the registration");
    let request = first_write(&network_registration, registered.op, "network first");
    let remote = network.retry(request.clone()).await.expect("over the client port");
    let local = client.retry(request).await.expect("the same request through the handle");
    assert_eq!((local.op, local.result), (remote.op, remote.result), "one op, answered twice");
}
