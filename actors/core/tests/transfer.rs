//! C4, the directed view change, on three shards driven by hand: the
//! primary hands its group to a chosen member that is caught up, refuses
//! with a typed error otherwise, and its own StartViewChange releases the
//! backups' leases while any other member's still waits for them (V7). The
//! simulator transfers primaries at random under faults
//! (`tests/src/sim/transfers.rs`).

mod common;
use common::Counter;

use std::collections::VecDeque;

use bytes::Bytes;
use cohort_core::quorum::Quorums;
use cohort_core::{CoreConfig, Effect, GroupSpec, Replica, Shard, Status, TransferError, WriteMode};
use cohort_messages::seal::Seal;
use cohort_messages::{
    ClientId, CommitEntry, CommitReplyEntry, GroupId, Incarnation, MemberIndex, Message, NodeId, Op, Outcome, Reply,
    Request, RequestKind, RequestNumber, StartViewChange, View,
};

const G: GroupId = GroupId(7);
/// Member i is node i + 1; node 1 leads view 0.
const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];
const CLIENT: ClientId = ClientId(42);

/// What travels between the shards.
#[derive(Debug)]
enum Frame {
    Message(Message),
    Commits(Vec<CommitEntry>),
    Replies(Vec<CommitReplyEntry>),
}

/// Three shards, one member of `G` each, storage that completes every flush
/// at once and a network that delivers in order, without delay, unless a
/// test holds frames back.
struct Cluster {
    shards: Vec<Shard>,
    now: u64,
    /// Frames sent and not yet delivered: (from, to, frame).
    queue: VecDeque<(NodeId, NodeId, Frame)>,
    /// Nodes whose incoming frames are dropped.
    cut: Vec<NodeId>,
    replies: Vec<Reply>,
    next_request: u64,
}

fn index(node: NodeId) -> usize {
    node.0 as usize - 1
}

impl Cluster {
    fn new() -> Cluster {
        let mut cluster = Cluster {
            shards: Vec::new(),
            now: 0,
            queue: VecDeque::new(),
            cut: Vec::new(),
            replies: Vec::new(),
            next_request: 1,
        };
        for (me, node) in NODES.iter().enumerate() {
            let spec = GroupSpec {
                group: G,
                incarnation: Incarnation(1),
                members: NODES.to_vec(),
                learners: Vec::new(),
                me: MemberIndex(me as u8),
                quorums: Quorums::new(3, None).expect("a majority"),
                write_mode: WriteMode::Sync,
                report_applied: false,
            };
            let mut shard = Shard::new(*node, CoreConfig::default());
            shard.create_group(spec, Box::new(Counter(0))).expect("created");
            cluster.shards.push(shard);
        }
        for node in NODES {
            cluster.drain(node);
        }
        cluster.deliver_all();
        cluster
    }

    fn shard(&mut self, node: NodeId) -> &mut Shard {
        &mut self.shards[index(node)]
    }

    fn replica(&self, node: NodeId) -> &Replica {
        self.shards[index(node)].replica(G).expect("hosted")
    }

    /// Execute what `node`'s shard asked for: flushes complete at once,
    /// sends join the queue, replies are kept.
    fn drain(&mut self, node: NodeId) {
        loop {
            let effects = self.shard(node).drain_effects();
            if effects.is_empty() {
                break;
            }
            for effect in effects {
                match effect {
                    Effect::Flush { id } => self.shard(node).on_flushed(id),
                    Effect::Send { to, message } => self.queue.push_back((node, to, Frame::Message(message))),
                    Effect::SendCommitBatch { to, entries } => {
                        self.queue.push_back((node, to, Frame::Commits(entries)))
                    }
                    Effect::SendCommitReplyBatch { to, entries } => {
                        self.queue.push_back((node, to, Frame::Replies(entries)))
                    }
                    Effect::Reply(reply) => self.replies.push(reply),
                    _ => {}
                }
            }
        }
        self.shards[index(node)].invariants();
    }

    fn deliver(&mut self, from: NodeId, to: NodeId, frame: Frame) {
        if self.cut.contains(&to) {
            return;
        }
        match frame {
            Frame::Message(message) => self.shard(to).on_message(from, message),
            Frame::Commits(entries) => self.shard(to).on_commit_entries(from, &entries),
            Frame::Replies(entries) => self.shard(to).on_commit_reply_entries(from, &entries),
        }
        self.drain(to);
    }

    fn deliver_all(&mut self) {
        while let Some((from, to, frame)) = self.queue.pop_front() {
            self.deliver(from, to, frame);
        }
    }

    /// Take the queued frames that `pick` selects out of the queue.
    fn take(&mut self, pick: impl Fn(NodeId, NodeId, &Frame) -> bool) -> Vec<(NodeId, NodeId, Frame)> {
        let (taken, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.queue).into_iter().partition(|(from, to, frame)| pick(*from, *to, frame));
        self.queue = kept.into();
        taken
    }

    fn ticks(&mut self, n: u64) {
        for _ in 0..n {
            self.now += 1;
            for node in NODES {
                let now = self.now;
                self.shard(node).on_tick(now);
                self.drain(node);
            }
            self.deliver_all();
        }
    }

    /// A write sent to `node`; the network runs until it is quiet.
    fn write(&mut self, node: NodeId) -> RequestNumber {
        let request = RequestNumber(self.next_request);
        self.next_request += 1;
        // Request 1 is the client's registration (H5): through the log as a
        // write, applying nothing.
        let operation = if request.0 == 1 { Bytes::new() } else { Bytes::from_static(b"w") };
        self.shard(node).on_request(Request { client: CLIENT, request, group: G, kind: RequestKind::Write, operation });
        self.drain(node);
        self.deliver_all();
        request
    }

    /// The op at which `request` was acknowledged to the client, if it was.
    fn acknowledged(&self, request: RequestNumber) -> Option<Op> {
        self.replies
            .iter()
            .find(|reply| reply.request == request && matches!(reply.outcome, Outcome::Ok(_)))
            .map(|reply| reply.op)
    }

    /// The normal primary of the highest view, if any.
    fn primary(&self) -> Option<NodeId> {
        NODES.into_iter().filter(|node| self.replica(*node).is_primary()).max_by_key(|node| self.replica(*node).view())
    }

    /// A group with a few committed writes whose backups hold fresh leases.
    fn warmed_up() -> Cluster {
        let mut cluster = Cluster::new();
        for _ in 0..3 {
            let request = cluster.write(NODES[0]);
            assert!(cluster.acknowledged(request).is_some(), "a healthy group commits {request}");
        }
        cluster.ticks(10);
        assert_eq!(cluster.primary(), Some(NODES[0]));
        cluster
    }
}

fn start_view_change(view: u32, from: u8) -> Message {
    Message::StartViewChange(StartViewChange {
        group: G,
        incarnation: Incarnation(1),
        view: View(view),
        replica: MemberIndex(from),
    })
}

#[test]
fn c4_transfer_hands_the_primary_to_the_chosen_member() {
    let mut cluster = Cluster::warmed_up();
    let committed = cluster.replica(NODES[0]).commit_max();
    let before: Vec<_> = (1..=committed.0).map(|op| cluster.replica(NODES[0]).entry(Op(op)).cloned()).collect();
    assert!(committed >= Op(3));

    cluster.shard(NODES[0]).transfer_primary(G, NODES[2]).expect("the primary hands over to a caught-up member");
    cluster.drain(NODES[0]);
    assert_eq!(cluster.replica(NODES[0]).status(), Status::ViewChange, "the old primary gave its view up");
    assert_eq!(cluster.replica(NODES[0]).view(), View(2), "the smallest view above 0 that member 2 leads");
    assert_eq!(cluster.shards[0].metrics().primary_transfers_started, 1);
    cluster.deliver_all();

    assert_eq!(cluster.primary(), Some(NODES[2]), "the chosen member leads, with no tick passing");
    let new = cluster.replica(NODES[2]);
    assert_eq!((new.status(), new.view()), (Status::Normal, View(2)));
    let request = cluster.write(NODES[2]);
    let op = cluster.acknowledged(request).expect("the new primary commits new writes");
    assert!(op > committed, "{op} follows every op committed before the transfer");
    cluster.ticks(10);
    for node in NODES {
        let replica = cluster.replica(node);
        assert_eq!((replica.view(), replica.status()), (View(2), Status::Normal), "{node} follows view 2");
        assert!(replica.commit_min() >= op, "{node} applied the new write");
        for (at, entry) in before.iter().enumerate() {
            assert_eq!(replica.entry(Op(at as u64 + 1)).cloned(), *entry, "{node} kept committed op {}", at + 1);
        }
    }
}

#[test]
fn c4_transfer_to_a_member_that_is_behind_is_refused() {
    let mut cluster = Cluster::new();
    cluster.cut = vec![NODES[2]];
    let request = cluster.write(NODES[0]);
    assert!(cluster.acknowledged(request).is_some(), "members 0 and 1 commit without member 2");
    let commit = cluster.replica(NODES[0]).commit_max();

    let refused = cluster.shard(NODES[0]).transfer_primary(G, NODES[2]);
    let error = TransferError::Behind { group: G, to: NODES[2], acked: Op(0), commit };
    assert_eq!(refused, Err(error.clone()));
    assert!(error.to_string().contains("retry once it has caught up"), "{error}");
    cluster.drain(NODES[0]);
    assert!(cluster.replica(NODES[0]).is_primary(), "a refused transfer changes nothing");
    assert_eq!(cluster.shards[0].metrics().primary_transfers_started, 0);

    // Once the member repaired what it missed, the same call goes through.
    cluster.cut.clear();
    cluster.ticks(20);
    cluster.shard(NODES[0]).transfer_primary(G, NODES[2]).expect("caught up now");
    cluster.drain(NODES[0]);
    cluster.deliver_all();
    assert_eq!(cluster.primary(), Some(NODES[2]));
}

/// C4, C5: a voter of an idle group whose PrepareOks were lost (a node
/// that restarted and answered before its links were up) would stay
/// "behind" for good: no Prepare comes to acknowledge again, and neither a
/// transfer nor the balancer could hand it the group. On an idle heartbeat
/// the primary asks for the missing acknowledgement, and the transfer goes
/// through.
#[test]
fn c5_an_idle_groups_voter_whose_acks_were_lost_is_asked_again_and_can_lead() {
    let mut cluster = Cluster::warmed_up();
    let request = RequestNumber(cluster.next_request);
    cluster.next_request += 1;
    let write =
        Request { client: CLIENT, request, group: G, kind: RequestKind::Write, operation: Bytes::from_static(b"w") };
    cluster.shard(NODES[0]).on_request(write);
    cluster.drain(NODES[0]);
    // Member 2 holds the write, but its PrepareOk never arrives.
    let mut lost = 0;
    while let Some((from, to, frame)) = cluster.queue.pop_front() {
        if from == NODES[2] && matches!(frame, Frame::Message(Message::PrepareOk(_))) {
            lost += 1;
            continue;
        }
        cluster.deliver(from, to, frame);
    }
    assert!(lost > 0, "member 2 acknowledged the write");
    assert!(cluster.acknowledged(request).is_some());
    let commit = cluster.replica(NODES[0]).commit_max();
    assert_eq!(cluster.replica(NODES[2]).op(), commit, "member 2 holds every op");
    assert!(
        matches!(cluster.shard(NODES[0]).transfer_primary(G, NODES[2]), Err(TransferError::Behind { .. })),
        "the primary counts member 2 behind"
    );
    cluster.drain(NODES[0]);
    // The group turns idle; its idle heartbeats ask member 2 again.
    let timing = cohort_core::TimingConfig::default();
    cluster.ticks(timing.commit_heartbeat_timeout_ticks + 2 * timing.commit_idle_heartbeat_interval_ticks);
    assert_eq!(cluster.primary(), Some(NODES[0]), "no view change on the way");
    cluster.shard(NODES[0]).transfer_primary(G, NODES[2]).expect("member 2's acknowledgement came back");
    cluster.drain(NODES[0]);
    cluster.deliver_all();
    assert_eq!(cluster.primary(), Some(NODES[2]));
}

#[test]
fn c4_transfer_refused_off_the_primary() {
    let mut cluster = Cluster::warmed_up();
    for node in [NODES[1], NODES[2]] {
        let refused = cluster.shard(node).transfer_primary(G, NODES[1]);
        assert_eq!(refused, Err(TransferError::NotPrimary { group: G, view: View(0) }), "{node} is a backup");
    }
    let error = cluster.shard(NODES[1]).transfer_primary(G, NODES[2]).expect_err("a backup");
    assert!(error.to_string().contains("call transfer_primary on the group's primary"), "{error}");

    // On the primary, every other mistake is named too.
    let primary = cluster.shard(NODES[0]);
    assert_eq!(primary.transfer_primary(GroupId(99), NODES[1]), Err(TransferError::UnknownGroup(GroupId(99))));
    assert_eq!(primary.transfer_primary(G, NODES[0]), Err(TransferError::SameNode { group: G, node: NODES[0] }));
    let stranger = NodeId(9);
    assert_eq!(primary.transfer_primary(G, stranger), Err(TransferError::NotAVoter { group: G, node: stranger }));
    let seal = Seal { incarnation: Incarnation(2), members: NODES.to_vec(), replication_quorum: 2 };
    primary.propose_seal(G, seal).expect("the primary seals");
    assert_eq!(primary.transfer_primary(G, NODES[1]), Err(TransferError::Sealing(G)));
    assert_eq!(primary.metrics().primary_transfers_started, 0);
    assert_eq!(primary.metrics().view_changes_started, 0, "no refusal starts a view change");
}

#[test]
fn c4_backups_join_a_transfer_without_waiting_for_their_lease() {
    let mut cluster = Cluster::warmed_up();
    let changes_before = cluster.shards[2].metrics().view_changes_started;

    // V7 still holds for everyone else: member 2 granted the primary a
    // lease, so a StartViewChange from the other backup waits for it.
    cluster.queue.push_back((NODES[1], NODES[2], Frame::Message(start_view_change(1, 1))));
    cluster.deliver_all();
    let backup = cluster.replica(NODES[2]);
    assert_eq!((backup.status(), backup.view()), (Status::Normal, View(0)), "a backup's call waits for the lease");

    // The primary's own StartViewChange releases it at once: same tick.
    let now = cluster.now;
    cluster.shard(NODES[0]).transfer_primary(G, NODES[1]).expect("member 1 is caught up");
    cluster.drain(NODES[0]);
    let to_backup = cluster.take(|from, to, frame| {
        from == NODES[0] && to == NODES[2] && matches!(frame, Frame::Message(Message::StartViewChange(_)))
    });
    assert_eq!(to_backup.len(), 1, "the primary tells every member");
    for (from, to, frame) in to_backup {
        cluster.deliver(from, to, frame);
    }
    let backup = cluster.replica(NODES[2]);
    assert_eq!((backup.status(), backup.view()), (Status::ViewChange, View(1)), "joined the primary's view change");
    assert_eq!(cluster.shards[2].metrics().view_changes_started, changes_before + 1);
    assert_eq!(cluster.now, now, "without waiting for the lease");

    cluster.deliver_all();
    assert_eq!(cluster.primary(), Some(NODES[1]));
    let request = cluster.write(NODES[1]);
    assert!(cluster.acknowledged(request).is_some(), "the new primary commits");
}
