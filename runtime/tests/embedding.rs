//! The embedding API on real nodes in one process: group kinds, the client
//! (redirects, failover, exactly-once retries, linearizable reads) and custom
//! group actors (applied ops in order and once, roles, restores, resyncs).

use std::time::Duration;

use actix::prelude::*;
use cohort_runtime::prelude::*;

/// A counter: every write adds one and returns the new count.
#[derive(Default)]
struct Counter(u64);

impl StateMachine for Counter {
    fn apply(&mut self, _op: Op, _operation: &[u8]) -> Bytes {
        self.0 += 1;
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn snapshot(&self) -> Bytes {
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0 = count(snapshot);
        Ok(())
    }
}

fn count(bytes: &[u8]) -> u64 {
    bytes.try_into().map(u64::from_le_bytes).unwrap_or(0)
}

/// Follows a counter group: the count it derives, the ops it saw, its roles.
#[derive(Default)]
struct Follower {
    mailbox: Option<usize>,
    count: u64,
    through: Op,
    ops: Vec<Op>,
    roles: Vec<GroupRole>,
    resyncs: u64,
}

impl Actor for Follower {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(capacity) = self.mailbox {
            ctx.set_mailbox_capacity(capacity);
        }
    }
}

impl Handler<Applied> for Follower {
    type Result = ();
    fn handle(&mut self, applied: Applied, _: &mut Context<Self>) {
        for op in &applied.ops {
            assert!(op.op > self.through, "ops in order, once: {} after {}", op.op, self.through);
            assert_eq!(count(&op.result), self.count + 1, "the result is the state machine's");
            self.count += 1;
            self.through = op.op;
            self.ops.push(op.op);
        }
        self.through = applied.through;
    }
}

impl Handler<Restored> for Follower {
    type Result = ();
    fn handle(&mut self, restored: Restored, _: &mut Context<Self>) {
        self.count = count(&restored.state);
        self.through = restored.op;
        self.resyncs += u64::from(restored.resync);
    }
}

impl Handler<RoleChanged> for Follower {
    type Result = ();
    fn handle(&mut self, changed: RoleChanged, _: &mut Context<Self>) {
        self.roles.push(changed.role);
    }
}

/// What a follower knows: (count, through, ops seen, roles, resyncs).
#[derive(Message)]
#[rtype(result = "(u64, Op, Vec<Op>, Vec<GroupRole>, u64)")]
struct Get;

impl Handler<Get> for Follower {
    type Result = MessageResult<Get>;
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> Self::Result {
        MessageResult((self.count, self.through, self.ops.clone(), self.roles.clone(), self.resyncs))
    }
}

async fn follower(cluster: &LocalCluster, node: NodeId, group: GroupId) -> (u64, Op, Vec<Op>, Vec<GroupRole>, u64) {
    let handle = cluster.handle(node).expect("node runs");
    let actor = handle.group_actor::<Follower>(group).await.expect("the kind has a Follower");
    actor.send(Get).await.expect("actor answers")
}

/// Wait until node `node`'s follower of `group` has derived `want`.
async fn wait_count(cluster: &LocalCluster, node: NodeId, group: GroupId, want: u64) -> (u64, Op, Vec<Op>) {
    let mut last = (0, Op(0), Vec::new());
    for _ in 0..300 {
        let (count, through, ops, _, _) = follower(cluster, node, group).await;
        last = (count, through, ops);
        if last.0 == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    last
}

#[test]
fn kind_mistakes_are_typed_and_say_what_to_do() {
    let dir = std::env::temp_dir().join(format!("cohort-kinds-{}", std::process::id()));
    let base = || {
        NodeBuilder::new(ClusterId(1), NodeId(1))
            .listen("127.0.0.1:0".parse().expect("address"))
            .data_dir(&dir)
            .state_machine(|_| Box::new(Register::default()))
    };
    let unknown = base().group(GroupPlacement::new(GroupId(0), vec![NodeId(1)]).kind("log")).start();
    match unknown {
        Err(NodeError::Kind(GroupKindError::Unknown { group, kind, registered })) => {
            assert_eq!((group, kind.as_str(), registered.as_str()), (GroupId(0), "log", "\"default\""));
        }
        other => panic!("expected an unknown kind, got {:?}", other.err()),
    }
    let duplicate = base().group_kind("default", |_| Box::new(Register::default())).start();
    assert!(matches!(duplicate, Err(NodeError::Kind(GroupKindError::Duplicate { .. }))));
    let orphan = base().group_actor("log", |_: &GroupReplica| Follower::default()).start();
    let error = orphan.err().expect("an actor without its kind is refused");
    assert!(error.to_string().contains("register the kind's state machine"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_kinds_one_client_failover_and_exactly_once() {
    actix_rt::System::new().block_on(async {
        let cluster = LocalCluster::builder(3)
            .group_kind("register", |_| Box::new(Register::default()))
            .group_kind("counter", |_| Box::new(Counter::default()))
            .groups("register", [GroupId(0)])
            .groups("counter", [GroupId(1)])
            .start()
            .expect("cluster starts");
        let client = cluster.client().timeout(Duration::from_secs(20));
        // Group 1's primary is node 2: the client follows the redirect.
        client.write(GroupId(0), "a").await.expect("register write");
        let previous = client.write(GroupId(0), "b").await.expect("register write");
        assert_eq!(previous.result, "a", "a register returns what it replaced");
        let second = client.write(GroupId(1), "+").await.expect("counter write");
        let second = client.write(GroupId(1), "+").await.expect("counter write").op.max(second.op);
        // A retry of an applied write is answered from the client table
        // (client 77 numbers its own: its registration first, H5).
        let registration = cohort_runtime::client::Request {
            client: ClientId(77),
            request: RequestNumber(1),
            group: GroupId(1),
            kind: RequestKind::Write,
            operation: Bytes::new(),
        };
        let registered = client.retry(registration.clone()).await.expect("registered");
        let request = cohort_runtime::client::Request { request: RequestNumber(registered.op.0 + 1), ..registration };
        let first = client.retry(request.clone()).await.expect("applied");
        let again = client.retry(request).await.expect("answered again");
        assert_eq!((first.op, count(&first.result)), (again.op, count(&again.result)), "applied once");
        assert_eq!(count(&first.result), 3);
        // A linearizable read sees every acknowledged write.
        let read = client.read(GroupId(1), "").await.expect("read");
        assert_eq!(count(&read.result), 3);
        assert!(read.op >= first.op.max(second), "the read's applied point covers the writes");
        // A caller that stops waiting leaves its write in doubt; the next
        // write starts a new client id and is not refused.
        let _ = tokio::time::timeout(Duration::from_micros(1), client.write(GroupId(1), "+")).await;
        let next = client.write(GroupId(1), "+").await.expect("a write after an abandoned one");
        assert!(count(&next.result) >= 4);
        // The primary of group 1 (node 2) crashes: the client finds the new one.
        let mut cluster = cluster;
        cluster.stop_node(NodeId(2));
        let client = cluster.client().timeout(Duration::from_secs(20));
        let after = client.write(GroupId(1), "+").await.expect("the group fails over");
        assert_eq!(count(&after.result), count(&next.result) + 1, "nothing acknowledged was lost");
        cluster.stop();
    });
}

#[test]
fn custom_actors_follow_applied_ops_roles_and_restarts() {
    actix_rt::System::new().block_on(async {
        let mut cluster = LocalCluster::builder(3)
            .group_kind("counter", |_| Box::new(Counter::default()))
            .group_actor("counter", |_: &GroupReplica| Follower::default())
            // A tiny mailbox: cohort must resync instead of leaving a gap
            // (eight concurrent writers make backups' followers overflow).
            .group_kind("tight", |_| Box::new(Counter::default()))
            .group_actor("tight", |_: &GroupReplica| Follower { mailbox: Some(1), ..Follower::default() })
            .groups("counter", [GroupId(0)])
            .groups("tight", [GroupId(1)])
            .start()
            .expect("cluster starts");
        let client = cluster.client().timeout(Duration::from_secs(20));
        for _ in 0..20 {
            client.write(GroupId(0), "+").await.expect("write");
        }
        let writers: Vec<_> = (0..8)
            .map(|_| {
                let client = Client::new(cluster.handles()).timeout(Duration::from_secs(20));
                actix_rt::spawn(async move {
                    for _ in 0..10 {
                        client.write(GroupId(1), "+").await.expect("write");
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.expect("writer");
        }
        for node in [NodeId(1), NodeId(2), NodeId(3)] {
            let (count, through, ops) = wait_count(&cluster, node, GroupId(0), 20).await;
            assert_eq!(count, 20, "{node}: every applied op, once");
            // The client's registration took op 1 and applied nothing (H5).
            assert_eq!(ops, (2..=21).map(Op).collect::<Vec<_>>(), "{node}: in op order");
            assert_eq!(through, Op(21));
            let (count, _, _) = wait_count(&cluster, node, GroupId(1), 80).await;
            assert_eq!(count, 80, "{node}: the tight follower caught up (resyncs: no gaps)");
        }
        let (_, _, _, roles, _) = follower(&cluster, NodeId(1), GroupId(0)).await;
        // (A member started on a new disk recovers first, as a backup: H1.)
        let led = roles.iter().find(|role| matches!(role, GroupRole::Primary(_)));
        assert_eq!(led, Some(&GroupRole::Primary(View(0))), "node 1 leads group 0 in view 0: {roles:?}");
        // A restarted node's new actor is rebuilt from the log (or a snapshot).
        cluster.stop_node(NodeId(3));
        cluster.restart_node(NodeId(3)).expect("restart");
        let (rebuilt, through, _) = wait_count(&cluster, NodeId(3), GroupId(0), 20).await;
        assert_eq!((rebuilt, through), (20, Op(21)), "the new instance sees the whole applied state");
        let (_, _, _, roles, _) = follower(&cluster, NodeId(3), GroupId(0)).await;
        assert!(!roles.is_empty() && roles.windows(2).all(|pair| pair[0] != pair[1]), "role changes only: {roles:?}");
        // A read index: the read's applied point, then the follower's index.
        let read = client.read(GroupId(0), "").await.expect("read");
        let (derived, through, _) = wait_count(&cluster, NodeId(1), GroupId(0), count(&read.result)).await;
        assert!(through >= read.op && derived == 20, "the primary's follower reached the read's op");
        cluster.stop();
    });
}

/// A host without actix: cohort starts its own System on a thread, and the
/// handle and client work from a plain tokio runtime.
#[test]
fn a_detached_node_serves_a_plain_tokio_host() {
    let dir = std::env::temp_dir().join(format!("cohort-detached-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let certs = cohort_runtime::tls::local_cluster(&dir.join("certs"), [NodeId(1)]).expect("certificates");
    let node = NodeBuilder::new(ClusterId(1), NodeId(1))
        .tls(certs.node(NodeId(1)).expect("node 1's files").clone())
        .listen("127.0.0.1:0".parse().expect("address"))
        .data_dir(&dir)
        .cluster_config(LocalCluster::fast_timing())
        .state_machine(|_| Box::new(Register::default()))
        .group(GroupPlacement::new(GroupId(0), vec![NodeId(1)]))
        .start_detached()
        .expect("node starts");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let client = Client::new([node.handle()]);
        client.write(GroupId(0), "from tokio").await.expect("write");
        assert_eq!(client.read(GroupId(0), "").await.expect("read").result, "from tokio");
    });
    node.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// D2: a register whose apply runs on the shard's apply worker and, while
/// its gate is shut, blocks there (a storage engine stalled on its disk).
struct Gated {
    value: Bytes,
    gate: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

impl StateMachine for Gated {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        let (open, opened) = &*self.gate;
        let mut open = open.lock().expect("gate lock");
        while !*open {
            open = opened.wait(open).expect("gate lock");
        }
        std::mem::replace(&mut self.value, Bytes::copy_from_slice(operation))
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        self.value.clone()
    }
    fn snapshot(&self) -> Bytes {
        self.value.clone()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.value = Bytes::copy_from_slice(snapshot);
        Ok(())
    }
    fn apply_off_shard(&self) -> bool {
        true
    }
}

#[test]
fn d2_an_apply_blocked_on_the_apply_worker_holds_up_no_other_group_of_the_shard() {
    actix_rt::System::new().block_on(async {
        let gate = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let gated = std::sync::Arc::clone(&gate);
        // One shard per node: both groups share it on every node.
        let cluster = LocalCluster::builder(3)
            .shards(1)
            .group_kind("gated", move |_| Box::new(Gated { value: Bytes::new(), gate: std::sync::Arc::clone(&gated) }))
            .group_kind("counter", |_| Box::new(Counter::default()))
            .groups("gated", [GroupId(0)])
            .groups("counter", [GroupId(1)])
            .start()
            .expect("cluster starts");
        let client = cluster.client().timeout(Duration::from_secs(20));
        // Every replica of group 0 blocks in its first write's apply.
        let blocked = {
            let client = client.clone();
            actix_rt::spawn(async move { client.write(GroupId(0), "held").await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Meanwhile group 1, on the same shard, commits, applies and reads
        // (a liveness bound: with the apply on the shard's thread, nothing
        // of the shard moves until the gate opens).
        let other = tokio::time::timeout(Duration::from_secs(30), async {
            for want in 1..=5u64 {
                let written = client.write(GroupId(1), "+").await.expect("the other group goes on");
                assert_eq!(count(&written.result), want);
            }
            client.read(GroupId(1), "").await.expect("the other group reads")
        })
        .await;
        let still_blocked = !blocked.is_finished();
        // Open the gate: group 0's write is answered, and its reads see it.
        {
            let (open, opened) = &*gate;
            *open.lock().expect("gate lock") = true;
            opened.notify_all();
        }
        let read = other.expect("D2: the other group of the shard went on while group 0's apply was blocked");
        assert_eq!(count(&read.result), 5);
        assert!(still_blocked, "group 0's write waited for its apply");
        let written = blocked.await.expect("the task ran").expect("group 0's write completes");
        assert_eq!(&written.result[..], b"", "a register returns what it replaced");
        let read = client.read(GroupId(0), "").await.expect("group 0 reads");
        assert_eq!(&read.result[..], b"held");
        cluster.stop();
    });
}
