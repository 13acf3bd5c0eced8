//! Groups a node gained at run time, kept across restarts.
//!
//! The node's configuration names the groups it was built with. Operations
//! (move, join, replace; see `docs/metadata.md`) make a node host a
//! *learner* replica of a group it was not configured with, which may
//! later become a voter when the group switches incarnation. Its log is in
//! the WAL, but without a record of the placement the node would not know
//! the group at the next start: the metadata would name it a member of a
//! group it does not host, its agent would never ack, and operations would
//! stall. A promoted voter must not be re-created empty either (an empty
//! voter could lose committed ops), so the placement has to survive.
//!
//! [`PlacementFile`] keeps these placements in `placements.json` in the
//! node's data directory, next to the shard directories. A record holds what
//! rebuilds the learner's [`GroupSpec`]: group, kind, incarnation, members,
//! learners, replication quorum and write mode (`me` is the node's index
//! in members then learners). The record keeps the incarnation it was
//! hosted at; when the group switched since, the core adopts the newer
//! incarnation from storage on recovery (`GroupSpec::adopt_recovered`).
//!
//! Every change rewrites the whole file atomically: a temporary file is
//! written and synced, renamed over the old one, and the directory synced.
//! A missing file means no run-time placements; an unreadable or corrupt one
//! is an error naming the file and what is wrong. The file is small and
//! changes only when a node gains or loses a group; the node-level
//! [`crate::placement_recorder::PlacementRecorder`] writes it, one change at a
//! time, so its syncs never run on a shard's thread.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cohort_core::replica::Placement;
use cohort_core::{GroupSpec, WriteMode};
use cohort_messages::{GroupId, Incarnation, NodeId};
use serde::{Deserialize, Serialize};

use crate::kind::{GroupKind, HostedGroup};
use crate::registry::{self, Kinds};

/// The file's name in the node's data directory.
pub const PLACEMENTS_FILE: &str = "placements.json";

/// The file format's version; another version is refused.
const FORMAT_VERSION: u32 = 1;

/// Why the placements file could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run-time placements file {}: {reason}", path.display())]
pub struct PlacementFileError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub reason: String,
}

/// One group this node hosts because the metadata placed it here at run time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedPlacement {
    /// The group.
    pub group: u64,
    /// Its kind's name.
    pub kind: String,
    /// The incarnation it was hosted at.
    pub incarnation: u64,
    /// Voters of that incarnation, in member-index order.
    pub members: Vec<u64>,
    /// Learners, after the members in index order.
    pub learners: Vec<u64>,
    /// Qr: members that must hold an op durably before it commits.
    pub replication_quorum: usize,
    /// Q4: `"sync"` or `"async"`.
    pub write_mode: String,
}

impl RecordedPlacement {
    /// The record of a replica created from `spec`.
    pub fn of(spec: &GroupSpec, kind: &GroupKind) -> RecordedPlacement {
        RecordedPlacement {
            group: spec.group.0,
            kind: kind.as_str().to_string(),
            incarnation: spec.incarnation.0,
            members: spec.members.iter().map(|node| node.0).collect(),
            learners: spec.learners.iter().map(|node| node.0).collect(),
            replication_quorum: spec.quorums.replication,
            write_mode: match spec.write_mode {
                WriteMode::Sync => "sync".into(),
                WriteMode::Async => "async".into(),
            },
        }
    }

    /// The spec of `node`'s replica: `me` is its index among the members,
    /// then the learners. Errors say what in the record is wrong.
    pub fn spec(&self, node: NodeId) -> Result<GroupSpec, String> {
        let group = GroupId(self.group);
        let write_mode = match self.write_mode.as_str() {
            "sync" => WriteMode::Sync,
            "async" => WriteMode::Async,
            other => return Err(format!("{group}: write_mode {other:?} is neither \"sync\" nor \"async\"")),
        };
        let placement = Placement {
            group,
            incarnation: Incarnation(self.incarnation),
            members: self.members.iter().copied().map(NodeId).collect(),
            learners: self.learners.iter().copied().map(NodeId).collect(),
            replication_quorum: Some(self.replication_quorum),
            write_mode,
        };
        GroupSpec::of_node(&placement, node).map_err(|error| error.to_string())
    }

    /// This node's replica, checked against the registered kinds.
    fn hosted(&self, node: NodeId, kinds: &Kinds) -> Result<HostedGroup, String> {
        if GroupId(self.group) == GroupId::METADATA {
            return Err(format!("{} is the metadata group, which is never placed at run time", GroupId::METADATA));
        }
        let kind = GroupKind::new(&self.kind);
        if !kinds.contains_key(&kind) {
            return Err(registry::unknown(kinds, GroupId(self.group), &kind).to_string());
        }
        let spec = self.spec(node)?;
        Ok(HostedGroup { spec, kind })
    }
}

/// The file's content.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileContent {
    version: u32,
    placements: Vec<RecordedPlacement>,
}

/// The node's run-time placements and the file that keeps them (see the
/// module docs). Shared by the node's shards.
#[derive(Debug)]
pub struct PlacementFile {
    path: PathBuf,
    recorded: Mutex<BTreeMap<GroupId, RecordedPlacement>>,
}

impl PlacementFile {
    /// Read the placements file of data directory `dir`; none if it does not exist.
    pub fn open(dir: &Path) -> Result<PlacementFile, PlacementFileError> {
        let path = dir.join(PLACEMENTS_FILE);
        let error = |reason: String| PlacementFileError { path: path.clone(), reason };
        let recorded = match std::fs::read(&path) {
            Ok(bytes) => {
                let content: FileContent = serde_json::from_slice(&bytes)
                    .map_err(|parse| error(format!("not a placements file ({parse}); fix or remove it")))?;
                if content.version != FORMAT_VERSION {
                    return Err(error(format!(
                        "format version {} is not supported (this node reads version {FORMAT_VERSION})",
                        content.version
                    )));
                }
                let mut recorded = BTreeMap::new();
                for placement in content.placements {
                    let group = GroupId(placement.group);
                    if recorded.insert(group, placement).is_some() {
                        return Err(error(format!("{group} is recorded twice")));
                    }
                }
                recorded
            }
            Err(io) if io.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(io) => return Err(error(format!("cannot read it: {io}"))),
        };
        Ok(PlacementFile { path, recorded: Mutex::new(recorded) })
    }

    /// `node`'s replicas of the recorded groups whose shard (of `shards`) is
    /// `index`; every one if `index` is `None`. Errors name the file.
    pub fn hosted(
        &self,
        node: NodeId,
        kinds: &Kinds,
        shards: usize,
        index: Option<usize>,
    ) -> Result<Vec<HostedGroup>, PlacementFileError> {
        let recorded = self.lock();
        recorded
            .iter()
            .filter(|(group, _)| index.is_none_or(|index| cohort_core::routing::shard_of(**group, shards) == index))
            .map(|(_, placement)| placement.hosted(node, kinds).map_err(|reason| self.error(reason)))
            .collect()
    }

    /// Whether `group` is recorded.
    #[cfg(test)]
    pub fn contains(&self, group: GroupId) -> bool {
        self.lock().contains_key(&group)
    }

    /// Record (or replace) the placement of `placement.group`, durably.
    pub fn record(&self, placement: RecordedPlacement) -> Result<(), PlacementFileError> {
        let mut recorded = self.lock();
        let mut next = recorded.clone();
        next.insert(GroupId(placement.group), placement);
        self.write(&next)?;
        *recorded = next;
        Ok(())
    }

    /// Replace the learners of `group`'s record if it is at `incarnation`
    /// (a record of an older incarnation keeps its own, which place this node
    /// in that incarnation). True if the record changed.
    pub fn set_learners(
        &self,
        group: GroupId,
        incarnation: Incarnation,
        learners: &[NodeId],
    ) -> Result<bool, PlacementFileError> {
        let mut recorded = self.lock();
        let learners: Vec<u64> = learners.iter().map(|node| node.0).collect();
        let Some(placement) = recorded.get(&group) else { return Ok(false) };
        if placement.incarnation != incarnation.0 || placement.learners == learners {
            return Ok(false);
        }
        let mut next = recorded.clone();
        if let Some(placement) = next.get_mut(&group) {
            placement.learners = learners;
        }
        self.write(&next)?;
        *recorded = next;
        Ok(true)
    }

    /// Forget `group`'s record, durably. True if there was one.
    pub fn remove(&self, group: GroupId) -> Result<bool, PlacementFileError> {
        let mut recorded = self.lock();
        if !recorded.contains_key(&group) {
            return Ok(false);
        }
        let mut next = recorded.clone();
        next.remove(&group);
        self.write(&next)?;
        *recorded = next;
        Ok(true)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupId, RecordedPlacement>> {
        // A thread that panicked while holding the lock left the map as it
        // was before its change (changes are made on a copy).
        self.recorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn error(&self, reason: String) -> PlacementFileError {
        PlacementFileError { path: self.path.clone(), reason }
    }

    /// Write `recorded` atomically: temp file, sync, rename, sync the directory.
    fn write(&self, recorded: &BTreeMap<GroupId, RecordedPlacement>) -> Result<(), PlacementFileError> {
        let content = FileContent { version: FORMAT_VERSION, placements: recorded.values().cloned().collect() };
        let bytes = serde_json::to_vec_pretty(&content).map_err(|error| self.error(format!("encoding: {error}")))?;
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        std::fs::create_dir_all(dir).map_err(|error| self.error(format!("creating {}: {error}", dir.display())))?;
        let temp = self.path.with_extension("json.tmp");
        let written = (|| {
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            std::fs::rename(&temp, &self.path)?;
            std::fs::File::open(dir)?.sync_all()
        })();
        written.map_err(|error| self.error(format!("writing: {error}")))
    }
}

/// `configured` with the recorded placements merged in: a recorded group
/// replaces a configured one (it is what the metadata placed here since).
pub(crate) fn merge(configured: &[HostedGroup], recorded: Vec<HostedGroup>) -> Vec<HostedGroup> {
    let mut merged: Vec<HostedGroup> = configured
        .iter()
        .filter(|hosted| !recorded.iter().any(|record| record.spec.group == hosted.spec.group))
        .cloned()
        .collect();
    merged.extend(recorded);
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Group 3 at incarnation 1 on nodes 1 and 2, node 4 its learner.
    fn learner_of_group_3() -> RecordedPlacement {
        RecordedPlacement {
            group: 3,
            kind: "register".into(),
            incarnation: 1,
            members: vec![1, 2],
            learners: vec![4],
            replication_quorum: 2,
            write_mode: "sync".into(),
        }
    }

    #[test]
    fn p4_learner_placement_round_trips_through_the_file() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = PlacementFile::open(dir.path()).expect("a missing file is no placements");
        assert!(!file.contains(GroupId(3)));
        file.record(learner_of_group_3()).expect("recorded");
        assert!(file.set_learners(GroupId(3), Incarnation(1), &[NodeId(5), NodeId(4)]).expect("updated"));
        // A record of an older incarnation keeps its learners.
        assert!(!file.set_learners(GroupId(3), Incarnation(2), &[NodeId(6)]).expect("not updated"));
        let mut other = learner_of_group_3();
        other.group = 9;
        other.write_mode = "async".into();
        file.record(other.clone()).expect("recorded");

        let reopened = PlacementFile::open(dir.path()).expect("reads back");
        let recorded = reopened.lock().clone();
        let mut expected = learner_of_group_3();
        expected.learners = vec![5, 4];
        assert_eq!(recorded.get(&GroupId(3)), Some(&expected));
        assert_eq!(recorded.get(&GroupId(9)), Some(&other));
        // `me` is node 4's index among members then learners.
        let spec = expected.spec(NodeId(4)).expect("a valid spec");
        assert_eq!(
            (spec.me, spec.incarnation, spec.quorums.replication),
            (cohort_messages::MemberIndex(3), Incarnation(1), 2)
        );
        assert_eq!(RecordedPlacement::of(&spec, &GroupKind::new("register")), expected);
        assert_eq!(other.spec(NodeId(4)).map(|spec| spec.write_mode), Ok(WriteMode::Async));

        assert!(reopened.remove(GroupId(3)).expect("removed"));
        assert!(!reopened.remove(GroupId(3)).expect("nothing to remove"));
        let reopened = PlacementFile::open(dir.path()).expect("reads back");
        assert!(!reopened.contains(GroupId(3)) && reopened.contains(GroupId(9)));
        assert!(!dir.path().join("placements.json.tmp").exists(), "the temp file was renamed");
    }

    #[test]
    fn p4_corrupt_placement_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join(PLACEMENTS_FILE);
        let open_error = |content: &str| {
            std::fs::write(&path, content).expect("written");
            PlacementFile::open(dir.path()).expect_err("refused")
        };
        let error = open_error("{\"version\":1,\"placements\":[{\"group\":3");
        assert_eq!(error.path, path);
        assert!(error.to_string().starts_with(&format!("run-time placements file {}: ", path.display())), "{error}");
        assert!(error.reason.contains("not a placements file"), "{error}");
        let error = open_error("{\"version\":7,\"placements\":[]}");
        assert!(error.reason.contains("format version 7 is not supported"), "{error}");
        let twice = serde_json::to_string(&FileContent {
            version: FORMAT_VERSION,
            placements: vec![learner_of_group_3(), learner_of_group_3()],
        })
        .expect("encodes");
        let error = open_error(&twice);
        assert!(error.reason.contains("group:3 is recorded twice"), "{error}");
    }

    #[test]
    fn p4_recorded_placement_that_does_not_place_this_node_is_refused() {
        let record = learner_of_group_3();
        let error = record.spec(NodeId(7)).expect_err("node 7 is not in it");
        assert!(error.contains("neither a member nor a learner"), "{error}");
        let mut bad = learner_of_group_3();
        bad.write_mode = "eventually".into();
        assert!(bad.spec(NodeId(4)).is_err_and(|error| error.contains("write_mode \"eventually\"")));
        let mut bad = learner_of_group_3();
        bad.replication_quorum = 3;
        assert!(bad.spec(NodeId(4)).is_err());
    }
}
