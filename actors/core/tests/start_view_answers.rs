//! Z4: a new primary answers a member's repeated election messages with one
//! StartView per repair timeout.
//!
//! A member that has not heard the StartView re-sends its StartViewChange
//! and DoViewChange together every repair timeout. When thousands of groups
//! fail over at once, the StartView can take longer than that to arrive, so
//! the re-sends cross it; answering each of them with a StartView of its own
//! doubled the work of the very burst that delayed it. One shard, driven by
//! hand, checks that the primary withholds those answers within the timeout
//! and answers again once it has passed.

mod common;
use common::Counter;

use cohort_core::{CoreConfig, Effect, Shard};
use cohort_messages::{DoViewChange, GroupId, Incarnation, MemberIndex, Message, NodeId, Op, StartViewChange, View};

const G: GroupId = GroupId(11);
/// Members: node 1 leads view 0; node 2 (this shard) is member 1 and leads
/// view 1; node 3 is member 2.
const MEMBERS: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];
const ME: NodeId = NodeId(2);
const OTHER: NodeId = NodeId(3);

struct Primary {
    shard: Shard,
    now: u64,
    sent: Vec<(NodeId, Message)>,
}

impl Primary {
    /// Member 1 of a group whose view-0 primary never speaks: it times out,
    /// and member 2's election messages for view 1 make it that view's
    /// primary. Every flush completes at once.
    fn elected() -> Primary {
        let spec = common::plain_spec(G, &MEMBERS, 1);
        let mut shard = Shard::new(ME, CoreConfig::default());
        shard.on_tick(1);
        shard.create_group(spec, Box::new(Counter(0))).expect("created");
        let mut primary = Primary { shard, now: 1, sent: Vec::new() };
        primary.settle();
        // Past the heartbeat timeout and any lease: the member starts view 1.
        primary.tick(300);
        primary.deliver(Message::StartViewChange(svc()));
        primary.deliver(Message::DoViewChange(dvc()));
        assert!(primary.shard.replica(G).is_some_and(|replica| replica.is_primary()), "member 1 leads view 1");
        primary
    }

    /// Drain effects, completing every flush, until none are left.
    fn settle(&mut self) {
        loop {
            let effects = self.shard.drain_effects();
            if effects.is_empty() {
                return;
            }
            for effect in effects {
                match effect {
                    Effect::Flush { id } => self.shard.on_flushed(id),
                    Effect::Send { to, message } => self.sent.push((to, message)),
                    _ => {}
                }
            }
        }
    }

    fn tick(&mut self, ticks: u64) {
        for _ in 0..ticks {
            self.now += 1;
            self.shard.on_tick(self.now);
            self.settle();
        }
    }

    fn deliver(&mut self, message: Message) {
        self.shard.on_message(OTHER, message);
        self.settle();
    }

    /// StartViews sent to member 2 since the last call.
    fn take_start_views(&mut self) -> usize {
        let sent = std::mem::take(&mut self.sent);
        sent.iter().filter(|(to, message)| *to == OTHER && matches!(message, Message::StartView(_))).count()
    }

    fn withheld(&self) -> u64 {
        self.shard.metrics().start_views_withheld
    }
}

fn svc() -> StartViewChange {
    StartViewChange { group: G, incarnation: Incarnation(1), view: View(1), replica: MemberIndex(2) }
}

fn dvc() -> DoViewChange {
    DoViewChange {
        group: G,
        incarnation: Incarnation(1),
        view: View(1),
        log_view: View(0),
        op: Op(0),
        commit: Op(0),
        replica: MemberIndex(2),
        log: Vec::new(),
    }
}

#[test]
fn z4_a_members_repeated_election_messages_draw_one_start_view_per_repair_timeout() {
    let mut primary = Primary::elected();
    assert_eq!(primary.take_start_views(), 1, "the new primary sends member 2 its StartView");

    // Member 2's re-sends cross that StartView: both are withheld.
    primary.deliver(Message::StartViewChange(svc()));
    primary.deliver(Message::DoViewChange(dvc()));
    assert_eq!(primary.take_start_views(), 0, "no second StartView within the repair timeout");
    assert_eq!(primary.withheld(), 2);

    // A repair timeout later the StartView may have been lost: the next
    // re-send is answered, once.
    primary.tick(CoreConfig::default().timing.repair_timeout_ticks);
    primary.take_start_views();
    primary.deliver(Message::StartViewChange(svc()));
    primary.deliver(Message::DoViewChange(dvc()));
    assert_eq!(primary.take_start_views(), 1, "one answer to the pair of re-sends");
    assert_eq!(primary.withheld(), 3);
}

#[test]
fn z4_an_unconfirmed_member_still_gets_the_start_view_again_unasked() {
    let mut primary = Primary::elected();
    primary.take_start_views();
    // Member 2 never answers and never asks: the primary's own re-send
    // (every broadcast interval, from the second on) still reaches it.
    let interval = CoreConfig::default().timing.commit_broadcast_interval_ticks;
    primary.tick(4 * interval);
    assert!(primary.take_start_views() >= 2, "the StartView went again to the silent member");
}
