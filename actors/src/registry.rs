//! The group kinds a node registered: for each, the factory of its groups'
//! state machines and, if it has one, of their custom actors. The node
//! checks at start that kinds and placements fit together.

use std::collections::BTreeMap;
use std::sync::Arc;

use cohort_core::StateMachine;
use cohort_messages::GroupId;

use crate::custom::CustomActorFactory;
use crate::kind::{GroupKind, GroupKindError};

/// Makes the state machine of a group; called on the shard's thread.
pub(crate) type StateMachineFactory = Arc<dyn Fn(GroupId) -> Box<dyn StateMachine> + Send + Sync>;

/// What a kind is made of.
pub struct KindSpec {
    /// Makes the state machine of each group of the kind.
    pub state_machines: StateMachineFactory,
    /// Starts the custom actor of each group of the kind, if it has one.
    pub actor: Option<CustomActorFactory>,
}

/// The registered kinds of a node.
pub type Kinds = BTreeMap<GroupKind, KindSpec>;

/// Registered kinds and actors, as the builder collected them.
#[derive(Clone, Default)]
pub struct KindRegistrations {
    /// Each kind's state machine factory, in registration order.
    pub state_machines: Vec<(GroupKind, StateMachineFactory)>,
    /// Custom actor factories by kind, in registration order.
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
pub fn unknown(kinds: &Kinds, group: GroupId, kind: &GroupKind) -> GroupKindError {
    // The metadata group's internal kind is not the host's to place.
    let registered = kinds
        .keys()
        .filter(|kind| kind.as_str() != cohort_core::metadata::METADATA_KIND)
        .map(GroupKind::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let registered = if registered.is_empty() { "none".to_string() } else { registered };
    GroupKindError::Unknown { group, kind: kind.clone(), registered }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use cohort_messages::Op;

    use super::*;

    struct Empty;

    impl StateMachine for Empty {
        fn apply(&mut self, _op: Op, _operation: &[u8]) -> Bytes {
            Bytes::new()
        }
        fn read(&self, _query: &[u8]) -> Bytes {
            Bytes::new()
        }
        fn snapshot(&self) -> Bytes {
            Bytes::new()
        }
        fn restore(&mut self, _snapshot: &[u8]) -> Result<(), String> {
            Ok(())
        }
    }

    fn register() -> StateMachineFactory {
        Arc::new(|_| Box::new(Empty))
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
