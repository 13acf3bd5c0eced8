//! The embedding API's changes of cluster metadata: groups created and
//! deleted at run time (C3), primary transfers (C4) and the upgrade freeze,
//! on [`NodeHandle`]. They are the commands `cohort admin` sends to the
//! admin port, submitted the same way (exactly once, through this node's
//! metadata agent to the metadata primary, wherever it runs), so a host can
//! create a topic's groups, or an upgraded node freeze the cluster's
//! metadata before it asks its peers to upgrade, without an HTTP client.

use cohort_actors::OperatorFailure;
use cohort_messages::metadata::{MetadataCommand, MetadataResult};
use cohort_messages::replication::Replication;
use cohort_messages::{Epoch, GroupId, Incarnation, NodeId};

use super::NodeHandle;

/// Why a metadata change did not apply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetadataChangeError {
    /// The command breaks a rule of its own (e.g. a member listed twice).
    #[error("not a valid change: {0}")]
    Invalid(String),
    /// The metadata refused it, with its reason (the group exists, a member
    /// is not registered, the metadata is frozen since epoch E, ...).
    #[error("refused by the metadata: {0}")]
    Refused(String),
    /// No result (unreachable, busy, stopping); it may still apply.
    #[error(transparent)]
    NoResult(#[from] OperatorFailure),
}

impl NodeHandle {
    /// Submit one metadata command and return the epoch it applied at.
    async fn change(&self, command: MetadataCommand) -> Result<(Epoch, MetadataResult), MetadataChangeError> {
        command.validate().map_err(|invalid| MetadataChangeError::Invalid(invalid.reason.to_string()))?;
        match self.operator.submit(command).await? {
            MetadataResult::Refused { reason } => Err(MetadataChangeError::Refused(reason)),
            result @ (MetadataResult::Done { epoch }
            | MetadataResult::GroupCreated { epoch, .. }
            | MetadataResult::OperationStarted { epoch, .. }
            | MetadataResult::SessionOpened { epoch, .. }
            | MetadataResult::OwnershipsReported { epoch, .. }) => Ok((epoch, result)),
        }
    }

    /// C3: create `group` of `kind` with `members` (in member-index order)
    /// and a majority replication quorum; every member hosts an empty
    /// replica within a few ticks. Returns its incarnation.
    pub async fn create_group(
        &self,
        group: GroupId,
        kind: &str,
        members: &[NodeId],
    ) -> Result<Incarnation, MetadataChangeError> {
        let command = MetadataCommand::CreateGroup {
            group,
            kind: kind.to_string(),
            members: members.to_vec(),
            replication: Replication::default(),
        };
        match self.change(command).await? {
            (_, MetadataResult::GroupCreated { incarnation, .. }) => Ok(incarnation),
            (_, other) => Err(MetadataChangeError::Refused(format!("unexpected result {other:?}"))),
        }
    }

    /// C3: delete `group`; every member removes its replica and its data.
    pub async fn delete_group(&self, group: GroupId) -> Result<Epoch, MetadataChangeError> {
        self.change(MetadataCommand::DeleteGroup { group }).await.map(|(epoch, _)| epoch)
    }

    /// C4: ask that member `to` lead `group`. Returns once the metadata
    /// recorded the request; the group's primary hands over when `to` is
    /// caught up (`cohort status` shows the owner once it reported).
    pub async fn transfer_primary(&self, group: GroupId, to: NodeId) -> Result<Epoch, MetadataChangeError> {
        self.change(MetadataCommand::TransferPrimary { group, to }).await.map(|(epoch, _)| epoch)
    }

    /// Freeze the cluster metadata for an upgrade, in this node's name:
    /// until [`NodeHandle::unfreeze`], operator changes are refused while
    /// data, sessions and failover go on. Returns the epoch it began at.
    pub async fn freeze(&self) -> Result<Epoch, MetadataChangeError> {
        self.change(MetadataCommand::Freeze { by: self.node }).await.map(|(epoch, _)| epoch)
    }

    /// End a freeze.
    pub async fn unfreeze(&self) -> Result<Epoch, MetadataChangeError> {
        self.change(MetadataCommand::Unfreeze { by: self.node }).await.map(|(epoch, _)| epoch)
    }
}
