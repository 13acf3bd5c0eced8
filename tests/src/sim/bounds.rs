//! T5: checks that input stays bounded, in every run: each shard's
//! footprint after every step (`check/footprint.rs`), and, at the end, the
//! refusals of reasons no honest peer causes (`Refusal::honest_possible`).

use super::Sim;

impl Sim {
    /// Check every running shard's footprint against the run's bounds.
    pub(super) fn check_footprints(&mut self) {
        for node in &self.nodes {
            for (shard, running) in node.shards.iter().enumerate() {
                let footprint = running.core().footprint();
                if let Some(violation) = self.footprints.check(self.now, node.index, shard, &footprint) {
                    self.checkers.violations.push(violation);
                }
            }
        }
    }

    /// T5: no refusal of a reason only forged input causes, unless the run
    /// has a non-member forger (whose invented messages are such input).
    /// Replayed messages are genuine: they must never be refused so.
    pub fn check_refusals(&mut self) {
        if self.config.forger == Some(super::ForgerMode::NonMember) {
            return;
        }
        for (reason, count) in self.refusals().by_reason() {
            if count > 0 && !reason.honest_possible() {
                self.checkers.violations.push(format!(
                    "T5: {count} peer messages refused for {}, which no correct peer causes",
                    reason.name()
                ));
            }
        }
    }

    /// T5: every node's refusals, over all its starts.
    pub(super) fn refusals(&self) -> cohort_core::Refusals {
        let mut total = cohort_core::Refusals::default();
        for node in &self.nodes {
            total.add(&node.refusals());
        }
        total
    }
}
