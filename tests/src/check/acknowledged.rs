//! No acknowledged write lost: when a client is told its write committed at
//! op n, the agreed sequence must hold exactly that write at n. (The reply is
//! sent after the primary applied it, so the op is always known by then.)

use cohort_messages::{GroupId, Op};

use super::agreement::Agreement;

/// Check one acknowledgement against the agreed sequence.
pub fn check(agreement: &Agreement, group: GroupId, op: Op, digest: u64) -> Result<(), String> {
    match agreement.digest(group, op) {
        Some(existing) if existing == digest => Ok(()),
        Some(_) => Err(format!("acknowledged write lost: {group} {op} holds another write")),
        None => Err(format!("acknowledged write at {group} {op} was never applied anywhere")),
    }
}
