//! T5: what input can make a shard hold stays under bounds that do not
//! depend on how much input arrived ([`cohort_core::Footprint`]).
//!
//! Each bound is one the core promises by construction, so a breach is a
//! bug whatever the input: a log no longer than a view change can carry
//! (`VIEW_CHANGE_LOG_ENTRIES_MAX`; the config keeps honest logs within half
//! of it), a request queue no longer than `request_queue_max` (plus a seal,
//! which goes ahead of a full queue), at most one DoViewChange per voter for
//! the election and one early one per voter, a state transfer no
//! larger than `state_transfer_size_max_bytes`; a shard's backlogs
//! within `backlog_size_max_bytes` (D1). The largest figures seen are
//! kept for the run's report.

use cohort_core::{CoreConfig, Footprint, GroupSpec};

/// The bounds of one run, and the largest footprint seen.
#[derive(Clone, Debug, Default)]
pub struct FootprintBounds {
    log_entries_max: usize,
    request_queue_max: usize,
    do_view_changes_max: usize,
    state_transfer_max_bytes: u64,
    backlog_max_bytes: u64,
    /// Element-wise maximum of every footprint checked.
    pub observed: Footprint,
    /// True once a breach was reported (one violation per run is enough).
    breached: bool,
}

impl FootprintBounds {
    /// The bounds for a run of `config` on `nodes` nodes hosting `specs`
    /// (the metadata group has at most one voter per node).
    pub fn new(config: &CoreConfig, specs: &[GroupSpec], nodes: usize) -> FootprintBounds {
        let voters = specs.iter().map(|spec| spec.members.len()).max().unwrap_or(1).max(nodes);
        FootprintBounds {
            log_entries_max: cohort_messages::VIEW_CHANGE_LOG_ENTRIES_MAX,
            request_queue_max: config.request_queue_max + 1,
            do_view_changes_max: 2 * voters,
            state_transfer_max_bytes: config.state_transfer_size_max_bytes,
            backlog_max_bytes: config.backlog_size_max_bytes,
            observed: Footprint::default(),
            breached: false,
        }
    }

    /// Check one shard's footprint; the violation, if it breaks a bound.
    pub fn check(&mut self, tick: u64, node: usize, shard: usize, footprint: &Footprint) -> Option<String> {
        self.observe(footprint);
        let breach = if footprint.log_entries_max > self.log_entries_max {
            Some(format!("a log of {} entries (bound {})", footprint.log_entries_max, self.log_entries_max))
        } else if footprint.request_queue_max > self.request_queue_max {
            Some(format!("a request queue of {} (bound {})", footprint.request_queue_max, self.request_queue_max))
        } else if footprint.do_view_changes_max > self.do_view_changes_max {
            Some(format!("{} DoViewChanges held (bound {})", footprint.do_view_changes_max, self.do_view_changes_max))
        } else if footprint.state_transfer_declared_max_bytes > self.state_transfer_max_bytes {
            Some(format!(
                "a state transfer of {} bytes (bound {})",
                footprint.state_transfer_declared_max_bytes, self.state_transfer_max_bytes
            ))
        } else if footprint.backlog_bytes > self.backlog_max_bytes {
            Some(format!("backlogs of {} bytes (bound {})", footprint.backlog_bytes, self.backlog_max_bytes))
        } else {
            None
        };
        let breach = breach.filter(|_| !self.breached)?;
        self.breached = true;
        Some(format!("tick {tick}: node {node} shard {shard} holds {breach}"))
    }

    fn observe(&mut self, footprint: &Footprint) {
        let seen = &mut self.observed;
        seen.log_entries_max = seen.log_entries_max.max(footprint.log_entries_max);
        seen.log_bytes = seen.log_bytes.max(footprint.log_bytes);
        seen.request_queue_max = seen.request_queue_max.max(footprint.request_queue_max);
        seen.do_view_changes_max = seen.do_view_changes_max.max(footprint.do_view_changes_max);
        seen.state_transfer_bytes = seen.state_transfer_bytes.max(footprint.state_transfer_bytes);
        seen.state_transfer_declared_max_bytes =
            seen.state_transfer_declared_max_bytes.max(footprint.state_transfer_declared_max_bytes);
        seen.served_tail_bytes = seen.served_tail_bytes.max(footprint.served_tail_bytes);
        seen.backlog_bytes = seen.backlog_bytes.max(footprint.backlog_bytes);
        seen.held_sends = seen.held_sends.max(footprint.held_sends);
        seen.queued_commits = seen.queued_commits.max(footprint.queued_commits);
        seen.queued_replies = seen.queued_replies.max(footprint.queued_replies);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t5_a_footprint_past_a_bound_is_one_violation_and_the_largest_figures_are_kept() {
        let config = CoreConfig::default();
        let mut bounds = FootprintBounds::new(&config, &[], 3);
        let within = Footprint { log_entries_max: 10, held_sends: 7, ..Footprint::default() };
        assert_eq!(bounds.check(1, 0, 0, &within), None);
        let long = Footprint { log_entries_max: cohort_messages::VIEW_CHANGE_LOG_ENTRIES_MAX + 1, ..within };
        let violation = bounds.check(2, 1, 0, &long).expect("a log past a view change's");
        assert!(violation.starts_with("tick 2: node 1 shard 0 holds a log of 4097 entries"), "{violation}");
        assert_eq!(bounds.check(3, 1, 0, &long), None, "reported once per run");
        let queue = Footprint { request_queue_max: config.request_queue_max + 2, ..Footprint::default() };
        assert!(
            FootprintBounds::new(&config, &[], 3).check(4, 0, 1, &queue).is_some(),
            "a queue past request_queue_max"
        );
        assert_eq!((bounds.observed.log_entries_max, bounds.observed.held_sends), (4097, 7));
    }
}
