//! The seal: the last entry of a group incarnation's log.
//!
//! A group changes its voting members by sealing its log: the primary
//! prepares one entry from the reserved client [`ClientId::SEAL`] whose
//! operation is a [`Seal`], naming the next incarnation and its members.
//! Nothing is prepared after it in that incarnation; once it commits, every
//! replica that applied it holds the same state, and the next incarnation
//! starts from that state with the new members (see `docs/metadata.md`).
//! The entry travels in Prepares and sits in write-ahead logs, so it is
//! validated like any input from the network or a disk.

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::error::{BodyError, Invalid, invalid};
use crate::ids::{ClientId, Incarnation, NodeId};
use crate::limits::GROUP_MEMBERS_MAX;

impl ClientId {
    /// The reserved client of seal entries; no request may use it.
    pub const SEAL: ClientId = ClientId(0);
}

/// What a seal entry says: the incarnation that follows and its members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seal {
    /// The next incarnation (one more than the sealed one).
    pub incarnation: Incarnation,
    /// Its voting members in member-index order.
    pub members: Vec<NodeId>,
    /// Its replication quorum Qr.
    pub replication_quorum: u8,
}

impl Seal {
    /// 1 to [`GROUP_MEMBERS_MAX`] distinct nonzero members and a replication
    /// quorum in `1..=members`.
    pub fn validate(&self) -> Result<(), Invalid> {
        let mut seen = std::collections::BTreeSet::new();
        if self.members.is_empty() || self.members.len() > GROUP_MEMBERS_MAX {
            return Err(invalid(Command::Prepare, "seal: 1 to 64 members"));
        }
        if self.members.iter().any(|member| member.0 == 0 || !seen.insert(*member)) {
            return Err(invalid(Command::Prepare, "seal: node 0 or a member listed twice"));
        }
        if self.replication_quorum == 0 || usize::from(self.replication_quorum) > self.members.len() {
            return Err(invalid(Command::Prepare, "seal: replication quorum outside 1..=members"));
        }
        if self.incarnation.0 < 2 {
            return Err(invalid(Command::Prepare, "seal: the next incarnation is at least 2"));
        }
        Ok(())
    }

    /// Encode as a log entry's operation.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        crate::codec::encode_into(self, &mut out);
        out.freeze()
    }

    /// Decode and validate a log entry's operation.
    pub fn decode(bytes: &[u8]) -> Result<Seal, BodyError> {
        let seal: Seal = crate::codec::decode(Command::Prepare, bytes)?;
        seal.validate()?;
        Ok(seal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seal() -> Seal {
        Seal { incarnation: Incarnation(2), members: vec![NodeId(3), NodeId(1)], replication_quorum: 2 }
    }

    #[test]
    fn seal_round_trips() {
        assert_eq!(Seal::decode(&seal().encode()), Ok(seal()));
    }

    #[test]
    fn invalid_seals_are_refused() {
        let cases = [
            Seal { members: Vec::new(), ..seal() },
            Seal { members: vec![NodeId(1), NodeId(1)], ..seal() },
            Seal { members: vec![NodeId(0)], replication_quorum: 1, ..seal() },
            Seal { replication_quorum: 3, ..seal() },
            Seal { replication_quorum: 0, ..seal() },
            Seal { incarnation: Incarnation(1), ..seal() },
        ];
        for bad in cases {
            assert!(Seal::decode(&bad.encode()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_seal_entry_must_carry_a_valid_seal_and_clients_may_not_use_its_id() {
        use crate::body::{LogEntry, Prepare, Request, RequestKind};
        use crate::ids::{GroupId, MemberIndex, Op, RequestNumber, View};
        let entry = |operation: Bytes| LogEntry {
            op: Op(5),
            view: View(1),
            client: ClientId::SEAL,
            request: RequestNumber(0),
            operation,
        };
        let prepare = |entry| Prepare {
            group: GroupId(1),
            incarnation: Incarnation(1),
            view: View(1),
            commit: Op(4),
            replica: MemberIndex(0),
            entry,
        };
        assert!(prepare(entry(seal().encode())).validate().is_ok());
        assert!(prepare(entry(Bytes::from_static(b"not a seal"))).validate().is_err());
        let request = Request {
            client: ClientId::SEAL,
            request: RequestNumber(1),
            group: GroupId(1),
            kind: RequestKind::Write,
            operation: Bytes::new(),
        };
        assert!(request.validate().is_err());
    }

    proptest! {
        #[test]
        fn seal_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Seal::decode(&bytes);
        }
    }
}
