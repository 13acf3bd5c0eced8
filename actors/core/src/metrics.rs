//! Per-shard counters of the heartbeat data plane (R19, R32) and of rejected
//! input. Plain numbers the runtime exports and the simulator reads; the core
//! only ever adds to them.

/// Counters of one shard. Names say what is counted; all are totals since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardMetrics {
    /// R19: Commit batch frames sent.
    pub commit_batches_sent: u64,
    /// R19: Commit entries sent.
    pub commit_entries_sent: u64,
    /// R19: Commit batch frames received.
    pub commit_batches_received: u64,
    /// R19: Commit entries received (good and bad).
    pub commit_entries_received: u64,
    /// R17: Commit entries rejected alone as bad.
    pub commit_entries_rejected: u64,
    /// R32: CommitReply batch frames sent.
    pub reply_batches_sent: u64,
    /// R32: CommitReply entries sent.
    pub reply_entries_sent: u64,
    /// R32: CommitReply batch frames received.
    pub reply_batches_received: u64,
    /// R32: CommitReply entries received (good and bad).
    pub reply_entries_received: u64,
    /// R29: CommitReply entries rejected alone as bad.
    pub reply_entries_rejected: u64,
    /// R25: Commit batches handed to a link that was not connected.
    pub commit_batches_unconnected: u64,
    /// Views this shard's members became primary in.
    pub primaries_started: u64,
    /// View changes this shard's members started.
    pub view_changes_started: u64,
    /// K4: Prepares not sent because their peer's link was congested (sent
    /// again once it drains).
    pub prepares_held_back: u64,
    /// C4: primary transfers (directed view changes) this shard's primaries
    /// started; refused ones are not counted (the caller gets the error).
    pub primary_transfers_started: u64,
    /// Z3: shard-pair heartbeats sent (each stands in for the Commits of
    /// every group quiesced for its peer).
    pub pair_heartbeats_sent: u64,
    /// Z3: shard-pair heartbeat replies sent.
    pub pair_replies_sent: u64,
    /// Z3: group members quiesced (a primary's group for one peer, once
    /// that peer accepted).
    pub quiesced: u64,
    /// Z3: group members woken (by a write, a view change, a timeout or a
    /// digest mismatch), on either end.
    pub quiet_woken: u64,
    /// Z3: heartbeats or replies whose digests did not match: every group
    /// quiesced between the pair woke.
    pub quiet_mismatches: u64,
    /// Z4: StartViews a primary did not send in answer to a member's
    /// election message, one having gone to that member within a repair
    /// timeout.
    pub start_views_withheld: u64,
    /// H1: recovering members that started a new group (every voter blank).
    pub recoveries_founded: u64,
    /// H1: recovering members that took a primary's log and recovered.
    pub recoveries_done: u64,
    /// D1: checkpoints a persistent state machine failed to take (each
    /// leaves the group's log in place until a later one succeeds).
    pub checkpoints_failed: u64,
    /// D3: exports, stagings or installs of a streamed state that a state
    /// machine failed (each drops the transfer; it starts again).
    pub state_transfer_failures: u64,
    /// D3: state chunks sent.
    pub state_chunks_sent: u64,
    /// D3: the bytes of the state chunks sent.
    pub state_chunk_bytes_sent: u64,
    /// D3: the bytes of stream chunks sent again: below the end of what
    /// their stream had sent (a lost chunk, a receiver that restarted).
    pub state_chunk_bytes_resent: u64,
    /// D3: the bytes of the state chunks taken into transfers (each byte
    /// of a transfer once; sent minus taken is what went out twice).
    pub state_chunk_bytes_taken: u64,
    /// D3: streams of a checkpoint opened to serve transfers (a transfer
    /// whose stream was dropped, its tail full, goes on in a new one).
    pub state_streams_opened: u64,
    /// D3: streamed states installed.
    pub state_streams_installed: u64,
    /// D1: bytes of operations primaries sent lagging members from their
    /// backlogs (entries their snapshots dropped), instead of a state
    /// transfer.
    pub backlog_bytes_served: u64,
    /// D2: runs of committed ops lent to the apply worker.
    pub apply_runs_lent: u64,
    /// D3: chunks of streamed transfers lent, with their state machine, to
    /// the apply worker to be staged.
    pub state_chunks_lent: u64,
    /// D2: runs that came back from the apply worker for no run this
    /// shard lent (a shell's bug; the state machine is dropped).
    pub apply_runs_unknown: u64,
    /// D2: requests (reads and writes) that waited for their group's state
    /// machine to come back from the apply worker.
    pub requests_waited_for_state: u64,
}

impl ShardMetrics {
    /// Add another shard's counters (node totals).
    pub fn add(&mut self, other: &ShardMetrics) {
        let ShardMetrics {
            commit_batches_sent,
            commit_entries_sent,
            commit_batches_received,
            commit_entries_received,
            commit_entries_rejected,
            reply_batches_sent,
            reply_entries_sent,
            reply_batches_received,
            reply_entries_received,
            reply_entries_rejected,
            commit_batches_unconnected,
            primaries_started,
            view_changes_started,
            prepares_held_back,
            primary_transfers_started,
            pair_heartbeats_sent,
            pair_replies_sent,
            quiesced,
            quiet_woken,
            quiet_mismatches,
            start_views_withheld,
            recoveries_founded,
            recoveries_done,
            checkpoints_failed,
            state_transfer_failures,
            state_chunks_sent,
            state_chunk_bytes_sent,
            state_chunk_bytes_resent,
            state_chunk_bytes_taken,
            state_streams_opened,
            state_streams_installed,
            backlog_bytes_served,
            apply_runs_lent,
            state_chunks_lent,
            apply_runs_unknown,
            requests_waited_for_state,
        } = other;
        self.commit_batches_sent += commit_batches_sent;
        self.commit_entries_sent += commit_entries_sent;
        self.commit_batches_received += commit_batches_received;
        self.commit_entries_received += commit_entries_received;
        self.commit_entries_rejected += commit_entries_rejected;
        self.reply_batches_sent += reply_batches_sent;
        self.reply_entries_sent += reply_entries_sent;
        self.reply_batches_received += reply_batches_received;
        self.reply_entries_received += reply_entries_received;
        self.reply_entries_rejected += reply_entries_rejected;
        self.commit_batches_unconnected += commit_batches_unconnected;
        self.primaries_started += primaries_started;
        self.view_changes_started += view_changes_started;
        self.prepares_held_back += prepares_held_back;
        self.primary_transfers_started += primary_transfers_started;
        self.pair_heartbeats_sent += pair_heartbeats_sent;
        self.pair_replies_sent += pair_replies_sent;
        self.quiesced += quiesced;
        self.quiet_woken += quiet_woken;
        self.quiet_mismatches += quiet_mismatches;
        self.start_views_withheld += start_views_withheld;
        self.recoveries_founded += recoveries_founded;
        self.recoveries_done += recoveries_done;
        self.checkpoints_failed += checkpoints_failed;
        self.state_transfer_failures += state_transfer_failures;
        self.state_chunks_sent += state_chunks_sent;
        self.state_chunk_bytes_sent += state_chunk_bytes_sent;
        self.state_chunk_bytes_resent += state_chunk_bytes_resent;
        self.state_chunk_bytes_taken += state_chunk_bytes_taken;
        self.state_streams_opened += state_streams_opened;
        self.state_streams_installed += state_streams_installed;
        self.backlog_bytes_served += backlog_bytes_served;
        self.apply_runs_lent += apply_runs_lent;
        self.state_chunks_lent += state_chunks_lent;
        self.apply_runs_unknown += apply_runs_unknown;
        self.requests_waited_for_state += requests_waited_for_state;
    }
}

impl HeartbeatGauges {
    /// Add another shard's gauges (node totals).
    pub fn add(&mut self, other: &HeartbeatGauges) {
        self.busy += other.busy;
        self.idle += other.idle;
        self.backup += other.backup;
        self.view_change += other.view_change;
    }
}

/// Gauges: how many groups of the shard are in each heartbeat state (R32).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatGauges {
    /// Primaries of busy groups.
    pub busy: u64,
    /// Primaries of idle groups.
    pub idle: u64,
    /// Backups (following a primary).
    pub backup: u64,
    /// Members in a view change.
    pub view_change: u64,
}
