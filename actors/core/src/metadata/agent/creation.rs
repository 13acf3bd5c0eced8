//! The agent's creation job (C3, Z2): create in the metadata the groups
//! this node is configured with that it does not know yet, once all their
//! members registered, a batch of them per command. Hosting the replicas of
//! a group created at run time is the hosting job's ([`super::hosting`]).
//!
//! Every node creates its own configured groups; a group another node
//! created first is refused as existing, harmlessly. So a cluster never
//! waits for one particular node to come up before its groups exist.

use cohort_messages::metadata::{GroupCreation, METADATA_BATCH_ENTRIES_MAX, MetadataCommand};

use super::super::Metadata;
use super::{AgentConfig, BootstrapGroup};

/// The bootstrap groups whose members all registered and that the metadata
/// does not know yet, up to a batch of them in one command (Z2: a node
/// configured with 100,000 groups creates them in a few hundred epochs, not
/// 100,000). The groups whose first member is this node go first: nodes
/// configured alike then create different batches at once rather than each
/// the same one, and any node still creates the groups of a first member
/// that is down.
pub(super) fn bootstrap_command(config: &AgentConfig, metadata: &Metadata) -> Option<MetadataCommand> {
    let node = config.node;
    let missing = |bootstrap: &&BootstrapGroup| {
        !metadata.groups.contains_key(&bootstrap.group)
            && bootstrap.members.iter().all(|m| metadata.nodes.contains_key(m))
    };
    let first_here = |bootstrap: &&BootstrapGroup| bootstrap.members.first() == Some(&node);
    let bootstrap = &config.bootstrap_groups;
    let groups: Vec<GroupCreation> = bootstrap
        .iter()
        .filter(first_here)
        .filter(missing)
        .chain(bootstrap.iter().filter(|b| !first_here(b)).filter(missing))
        .take(METADATA_BATCH_ENTRIES_MAX)
        .map(|BootstrapGroup { group, kind, members, replication }| GroupCreation {
            group: *group,
            kind: kind.clone(),
            members: members.clone(),
            replication: *replication,
        })
        .collect();
    assert!(groups.len() <= METADATA_BATCH_ENTRIES_MAX, "a batch fits one command");
    (!groups.is_empty()).then_some(MetadataCommand::CreateGroups { groups })
}

#[cfg(test)]
mod tests {
    use cohort_messages::{GroupId, NodeId};

    use super::super::fixture;
    use super::*;

    fn configured(group: u64, members: &[u64]) -> BootstrapGroup {
        BootstrapGroup {
            group: GroupId(group),
            kind: "kv".into(),
            members: members.iter().copied().map(NodeId).collect(),
            replication: Default::default(),
        }
    }

    fn creation(bootstrap: &BootstrapGroup) -> GroupCreation {
        GroupCreation {
            group: bootstrap.group,
            kind: bootstrap.kind.clone(),
            members: bootstrap.members.clone(),
            replication: bootstrap.replication,
        }
    }

    #[test]
    fn c3_the_groups_whose_members_registered_are_created_this_nodes_own_first() {
        let mut config = fixture::config();
        let (a, b, c, d, e) = (
            configured(10, &[2, 1]),
            configured(11, &[1, 2]),
            configured(12, &[1, 3]),
            configured(13, &[2]),
            configured(14, &[1]),
        );
        config.bootstrap_groups = vec![a.clone(), b.clone(), c, d.clone(), e];
        // Node 3 never registered (group 12 waits); group 14 exists.
        let metadata = fixture::metadata(&[1, 2], &[(14, &[1])]);
        let groups = vec![creation(&b), creation(&a), creation(&d)];
        assert_eq!(bootstrap_command(&config, &metadata), Some(MetadataCommand::CreateGroups { groups }));
    }

    #[test]
    fn z2_creations_leave_in_batches_of_the_command_limit() {
        let mut config = fixture::config();
        config.bootstrap_groups = (0..300).map(|group| configured(group, &[1])).collect();
        let mut metadata = fixture::metadata(&[1], &[]);
        let first: Vec<GroupCreation> = config.bootstrap_groups[..256].iter().map(creation).collect();
        let command = MetadataCommand::CreateGroups { groups: first };
        assert_eq!(bootstrap_command(&config, &metadata), Some(command.clone()));
        fixture::apply(&mut metadata, command);
        let rest: Vec<GroupCreation> = config.bootstrap_groups[256..].iter().map(creation).collect();
        let command = MetadataCommand::CreateGroups { groups: rest };
        assert_eq!(bootstrap_command(&config, &metadata), Some(command.clone()));
        fixture::apply(&mut metadata, command);
        assert_eq!(bootstrap_command(&config, &metadata), None);
    }
}
