//! The node-level actor that writes the run-time placements file
//! ([`crate::placements::PlacementFile`]), so its fsyncs never run on a
//! shard's thread. Shards send it each change of the groups they host at run
//! time; it writes them in the order they arrive.

use std::sync::Arc;

use actix::prelude::*;
use cohort_messages::{GroupId, Incarnation, NodeId};

use crate::metrics::{NodeMetrics, SyncKind};
use crate::placements::{PlacementFile, PlacementFileError, RecordedPlacement};

/// The recorder. Runs on the node's I/O arbiter.
pub struct PlacementRecorder {
    file: Arc<PlacementFile>,
    metrics: Arc<NodeMetrics>,
}

/// Syncs of one rewrite of the file: the file, then its directory.
const SYNCS_PER_WRITE: u64 = 2;

impl PlacementRecorder {
    /// A recorder of `file`, counting its syncs in `metrics`.
    pub fn new(file: Arc<PlacementFile>, metrics: Arc<NodeMetrics>) -> PlacementRecorder {
        PlacementRecorder { file, metrics }
    }

    fn wrote(&self, written: bool) {
        if written {
            self.metrics.add_syncs(SyncKind::Placements, SYNCS_PER_WRITE);
        }
    }
}

impl Actor for PlacementRecorder {
    type Context = Context<Self>;
}

/// Record (or replace) a group's placement durably; answered once it is.
#[derive(Message)]
#[rtype(result = "Result<(), PlacementFileError>")]
pub struct RecordPlacement(pub RecordedPlacement);

impl Handler<RecordPlacement> for PlacementRecorder {
    type Result = Result<(), PlacementFileError>;

    fn handle(&mut self, RecordPlacement(placement): RecordPlacement, _ctx: &mut Self::Context) -> Self::Result {
        let result = self.file.record(placement);
        self.wrote(result.is_ok());
        result
    }
}

/// Forget a group's record (the group was unloaded or dropped).
#[derive(Message)]
#[rtype(result = "()")]
pub struct RemovePlacement(pub GroupId);

impl Handler<RemovePlacement> for PlacementRecorder {
    type Result = ();

    fn handle(&mut self, RemovePlacement(group): RemovePlacement, _ctx: &mut Self::Context) {
        // Without its record the next start does not host the group again
        // (if it is not configured); a record left by a failed write only
        // re-creates an empty learner, which the agent unloads again.
        match self.file.remove(group) {
            Ok(removed) => self.wrote(removed),
            Err(error) => tracing::warn!(group = group.0, %error, "group's placement record not removed"),
        }
    }
}

/// The learners of a recorded group changed (kept in step while the record
/// is of the replica's incarnation).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetRecordedLearners {
    /// The group.
    pub group: GroupId,
    /// The replica's incarnation.
    pub incarnation: Incarnation,
    /// Its learners.
    pub learners: Vec<NodeId>,
}

impl Handler<SetRecordedLearners> for PlacementRecorder {
    type Result = ();

    fn handle(&mut self, set: SetRecordedLearners, _ctx: &mut Self::Context) {
        match self.file.set_learners(set.group, set.incarnation, &set.learners) {
            Ok(changed) => self.wrote(changed),
            Err(error) => tracing::warn!(group = set.group.0, %error, "recorded learners not updated"),
        }
    }
}
