//! Random primary transfers (C4) in the fault phase of every scenario.
//!
//! Now and then the simulator plays an operator who moves a group's primary
//! to a voter of its choice, the way a host would call
//! [`cohort_core::Shard::transfer_primary`]: on a running node whose replica
//! is a normal primary (a stale one too, when a newer view exists that it
//! has not heard of), to a random voter of the group (itself included, so
//! refusals are exercised along with transfers). A refused transfer changes
//! nothing and is only counted. The usual checkers judge the result: a
//! transfer is a view change, and none of them may notice anything else.
//!
//! The draws come from a stream of their own, so that switching transfers
//! off (`--transfers off`) leaves every other random choice of a seed as it
//! was, and turning them on does not reshuffle the faults.

use cohort_core::TransferError;
use cohort_messages::GroupId;

use super::Sim;
use crate::rng::Rng;

/// Chance per tick (per mille) that a transfer is asked for during the fault
/// phase: several per run, each on a random group.
const TRANSFER_PER_MILLE: u64 = 3;

/// Mixed into the seed for the transfers' own random stream.
const STREAM_SALT: u64 = 0x7A5F_E2C4_0000_0001;

/// What a run's random transfers did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TransferCounts {
    /// Transfers a primary started.
    pub started: u64,
    /// Transfers refused because the chosen voter was behind.
    pub refused_behind: u64,
    /// Transfers refused for another reason (the primary itself chosen, or
    /// its incarnation sealing).
    pub refused_other: u64,
}

/// The transfer driver's state.
#[derive(Clone, Debug)]
pub(crate) struct Transfers {
    rng: Rng,
    /// What it did so far.
    pub counts: TransferCounts,
}

impl Transfers {
    /// The driver of a run with `seed`.
    pub(crate) fn new(seed: u64) -> Transfers {
        Transfers { rng: Rng::new(seed ^ STREAM_SALT), counts: TransferCounts::default() }
    }
}

impl Sim {
    /// One tick of the transfer driver: in the fault phase, with a small
    /// chance, ask a primary of a random group to hand it to a random voter.
    pub(super) fn drive_transfers(&mut self, faults: bool) {
        if !faults || !self.config.transfers || !self.transfers.rng.chance(TRANSFER_PER_MILLE) {
            return;
        }
        let now = self.now;
        let groups: Vec<GroupId> =
            self.specs.iter().chain(self.metadata_spec.as_ref()).map(|spec| spec.group).collect();
        let group = groups[self.transfers.rng.below(groups.len() as u64) as usize];
        let primaries: Vec<usize> = (0..self.nodes.len())
            .filter(|index| self.nodes[*index].is_running(now))
            .filter(|index| self.nodes[*index].replica(group).is_some_and(|replica| replica.is_primary()))
            .collect();
        if primaries.is_empty() {
            return;
        }
        let index = primaries[self.transfers.rng.below(primaries.len() as u64) as usize];
        let Some(members) = self.nodes[index].replica(group).map(|replica| replica.members().to_vec()) else { return };
        let to = members[self.transfers.rng.below(members.len() as u64) as usize];
        let Some(shard) = self.nodes[index].shard_for_mut(group) else { return };
        match shard.transfer_primary(group, to) {
            Ok(()) => self.transfers.counts.started += 1,
            Err(TransferError::Behind { .. }) => self.transfers.counts.refused_behind += 1,
            Err(TransferError::SameNode { .. } | TransferError::Sealing(_)) => self.transfers.counts.refused_other += 1,
            Err(error) => panic!("tick {now}: node {index}'s primary of {group} refused a transfer to {to}: {error}"),
        }
        self.drain(index);
    }
}
