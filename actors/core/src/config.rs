//! Core configuration, in ticks.
//!
//! The core never sees milliseconds: the runtime converts its configuration
//! (R23 defaults: broadcast 500 ms, heartbeat timeout 5 s, idle interval 2 s,
//! idle timeout 12 s) into whole ticks once, at boot, and the simulator uses
//! ticks directly (R5). [`TimingConfig::validate`] holds the boot checks of
//! R9 and R23 in tick form; the runtime repeats them in milliseconds with the
//! config key names in its messages.

/// Heartbeat and failure-detection timing, in ticks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimingConfig {
    /// P: ticks between send ticks (R1). Default 5 (500 ms at 100 ms/tick).
    pub commit_broadcast_interval_ticks: u64,
    /// Backup timeout for busy groups, quorum window of primaries (R24), and
    /// quiet time before a group turns idle (R20). Default 50.
    pub commit_heartbeat_timeout_ticks: u64,
    /// Ticks between idle heartbeats; a whole multiple of P (R23). Default 20.
    pub commit_idle_heartbeat_interval_ticks: u64,
    /// Backup timeout for idle groups (R22). Default 120.
    pub commit_idle_heartbeat_timeout_ticks: u64,
    /// How long a member waits in a view change before moving to the next view.
    pub view_change_timeout_ticks: u64,
    /// How long a member waits for a repair or state-transfer answer before asking again.
    pub repair_timeout_ticks: u64,
    /// Z3, opt-in, beyond seed 000: how long a group stays idle (R20)
    /// before its primary asks to quiesce it, after which its Commits give
    /// way to one shard-pair heartbeat (see [`crate::quiesce`]). `None` (the
    /// default): no group ever quiesces and heartbeats are exactly seed 000's.
    pub commit_quiesce_timeout_ticks: Option<u64>,
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            commit_broadcast_interval_ticks: 5,
            commit_heartbeat_timeout_ticks: 50,
            commit_idle_heartbeat_interval_ticks: 20,
            commit_idle_heartbeat_timeout_ticks: 120,
            view_change_timeout_ticks: 30,
            repair_timeout_ticks: 5,
            commit_quiesce_timeout_ticks: None,
        }
    }
}

/// A broken timing rule: which field, and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {rule}")]
pub struct CoreConfigError {
    /// The offending field.
    pub field: &'static str,
    /// The rule it breaks, with values.
    pub rule: String,
}

impl TimingConfig {
    /// The R9/R23 rules, in ticks.
    pub fn validate(&self) -> Result<(), CoreConfigError> {
        let p = self.commit_broadcast_interval_ticks;
        let err = |field, rule: String| Err(CoreConfigError { field, rule });
        if p == 0 {
            return err("commit_broadcast_interval_ticks", "must be at least 1".into());
        }
        if self.commit_heartbeat_timeout_ticks < 4 * p {
            return err(
                "commit_heartbeat_timeout_ticks",
                format!(
                    "must be at least 4 x commit_broadcast_interval ({} < 4 x {p})",
                    self.commit_heartbeat_timeout_ticks
                ),
            );
        }
        let idle = self.commit_idle_heartbeat_interval_ticks;
        if idle == 0 || !idle.is_multiple_of(p) {
            return err(
                "commit_idle_heartbeat_interval_ticks",
                format!("must be a whole multiple of commit_broadcast_interval ({idle} is not a multiple of {p})"),
            );
        }
        let longer = self.idle_timeout_effective_ticks();
        if longer < 4 * idle {
            return err(
                "commit_idle_heartbeat_timeout_ticks",
                format!(
                    "the longer of the two timeouts must be at least 4 x commit_idle_heartbeat_interval ({longer} < 4 x {idle})"
                ),
            );
        }
        if self.view_change_timeout_ticks == 0 {
            return err("view_change_timeout_ticks", "timeouts must be at least 1 tick".into());
        }
        if self.repair_timeout_ticks == 0 {
            return err("repair_timeout_ticks", "timeouts must be at least 1 tick".into());
        }
        if self.commit_quiesce_timeout_ticks == Some(0) {
            return err("commit_quiesce_timeout_ticks", "timeouts must be at least 1 tick".into());
        }
        Ok(())
    }

    /// R23: a backup never waits less than `commit_heartbeat_timeout`, so the
    /// idle timeout in force is the longer of the two.
    pub fn idle_timeout_effective_ticks(&self) -> u64 {
        self.commit_idle_heartbeat_timeout_ticks.max(self.commit_heartbeat_timeout_ticks)
    }

    /// Z3: how long either end of a shard pair keeps its quiesced groups
    /// without a matching heartbeat (or reply) before it wakes them all: two
    /// broadcast intervals short of the heartbeat timeout, so a woken primary
    /// still has two send ticks of Commits before its quorum window ends.
    pub fn quiet_wake_after_ticks(&self) -> u64 {
        self.commit_heartbeat_timeout_ticks - 2 * self.commit_broadcast_interval_ticks
    }
}

/// The default of [`CoreConfig::view_jump_max_views`].
pub const VIEW_JUMP_DEFAULT_VIEWS: u32 = 1 << 16;

/// Everything the core needs besides timing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreConfig {
    /// Heartbeats and timeouts.
    pub timing: TimingConfig,
    /// The most uncommitted ops a primary keeps in flight. Bounds the log
    /// suffix a view change must carry.
    pub pipeline_max_ops: u64,
    /// Take a snapshot after this many applied ops since the last one.
    pub snapshot_interval_ops: u64,
    /// Take a snapshot once the log since the last one holds this many bytes.
    pub snapshot_interval_bytes: u64,
    /// The most clients a group's client table remembers.
    pub clients_max: usize,
    /// The most requests a primary queues while its pipeline is full.
    pub request_queue_max: usize,
    /// T5: how far above its own view one message may take a replica that
    /// follows a live primary, in views: a primary inside its quorum window
    /// (R24), or a backup or learner whose lease (one heartbeat timeout
    /// after the newest Commit it accepted from its primary) still runs. It
    /// refuses a StartViewChange, DoViewChange, StartView, or a stranded
    /// voter's CommitReply, whose view is further ahead (counted as
    /// `view_jump`), so no single peer's message moves a healthy group far
    /// through its view space. A replica that follows no live primary (in a
    /// view change, or its lease ran out) takes any view.
    ///
    /// Why that never strands an honest member: only a replica with a live
    /// primary is bounded, and such a replica ignores other views' elections
    /// anyway (leases, V7); it only drops the hint of how far they went. A
    /// member that was down or cut off through any number of view changes
    /// hears nothing from its old primary, so its lease ends within one
    /// heartbeat timeout, and then it takes the current primary's StartView
    /// (re-sent to members that have not confirmed the view, and the answer
    /// to its own StartViewChange) whatever the distance; a group whose
    /// members drifted apart while electing joins up the same way once their
    /// leases are gone. Default 65,536 (an honest healthy group moves one
    /// view at a time); at least 64 (`GROUP_MEMBERS_MAX`: an election that
    /// keeps failing tries each member as primary within that many views).
    pub view_jump_max_views: u32,
    /// T5: the largest snapshot a state transfer may declare, in bytes. A
    /// StateChunk whose `total_size_bytes` is larger is refused (counted as
    /// `state_transfer_too_large`) before any of it is kept, so a peer
    /// cannot make a member buffer more than this per group. It must exceed
    /// the largest snapshot a group's state machine takes, or a member that
    /// fell behind the snapshot can never catch up. Default 1 GiB; at least
    /// one chunk (`STATE_CHUNK_SIZE_MAX_BYTES`, 4 MiB).
    pub state_transfer_size_max_bytes: u64,
    /// D3: the size of the chunks a streamed state transfer sends, in
    /// bytes (a whole snapshot, held in memory on both sides, always goes
    /// in `STATE_CHUNK_SIZE_MAX_BYTES` chunks). The receiver keeps at most
    /// two chunks of a stream asked for (its flow control), so twice this
    /// is what one transfer holds in flight. Default and most
    /// `STATE_CHUNK_SIZE_MAX_BYTES` (4 MiB); at least 64 (the simulator
    /// uses small chunks, so that its faults cut transfers at every chunk).
    pub state_chunk_size_bytes: usize,
    /// D3: while a replica streams its state to a member, the committed
    /// entries its checkpoints drop from the log are kept beside the stream
    /// (the receiver needs them after the streamed op), up to this many
    /// bytes of operations; past it the stream is dropped and the member
    /// starts over from a newer checkpoint. Bounds what one slow receiver
    /// costs in memory. Default 512 MiB; at least `snapshot_interval_bytes`.
    pub state_transfer_log_bytes_max: u64,
    /// D3: a served stream (and the entries kept beside it) is dropped
    /// once the receiver asked for nothing of it for this long: long
    /// enough for a receiver to restart and resume. Default 300 (30 s at
    /// 100 ms/tick); at least `repair_timeout_ticks`.
    pub state_stream_patience_ticks: u64,
    /// D1: a primary keeps the committed entries its snapshots drop from
    /// the log while a member that acknowledged less still needs them (it
    /// was stopped or cut off for a moment), and answers that member's
    /// repair from them instead of sending it the whole state. This many
    /// bytes of operations at most, over all the groups of the shard (not
    /// per group: a dead node costs each peer shard this much whatever its
    /// group count); past it the oldest entries go, and a member whose gap
    /// they no longer hold takes a state transfer, as without them.
    /// Default 128 MiB (16 snapshot intervals of 8 MiB: a few seconds of
    /// a group's writes at the disk's rate); 0 keeps none.
    pub backlog_size_max_bytes: u64,
    /// Test builds only: the safety rule broken on purpose, for the
    /// simulator's mutation suite (see [`crate::mutants`]). The field does
    /// not exist in other builds.
    #[cfg(any(test, feature = "mutants"))]
    pub mutant: Option<crate::mutants::Mutant>,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            timing: TimingConfig::default(),
            pipeline_max_ops: 256,
            snapshot_interval_ops: 1024,
            snapshot_interval_bytes: 8 * 1024 * 1024,
            clients_max: 4096,
            request_queue_max: 1024,
            view_jump_max_views: VIEW_JUMP_DEFAULT_VIEWS,
            state_transfer_size_max_bytes: 1 << 30,
            state_chunk_size_bytes: cohort_messages::STATE_CHUNK_SIZE_MAX_BYTES,
            state_transfer_log_bytes_max: 512 << 20,
            state_stream_patience_ticks: 300,
            backlog_size_max_bytes: 128 << 20,
            #[cfg(any(test, feature = "mutants"))]
            mutant: None,
        }
    }
}

impl CoreConfig {
    /// All rules.
    pub fn validate(&self) -> Result<(), CoreConfigError> {
        self.timing.validate()?;
        let log_entries_max = self.snapshot_interval_ops + self.pipeline_max_ops;
        if self.pipeline_max_ops == 0 {
            return Err(CoreConfigError { field: "pipeline_max_ops", rule: "must be at least 1".into() });
        }
        if log_entries_max > cohort_messages::VIEW_CHANGE_LOG_ENTRIES_MAX as u64 / 2 {
            return Err(CoreConfigError {
                field: "snapshot_interval_ops",
                rule: format!(
                    "snapshot_interval_ops + pipeline_max_ops ({log_entries_max}) must leave a view change log within half of {}",
                    cohort_messages::VIEW_CHANGE_LOG_ENTRIES_MAX
                ),
            });
        }
        if self.clients_max == 0 {
            return Err(CoreConfigError { field: "clients_max", rule: "must be at least 1".into() });
        }
        if self.request_queue_max == 0 {
            return Err(CoreConfigError { field: "request_queue_max", rule: "must be at least 1".into() });
        }
        if (self.view_jump_max_views as usize) < cohort_messages::GROUP_MEMBERS_MAX {
            return Err(CoreConfigError {
                field: "view_jump_max_views",
                rule: format!(
                    "must be at least {} (GROUP_MEMBERS_MAX), not {}",
                    cohort_messages::GROUP_MEMBERS_MAX,
                    self.view_jump_max_views
                ),
            });
        }
        if self.state_transfer_size_max_bytes < cohort_messages::STATE_CHUNK_SIZE_MAX_BYTES as u64 {
            return Err(CoreConfigError {
                field: "state_transfer_size_max_bytes",
                rule: format!(
                    "must be at least one state chunk ({} bytes), not {}",
                    cohort_messages::STATE_CHUNK_SIZE_MAX_BYTES,
                    self.state_transfer_size_max_bytes
                ),
            });
        }
        if !(STATE_CHUNK_SIZE_MIN_BYTES..=cohort_messages::STATE_CHUNK_SIZE_MAX_BYTES)
            .contains(&self.state_chunk_size_bytes)
        {
            return Err(CoreConfigError {
                field: "state_chunk_size_bytes",
                rule: format!(
                    "must be {STATE_CHUNK_SIZE_MIN_BYTES} to {} bytes, not {}",
                    cohort_messages::STATE_CHUNK_SIZE_MAX_BYTES,
                    self.state_chunk_size_bytes
                ),
            });
        }
        if self.state_transfer_log_bytes_max < self.snapshot_interval_bytes {
            return Err(CoreConfigError {
                field: "state_transfer_log_bytes_max",
                rule: format!(
                    "must be at least snapshot_interval_bytes ({}), not {}",
                    self.snapshot_interval_bytes, self.state_transfer_log_bytes_max
                ),
            });
        }
        if self.state_stream_patience_ticks < self.timing.repair_timeout_ticks.max(1) {
            return Err(CoreConfigError {
                field: "state_stream_patience_ticks",
                rule: format!(
                    "must be at least repair_timeout_ticks ({}), not {}",
                    self.timing.repair_timeout_ticks, self.state_stream_patience_ticks
                ),
            });
        }
        Ok(())
    }
}

/// D3: the smallest `state_chunk_size_bytes`: a stream's first chunk holds
/// its magic and header length.
pub const STATE_CHUNK_SIZE_MIN_BYTES: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_validation_error_names_its_own_field() {
        let repair = TimingConfig { repair_timeout_ticks: 0, ..TimingConfig::default() };
        assert_eq!(repair.validate().unwrap_err().field, "repair_timeout_ticks");
        let election = TimingConfig { view_change_timeout_ticks: 0, ..TimingConfig::default() };
        assert_eq!(election.validate().unwrap_err().field, "view_change_timeout_ticks");
        let queue = CoreConfig { request_queue_max: 0, ..CoreConfig::default() };
        assert_eq!(queue.validate().unwrap_err().field, "request_queue_max");
        let clients = CoreConfig { clients_max: 0, ..CoreConfig::default() };
        assert_eq!(clients.validate().unwrap_err().field, "clients_max");
        let jump = CoreConfig { view_jump_max_views: 63, ..CoreConfig::default() };
        assert_eq!(jump.validate().unwrap_err().field, "view_jump_max_views");
        let transfer = CoreConfig { state_transfer_size_max_bytes: 1 << 20, ..CoreConfig::default() };
        assert_eq!(transfer.validate().unwrap_err().field, "state_transfer_size_max_bytes");
    }

    #[test]
    fn r9_defaults_pass_and_short_timeout_fails() {
        assert_eq!(CoreConfig::default().validate(), Ok(()));
        let timing = TimingConfig { commit_heartbeat_timeout_ticks: 19, ..TimingConfig::default() };
        let error = timing.validate().unwrap_err();
        assert_eq!(error.field, "commit_heartbeat_timeout_ticks");
    }

    #[test]
    fn r23_idle_interval_must_be_whole_multiple() {
        let timing = TimingConfig { commit_idle_heartbeat_interval_ticks: 7, ..TimingConfig::default() };
        assert_eq!(timing.validate().unwrap_err().field, "commit_idle_heartbeat_interval_ticks");
        let timing = TimingConfig { commit_idle_heartbeat_timeout_ticks: 60, ..TimingConfig::default() };
        assert_eq!(timing.validate().unwrap_err().field, "commit_idle_heartbeat_timeout_ticks");
    }
}
