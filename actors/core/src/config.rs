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
        Ok(())
    }

    /// R23: a backup never waits less than `commit_heartbeat_timeout`, so the
    /// idle timeout in force is the longer of the two.
    pub fn idle_timeout_effective_ticks(&self) -> u64 {
        self.commit_idle_heartbeat_timeout_ticks.max(self.commit_heartbeat_timeout_ticks)
    }
}

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
        Ok(())
    }
}

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
