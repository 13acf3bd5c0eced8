//! The metadata freeze for upgrades.
//!
//! During a rolling upgrade, nodes of two versions run side by side. A
//! change of placement decided then would be carried out by code of both
//! versions, so the operator (or an upgraded node, on its own) freezes the
//! metadata first: one committed command, so every node sees the freeze at
//! the same epoch. While frozen, every operator change is refused with the
//! epoch the freeze began at; everything that keeps the cluster serving goes
//! on: registrations and sessions (a restarted node must rejoin), ownership
//! reports (failover), epoch acks, and the reports that finish a member
//! change already decided (a sealed group must still switch, or it would
//! stop taking writes for the whole upgrade).

use cohort_messages::metadata::{MetadataCommand, MetadataResult};
use cohort_messages::{Epoch, NodeId};
use serde::{Deserialize, Serialize};

use super::Metadata;

/// A freeze in force.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frozen {
    /// The epoch of the `Freeze` command.
    pub since: Epoch,
    /// The node that asked.
    pub by: NodeId,
}

impl Frozen {
    /// The reason every refused change carries.
    pub fn refusal(&self) -> String {
        format!(
            "the cluster metadata is frozen since epoch {} (asked by {}); run `cohort admin unfreeze` once the upgrade is done",
            self.since.0, self.by
        )
    }
}

/// True for the commands a freeze refuses: the operator's changes of
/// placement and leadership, and the steps of multi-step operations.
pub(super) fn is_operator_change(command: &MetadataCommand) -> bool {
    match command {
        MetadataCommand::CreateGroup { .. }
        | MetadataCommand::CreateGroups { .. }
        | MetadataCommand::DeleteGroup { .. }
        | MetadataCommand::StartOperation { .. }
        | MetadataCommand::AdvanceOperation { .. }
        | MetadataCommand::CancelOperation { .. }
        | MetadataCommand::TransferPrimary { .. }
        | MetadataCommand::TransferPrimaries { .. } => true,
        MetadataCommand::RegisterNode { .. }
        | MetadataCommand::OpenSession { .. }
        | MetadataCommand::ExpireSession { .. }
        | MetadataCommand::ReportOwnership { .. }
        | MetadataCommand::ReportOwnerships { .. }
        | MetadataCommand::AckEpoch { .. }
        | MetadataCommand::ReportSealed { .. }
        | MetadataCommand::ReportCaughtUp { .. }
        | MetadataCommand::Freeze { .. }
        | MetadataCommand::Unfreeze { .. }
        | MetadataCommand::RecordMetadataGroup { .. } => false,
    }
}

impl Metadata {
    pub(super) fn freeze(&mut self, epoch: Epoch, by: NodeId) -> MetadataResult {
        if let Some(frozen) = self.frozen {
            return MetadataResult::Refused {
                reason: format!(
                    "the cluster metadata is already frozen since epoch {} (asked by {})",
                    frozen.since.0, frozen.by
                ),
            };
        }
        self.frozen = Some(Frozen { since: epoch, by });
        MetadataResult::Done { epoch }
    }

    pub(super) fn unfreeze(&mut self, epoch: Epoch, _by: NodeId) -> MetadataResult {
        if self.frozen.take().is_none() {
            return MetadataResult::Refused { reason: "the cluster metadata is not frozen".into() };
        }
        MetadataResult::Done { epoch }
    }
}
