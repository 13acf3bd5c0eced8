//! Exactly-once: no client write is applied at two ops of a group.
//!
//! Every value the simulated clients write is unique, so a write's encoded
//! operation names it; the simulator registers each write as it is sent
//! ([`ExactlyOnce::sent`]) and every apply of a group is reported with the
//! operation's digest. The first op a write is applied at is its op; the
//! same write at any other op was applied twice, which the client table
//! exists to prevent: a retry (same client, same request number) is
//! answered from the table, and a client the table forgot (evicted, when a
//! group has heard from more than `clients_max` clients) may start again
//! only at request 1.
//!
//! The acknowledged-write checker sees a double apply only when the reply
//! names the second op, and linearizability only when a read happens to
//! fall between the two; this checker sees every one, at the apply.

use std::collections::{HashMap, HashSet};

use cohort_messages::{ClientId, GroupId, Op, RequestNumber};

/// Writes sent (with the client and number they were last sent as), the op
/// each was first applied at, and the writes reported applied twice.
#[derive(Debug, Default)]
pub struct ExactlyOnce {
    writes: HashMap<(GroupId, u64), (ClientId, RequestNumber)>,
    applied: HashMap<(GroupId, u64), Op>,
    reported: HashSet<(GroupId, u64)>,
}

impl ExactlyOnce {
    /// `client` sent (or resent) as `request` the write whose operation has `digest`.
    pub fn sent(&mut self, group: GroupId, digest: u64, client: ClientId, request: RequestNumber) {
        self.writes.insert((group, digest), (client, request));
    }

    /// Some member applied `op` of `group`, an operation with `digest`.
    pub fn applied(&mut self, group: GroupId, op: Op, digest: u64) -> Result<(), String> {
        let Some((client, request)) = self.writes.get(&(group, digest)) else { return Ok(()) };
        let first = *self.applied.entry((group, digest)).or_insert(op);
        if first == op || !self.reported.insert((group, digest)) {
            return Ok(());
        }
        Err(format!(
            "exactly-once broken: {group}: the write {client} sent as {request}, applied at {first}, was applied \
             again at {op}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h5_a_write_applied_twice_is_a_violation_and_an_apply_repeated_at_its_op_is_not() {
        let mut check = ExactlyOnce::default();
        check.sent(GroupId(0), 7, ClientId(5), RequestNumber(2));
        assert!(check.applied(GroupId(0), Op(3), 7).is_ok());
        // Another member, or a restart replaying its log, applies it again at op 3.
        assert!(check.applied(GroupId(0), Op(3), 7).is_ok());
        // Not a registered write (a read, a metadata command): never judged.
        assert!(check.applied(GroupId(0), Op(4), 8).is_ok());
        assert!(check.applied(GroupId(1), Op(5), 7).is_ok(), "another group's op");
        let twice = check.applied(GroupId(0), Op(9), 7).expect_err("applied twice");
        assert!(twice.contains("applied at op:3, was applied again at op:9"), "{twice}");
        assert!(check.applied(GroupId(0), Op(9), 7).is_ok(), "reported once");
    }
}
