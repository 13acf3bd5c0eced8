//! Z4: when a node dies, the view changes of every group it led travel in
//! frames per node pair, not per group (docs/protocol.md, ViewChangeBatch).
//!
//! A 3-node cluster of 600 groups with no faults; the node that leads the
//! most of them (about 200) crashes and stays down. The other two then change
//! the view of each of its groups, each sending the other a StartViewChange
//! and one of them a DoViewChange and a StartView per group. Those 400 or
//! more messages must share a few frames.

use cohort_messages::{Command, GroupId};
use cohort_sim::{Sim, SimConfig};

const GROUPS: usize = 600;

/// View-change frames and the messages in them, from node `from` to node `to`.
fn view_change_traffic(sim: &Sim, from: usize, to: usize) -> (u64, u64) {
    let mut totals = (0, 0);
    for command in [Command::StartViewChange, Command::DoViewChange, Command::StartView, Command::ViewChangeBatch] {
        if let Some((frames, entries, _)) = sim.frame_log.get(&(from, to, command)) {
            totals.0 += frames;
            totals.1 += entries;
        }
    }
    totals
}

#[test]
fn z4_a_dead_nodes_view_changes_cost_frames_per_node_pair_not_per_group() {
    let mut config = SimConfig::new(7);
    config.groups = GROUPS;
    config.clients = 0;
    let mut sim = Sim::new(config);
    let led_by = |sim: &Sim, node: usize| {
        (0..GROUPS).filter(|group| sim.primary_of(GroupId(*group as u64)) == Some(node)).count()
    };
    let all_led = |sim: &Sim| (0..GROUPS).all(|group| sim.primary_of(GroupId(group as u64)).is_some());
    assert!(sim.run_until(300, all_led), "every group has a primary");
    let dead = (0..3).max_by_key(|node| led_by(&sim, *node)).expect("three nodes");
    let failing_over = led_by(&sim, dead);
    let (a, b) = match dead {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    sim.frame_log.clear();
    sim.crash_node(dead, u64::MAX / 4);
    let started = sim.now;
    let taken_over =
        |sim: &Sim| (0..GROUPS).all(|group| sim.primary_of(GroupId(group as u64)).is_some_and(|node| node != dead));
    assert!(sim.run_until(2000, taken_over), "nodes {a} and {b} took over every group of node {dead}");
    let ticks = sim.now - started;
    let (frames_ab, messages_ab) = view_change_traffic(&sim, a, b);
    let (frames_ba, messages_ba) = view_change_traffic(&sim, b, a);
    let (frames, messages) = (frames_ab + frames_ba, messages_ab + messages_ba);
    println!("failover of {failing_over} groups in {ticks} ticks: {messages} view-change messages in {frames} frames");
    assert!(failing_over >= GROUPS / 3, "the busiest node led a third of the groups: {failing_over}");
    assert!(messages >= 2 * failing_over as u64, "every group's view change reached the other node: {messages}");
    // Unbatched, each message is a frame. Batched, a shard's turn sends one
    // frame per peer: a few dozen turns carry the whole failover.
    assert!(frames * 20 <= messages, "{messages} view-change messages took {frames} frames");
}
