//! S2 as a state property: an ownership record only ever names a node that
//! holds a live session, the very session the report was made under. An
//! expiry or a newer session must take the node's records away with the old
//! session, or clients would keep being sent to a node the cluster has
//! written off.

use cohort_core::metadata::Metadata;

/// Check one node's applied metadata.
pub fn check(node: usize, metadata: &Metadata) -> Vec<String> {
    metadata
        .groups
        .iter()
        .filter_map(|(group, record)| {
            let owner = record.owner?;
            let live = metadata.nodes.get(&owner.node).and_then(|record| record.session);
            (live != Some(owner.session)).then(|| {
                format!(
                    "S2 broken: node {node}'s metadata ({}) keeps {} as owner of {group} under {}, but its live \
                     session is {live:?}",
                    metadata.epoch, owner.node, owner.session
                )
            })
        })
        .collect()
}
