//! M1: every node applies the same metadata epochs in the same order.
//!
//! The agreement checker already fixes each metadata op's command (the
//! metadata group reports its applies like any group). This one looks at
//! the result: the whole applied state after epoch e must be the same on
//! every node that reaches e, whether it got there by applying commands or by
//! restoring a snapshot, and a node's epoch never goes back while its
//! process lives. Equal states at equal epochs is what lets every node act
//! on "the metadata at epoch e" as one fact.

use std::collections::HashMap;

use cohort_core::metadata::Metadata;
use cohort_messages::Epoch;
use cohort_messages::metadata::encode_value;

use crate::kv::digest;

/// The state digest per epoch, and each node's last epoch.
#[derive(Debug, Default)]
pub struct MetadataEpochs {
    states: HashMap<Epoch, (u64, usize)>,
    last: HashMap<usize, Epoch>,
}

impl MetadataEpochs {
    /// `node`'s metadata replica holds `metadata` now; `Ok(true)` if its
    /// epoch moved since the last observation.
    pub fn observed(&mut self, node: usize, metadata: &Metadata) -> Result<bool, String> {
        let last = self.last.entry(node).or_default();
        if metadata.epoch < *last {
            return Err(format!("M1 broken: node {node}'s metadata went back from {last} to {}", metadata.epoch));
        }
        if metadata.epoch == *last {
            return Ok(false);
        }
        *last = metadata.epoch;
        let state = digest(&encode_value(metadata));
        match self.states.get(&metadata.epoch) {
            Some((expected, first)) if *expected != state => Err(format!(
                "M1 broken: node {node}'s metadata at {} differs from node {first}'s at the same epoch",
                metadata.epoch
            )),
            Some(_) => Ok(true),
            None => {
                self.states.insert(metadata.epoch, (state, node));
                Ok(true)
            }
        }
    }

    /// `node` crashed: its next process starts from its storage again.
    pub fn crashed(&mut self, node: usize) {
        self.last.remove(&node);
    }
}
