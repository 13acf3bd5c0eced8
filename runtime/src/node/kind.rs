//! Group kinds: one node can host groups of different sorts, say key-value
//! partitions and message-log partitions, each with its own state machine and,
//! if the host wants one, its own actor ([`crate::shard::custom`]).
//!
//! A kind is a name. The host registers each kind once on the
//! [`super::NodeBuilder`]; each [`super::GroupPlacement`] names its kind. The
//! node checks at start that the names fit together and says what to fix;
//! a mistake never surfaces later as a group without a state machine.
//! [`super::NodeBuilder::state_machine`] registers the kind named
//! [`GroupKind::DEFAULT_NAME`], which placements name unless told otherwise.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use cohort_actors::core::GroupSpec;
use cohort_messages::GroupId;

use super::StateMachineFactory;
use crate::shard::custom::CustomActorFactory;

/// The name of a group kind. Cheap to clone.
///
/// ```
/// use cohort_runtime::prelude::*;
/// let kv = GroupKind::new("kv");
/// assert_eq!(kv.as_str(), "kv");
/// assert_eq!(GroupKind::default().as_str(), GroupKind::DEFAULT_NAME);
/// assert_eq!(GroupKind::from("kv"), kv);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKind(Arc<str>);

impl GroupKind {
    /// The kind [`super::NodeBuilder::state_machine`] registers and placements default to.
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
/// use cohort_runtime::prelude::*;
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

/// What a kind is made of.
pub(crate) struct KindSpec {
    /// Makes the state machine of each group of the kind.
    pub state_machines: StateMachineFactory,
    /// Starts the custom actor of each group of the kind, if it has one.
    pub actor: Option<CustomActorFactory>,
}

/// The registered kinds of a node.
pub(crate) type Kinds = BTreeMap<GroupKind, KindSpec>;

/// A group this node hosts, with its kind.
#[derive(Clone, Debug)]
pub(crate) struct HostedGroup {
    /// The core's description of the group member.
    pub spec: GroupSpec,
    /// Its kind.
    pub kind: GroupKind,
}

/// Registered kinds and actors, as the builder collected them.
#[derive(Clone, Default)]
pub(crate) struct KindRegistrations {
    pub state_machines: Vec<(GroupKind, StateMachineFactory)>,
    pub actors: Vec<(GroupKind, CustomActorFactory)>,
}

impl KindRegistrations {
    /// Check the registrations and build the kinds.
    pub fn resolve(&self) -> Result<Kinds, GroupKindError> {
        let mut kinds = Kinds::new();
        for (kind, state_machines) in &self.state_machines {
            let spec = KindSpec { state_machines: Arc::clone(state_machines), actor: None };
            if kinds.insert(kind.clone(), spec).is_some() {
                return Err(GroupKindError::Duplicate { kind: kind.clone() });
            }
        }
        for (kind, actor) in &self.actors {
            let spec = kinds.get_mut(kind).ok_or_else(|| GroupKindError::ActorWithoutKind { kind: kind.clone() })?;
            if spec.actor.replace(Arc::clone(actor)).is_some() {
                return Err(GroupKindError::DuplicateActor { kind: kind.clone() });
            }
        }
        Ok(kinds)
    }
}

/// The error for a placement of `group` as an unregistered `kind`.
pub(crate) fn unknown(kinds: &Kinds, group: GroupId, kind: &GroupKind) -> GroupKindError {
    // The metadata group's internal kind is not the host's to place.
    let registered = kinds
        .keys()
        .filter(|kind| kind.as_str() != super::metadata::METADATA_KIND)
        .map(GroupKind::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let registered = if registered.is_empty() { "none".to_string() } else { registered };
    GroupKindError::Unknown { group, kind: kind.clone(), registered }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::Register;

    fn register() -> StateMachineFactory {
        Arc::new(|_| Box::new(Register::default()))
    }

    #[test]
    fn a_kind_registered_twice_is_refused() {
        let registrations = KindRegistrations {
            state_machines: vec![(GroupKind::new("kv"), register()), (GroupKind::new("kv"), register())],
            actors: Vec::new(),
        };
        assert_eq!(registrations.resolve().err(), Some(GroupKindError::Duplicate { kind: GroupKind::new("kv") }));
    }

    #[test]
    fn unknown_names_what_is_registered() {
        let registrations =
            KindRegistrations { state_machines: vec![(GroupKind::new("kv"), register())], actors: Vec::new() };
        let kinds = registrations.resolve().expect("valid");
        let error = unknown(&kinds, GroupId(3), &GroupKind::new("log"));
        assert!(error.to_string().contains("registered: \"kv\""), "{error}");
        assert!(error.to_string().contains("NodeBuilder::group_kind"), "{error}");
    }
}
