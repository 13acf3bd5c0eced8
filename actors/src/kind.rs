//! Group kinds: one node can host groups of different sorts, say key-value
//! partitions and message-log partitions, each with its own state machine and,
//! if the host wants one, its own actor ([`crate::custom`]).
//!
//! A kind is a name. The host registers each kind once on the node's
//! builder (see [`crate::registry`]); each placement names its kind. The node
//! checks at start that the names fit together and says what to fix; a
//! mistake never surfaces later as a group without a state machine. The
//! builder's `state_machine` registers the kind named
//! [`GroupKind::DEFAULT_NAME`], which placements name unless told otherwise.

use std::fmt;
use std::sync::Arc;

use cohort_core::GroupSpec;
use cohort_messages::GroupId;

/// The name of a group kind. Cheap to clone.
///
/// ```
/// use cohort_actors::kind::GroupKind;
/// let kv = GroupKind::new("kv");
/// assert_eq!(kv.as_str(), "kv");
/// assert_eq!(GroupKind::default().as_str(), GroupKind::DEFAULT_NAME);
/// assert_eq!(GroupKind::from("kv"), kv);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKind(Arc<str>);

impl GroupKind {
    /// The kind `NodeBuilder::state_machine` (cohort-runtime) registers and placements default to.
    pub const DEFAULT_NAME: &'static str = "default";

    /// The kind called `name`.
    pub fn new(name: impl AsRef<str>) -> GroupKind {
        GroupKind(Arc::from(name.as_ref()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for GroupKind {
    fn default() -> GroupKind {
        GroupKind::new(GroupKind::DEFAULT_NAME)
    }
}

impl From<&str> for GroupKind {
    fn from(name: &str) -> GroupKind {
        GroupKind::new(name)
    }
}

impl From<String> for GroupKind {
    fn from(name: String) -> GroupKind {
        GroupKind::new(name)
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl fmt::Debug for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GroupKind({:?})", &*self.0)
    }
}

/// Why a node's group kinds do not fit together. Each message says what to fix.
///
/// ```
/// use cohort_actors::kind::{GroupKind, GroupKindError};
/// let error = GroupKindError::Duplicate { kind: GroupKind::new("kv") };
/// assert!(error.to_string().contains("register each kind once"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupKindError {
    /// The same kind was registered twice.
    #[error(
        "group kind {kind} is registered twice: register each kind once (`state_machine(..)` registers the kind \"default\")"
    )]
    Duplicate {
        /// The kind.
        kind: GroupKind,
    },
    /// A placement names a kind that is not registered.
    #[error(
        "{group} is placed as group kind {kind}, which is not registered (registered: {registered}): register it with `NodeBuilder::group_kind` or fix the placement's kind"
    )]
    Unknown {
        /// The group.
        group: GroupId,
        /// The kind it names.
        kind: GroupKind,
        /// The kinds that are registered, comma-separated.
        registered: String,
    },
    /// A custom actor was given for a kind that is not registered.
    #[error(
        "a group actor is given for group kind {kind}, which is not registered: register the kind's state machine with `NodeBuilder::group_kind` too"
    )]
    ActorWithoutKind {
        /// The kind.
        kind: GroupKind,
    },
    /// Two custom actors were given for one kind.
    #[error("group kind {kind} has two group actors: give one per kind")]
    DuplicateActor {
        /// The kind.
        kind: GroupKind,
    },
}

/// A group this node hosts, with its kind.
#[derive(Clone, Debug)]
pub struct HostedGroup {
    /// The core's description of the group member.
    pub spec: GroupSpec,
    /// Its kind.
    pub kind: GroupKind,
}
