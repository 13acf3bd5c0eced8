//! The agent's settings, checked once when a node or the simulator builds
//! them: every later rule of the agent counts on what
//! [`AgentConfig::validate`] accepts (a keepalive interval and a retry of at
//! least a tick, a session timeout past two keepalives), so a bad setting is
//! refused at start with its name rather than found as a stuck session.

use cohort_messages::replication::Replication;
use cohort_messages::{ClientId, GroupId, NodeId};

use super::super::ExpiredPolicy;

/// The agent's settings; every duration is in ticks of the node's core.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// This node.
    pub node: NodeId,
    /// Where peers reach it (registered in the metadata).
    pub address: String,
    /// The agent's client id for its requests to the metadata group; fresh
    /// on every start, because a client the group does not know must start
    /// at request 1.
    pub client: ClientId,
    /// The metadata group.
    pub metadata_group: GroupId,
    /// S3.
    pub policy: ExpiredPolicy,
    /// How often a keepalive leaves.
    pub keepalive_interval_ticks: u64,
    /// F2: the wait after the first failed reconnect attempt; it doubles
    /// after each further one.
    pub reconnect_backoff_ticks: u64,
    /// Silence after which the metadata primary expires a session (S1).
    pub session_timeout_ticks: u64,
    /// An unanswered request is sent again after this long.
    pub request_retry_ticks: u64,
    /// S4: a group placed elsewhere is unloaded after this long.
    pub unload_grace_ticks: u64,
    /// Groups configured on this node, created in the metadata once their
    /// members registered.
    pub bootstrap_groups: Vec<BootstrapGroup>,
    /// C5: on the metadata primary, at most this many primary transfers are
    /// asked for per tick; `None` turns the balancer off.
    pub balance_transfers_per_tick: Option<u32>,
}

/// A group a node is configured with, as the metadata records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapGroup {
    /// The group.
    pub group: GroupId,
    /// Its kind.
    pub kind: String,
    /// Its members in member-index order.
    pub members: Vec<NodeId>,
    /// Its replication quorum and write mode.
    pub replication: Replication,
}

impl AgentConfig {
    /// Checks the settings; the error names the setting and the rule.
    pub fn validate(&self) -> Result<(), String> {
        if self.keepalive_interval_ticks == 0 || self.request_retry_ticks == 0 {
            return Err("keepalive_interval_ticks and request_retry_ticks must be at least 1".into());
        }
        if self.balance_transfers_per_tick == Some(0) {
            return Err("balance_transfers_per_tick must be at least 1 (or absent: no balancing)".into());
        }
        if self.session_timeout_ticks <= 2 * self.keepalive_interval_ticks {
            return Err(format!(
                "session_timeout_ticks ({}) must exceed two keepalive intervals ({} ticks each)",
                self.session_timeout_ticks, self.keepalive_interval_ticks
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture;

    #[test]
    fn s1_a_session_timeout_of_two_keepalives_is_refused_by_name() {
        let mut config = fixture::config();
        assert_eq!(config.validate(), Ok(()));
        config.session_timeout_ticks = 2 * config.keepalive_interval_ticks;
        assert_eq!(
            config.validate(),
            Err("session_timeout_ticks (10) must exceed two keepalive intervals (5 ticks each)".to_string())
        );
    }

    #[test]
    fn c5_a_balancer_budget_of_zero_is_refused() {
        let mut config = fixture::config();
        config.balance_transfers_per_tick = Some(0);
        assert_eq!(
            config.validate(),
            Err("balance_transfers_per_tick must be at least 1 (or absent: no balancing)".to_string())
        );
        config.request_retry_ticks = 0;
        assert_eq!(
            config.validate(),
            Err("keepalive_interval_ticks and request_retry_ticks must be at least 1".to_string())
        );
    }
}
