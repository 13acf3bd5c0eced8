//! Hand-made mutants of the replica's safety rules, for the simulator's
//! mutation suite (docs/simulator.md, "The mutation suite").
//!
//! A checker that has never failed proves nothing. Each [`Mutant`] breaks
//! one rule the protocol's safety rests on, the way a plausible bug would;
//! the simulator runs seeds with one mutant switched on and must report a
//! violation. A mutant its checkers never catch is a hole in the simulator
//! (or an equivalent mutant, which then does not belong in the suite).
//!
//! The switch is [`CoreConfig::mutant`](crate::CoreConfig), a field that
//! exists only in test builds (the `mutants` feature, or this crate's own
//! unit tests). In every other build [`CoreConfig::mutated`](crate::CoreConfig::mutated) is a constant
//! `false` and each mutated branch is removed by the compiler: production
//! pays nothing, not even the field.

/// One broken safety rule. See each variant for the rule and the break.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// V1, durability before acknowledgement: a backup sends PrepareOk for
    /// an op as soon as it stages it, before its log is durable.
    AckBeforeDurable,
    /// V2, the durable view: StartViewChange, DoViewChange and StartView
    /// leave before the new view (and the log they describe) is durable.
    ViewChangeBeforeDurable,
    /// V2, log selection: the new primary takes the log with the most ops,
    /// ignoring the view the log is from.
    LogSelectionByOp,
    /// Quorum sizes: a view change completes with one DoViewChange fewer
    /// than the view-change quorum Qv (at least one).
    ViewChangeQuorumShort,
    /// Quorum sizes: a primary commits with one durable copy fewer than the
    /// replication quorum Qr (at least one).
    CommitQuorumShort,
    /// Q3, inherited ops first: a new primary serves reads and prepares new
    /// ops before it has committed and applied the ops it inherited.
    InheritedOpsNotFirst,
    /// Fencing by view: a backup accepts Prepares and Commits from the
    /// primary of an older view.
    StaleViewAccepted,
    /// Fencing by incarnation: messages of another incarnation of the group
    /// are accepted as this one's.
    OtherIncarnationAccepted,
    /// V7, reads: a primary serves reads without a replication quorum's
    /// confirmation of its view, and outside its quorum window.
    ReadWithoutQuorum,
    /// R24, the quorum window: a primary's window (for reads and for
    /// stepping down) is twice the heartbeat timeout, longer than the lease
    /// its backups grant.
    QuorumWindowTooLong,
    /// V7, leases: a backup joins a view change while the lease it granted
    /// the primary still runs.
    LeaseIgnored,
    /// C4, the lease release: a backup gives up its lease for a
    /// StartViewChange from the primary of the view it names (the next
    /// primary) instead of the primary of its own view (the lease holder).
    LeaseReleasedByNextPrimary,
    /// H1, a member without its data: a voter created on a storage that
    /// holds nothing starts as a new member of view 0 (it votes, and member
    /// 0 leads) instead of recovering first.
    RecoveryIgnored,
    /// H1, the ballot: a recovering member whose holders are too few to
    /// elect alone stops recovering and votes with the log it holds (it
    /// may lead, and two such members may elect each other) instead of
    /// lending an empty vote to the holder with the best log.
    RecoveryVotesWithItsLog,
    /// M2, the step gate: an operation's next step applies (and the
    /// metadata primary proposes it) without a majority of the previous
    /// step's group replicas having acked its epoch. The metadata holds no
    /// `CoreConfig`, so this one is switched per thread
    /// ([`Mutant::set_metadata`]).
    StepGateWithoutAcks,
    /// Z3, contact from the pair: a primary end dates its quiesced groups'
    /// contact (R24) from a reply that did not match, before it wakes them.
    PairContactWithoutMatch,
    /// Z3, following quiet: a quiesced backup keeps following its primary
    /// after its own view moved on, as long as it is in normal status.
    QuietFollowAcrossViews,
    /// Exactly-once under eviction: a client the table does not know (it
    /// was evicted) is admitted at any request number, not only at 1.
    EvictedClientAdmitted,
    /// H3, removal on replayable metadata: a node's agent removes a
    /// deleted or misplaced group's replica as soon as its copy of the
    /// metadata shows it, before a restart of the node would replay that
    /// copy (switched per thread, like [`Mutant::StepGateWithoutAcks`]).
    UnloadBeforeReplayable,
    /// D1, a state machine behind storage's snapshot: a replica whose
    /// persistent state machine lost checkpoints that cohort's log no
    /// longer holds recovers from storage's snapshot anyway, instead of
    /// being rebuilt from the other members, its state missing the ops
    /// in between.
    CheckpointBehindAccepted,
    /// D1, replay only above the checkpoint: a restarted replica recovers
    /// from storage's snapshot although its persistent state machine's
    /// checkpoint is past it, so the ops in between are applied twice.
    CheckpointAheadIgnored,
    /// D3, a stream is installed only whole: a receiver installs a stream
    /// once its header and first chunk of state are in, its state missing
    /// the rest.
    StreamInstalledShort,
}

impl Mutant {
    /// Every mutant, in the order of the table in docs/simulator.md.
    pub const ALL: [Mutant; 22] = [
        Mutant::AckBeforeDurable,
        Mutant::ViewChangeBeforeDurable,
        Mutant::LogSelectionByOp,
        Mutant::ViewChangeQuorumShort,
        Mutant::CommitQuorumShort,
        Mutant::InheritedOpsNotFirst,
        Mutant::StaleViewAccepted,
        Mutant::OtherIncarnationAccepted,
        Mutant::ReadWithoutQuorum,
        Mutant::QuorumWindowTooLong,
        Mutant::LeaseIgnored,
        Mutant::LeaseReleasedByNextPrimary,
        Mutant::RecoveryIgnored,
        Mutant::RecoveryVotesWithItsLog,
        Mutant::StepGateWithoutAcks,
        Mutant::PairContactWithoutMatch,
        Mutant::QuietFollowAcrossViews,
        Mutant::EvictedClientAdmitted,
        Mutant::UnloadBeforeReplayable,
        Mutant::CheckpointBehindAccepted,
        Mutant::CheckpointAheadIgnored,
        Mutant::StreamInstalledShort,
    ];

    /// The name on the simulator's command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::AckBeforeDurable => "ack-before-durable",
            Mutant::ViewChangeBeforeDurable => "view-change-before-durable",
            Mutant::LogSelectionByOp => "log-selection-by-op",
            Mutant::ViewChangeQuorumShort => "view-change-quorum-short",
            Mutant::CommitQuorumShort => "commit-quorum-short",
            Mutant::InheritedOpsNotFirst => "inherited-ops-not-first",
            Mutant::StaleViewAccepted => "stale-view-accepted",
            Mutant::OtherIncarnationAccepted => "other-incarnation-accepted",
            Mutant::ReadWithoutQuorum => "read-without-quorum",
            Mutant::QuorumWindowTooLong => "quorum-window-too-long",
            Mutant::LeaseIgnored => "lease-ignored",
            Mutant::LeaseReleasedByNextPrimary => "lease-released-by-next-primary",
            Mutant::RecoveryIgnored => "recovery-ignored",
            Mutant::RecoveryVotesWithItsLog => "recovery-votes-with-its-log",
            Mutant::StepGateWithoutAcks => "step-gate-without-acks",
            Mutant::PairContactWithoutMatch => "pair-contact-without-match",
            Mutant::QuietFollowAcrossViews => "quiet-follow-across-views",
            Mutant::EvictedClientAdmitted => "evicted-client-admitted",
            Mutant::UnloadBeforeReplayable => "unload-before-replayable",
            Mutant::CheckpointBehindAccepted => "checkpoint-behind-accepted",
            Mutant::CheckpointAheadIgnored => "checkpoint-ahead-ignored",
            Mutant::StreamInstalledShort => "stream-installed-short",
        }
    }

    /// The mutant named `name` (see [`Mutant::name`]).
    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|mutant| mutant.name() == name)
    }

    /// Switch `config`'s mutant on (or every mutant off) for the metadata
    /// code run on this thread. The metadata's state machine and agent hold
    /// no `CoreConfig`, and the simulator runs one cluster per thread, so
    /// it calls this with its `CoreConfig` when it builds a run. Does
    /// nothing outside test builds.
    pub fn set_metadata(config: &crate::CoreConfig) {
        #[cfg(any(test, feature = "mutants"))]
        METADATA_MUTANT.with(|cell| cell.set(config.mutant));
        #[cfg(not(any(test, feature = "mutants")))]
        let _ = config;
    }

    /// True if `self` is switched on for the metadata code of this thread.
    /// Always false outside test builds.
    #[inline(always)]
    pub fn metadata_mutated(self) -> bool {
        #[cfg(any(test, feature = "mutants"))]
        {
            METADATA_MUTANT.with(|cell| cell.get()) == Some(self)
        }
        #[cfg(not(any(test, feature = "mutants")))]
        {
            false
        }
    }
}

#[cfg(any(test, feature = "mutants"))]
thread_local! {
    /// The mutant of the metadata code on this thread (see [`Mutant::set_metadata`]).
    static METADATA_MUTANT: std::cell::Cell<Option<Mutant>> = const { std::cell::Cell::new(None) };
}

impl crate::CoreConfig {
    /// True if `mutant` is switched on. Always false outside test builds.
    #[inline(always)]
    pub fn mutated(&self, mutant: Mutant) -> bool {
        #[cfg(any(test, feature = "mutants"))]
        {
            self.mutant == Some(mutant)
        }
        #[cfg(not(any(test, feature = "mutants")))]
        {
            let _ = mutant;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for mutant in Mutant::ALL {
            assert_eq!(Mutant::from_name(mutant.name()), Some(mutant));
        }
        let mut names: Vec<_> = Mutant::ALL.iter().map(|mutant| mutant.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Mutant::ALL.len());
        assert_eq!(Mutant::from_name("none"), None);
    }

    #[test]
    fn a_default_config_mutates_nothing() {
        let config = crate::CoreConfig::default();
        assert!(Mutant::ALL.into_iter().all(|mutant| !config.mutated(mutant)));
        let mutated = crate::CoreConfig { mutant: Some(Mutant::LeaseIgnored), ..crate::CoreConfig::default() };
        assert!(mutated.mutated(Mutant::LeaseIgnored) && !mutated.mutated(Mutant::AckBeforeDurable));
    }
}
