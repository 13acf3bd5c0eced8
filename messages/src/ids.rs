//! Identifier newtypes.
//!
//! Every id that crosses the wire has its own type so that a group id can
//! never be passed where a node id is expected. The wire widths are fixed
//! here and nowhere else: changing one is a wire revision bump.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(
            Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        pub struct $name(pub $inner);

        impl $name {
            /// The raw wire value.
            #[inline]
            pub const fn get(self) -> $inner {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl From<$inner> for $name {
            #[inline]
            fn from(value: $inner) -> Self {
                Self(value)
            }
        }
    };
}

id_type!(
    /// Identifies one cluster. Frames from another cluster are refused (R18).
    ClusterId(u128),
    "cluster:"
);
id_type!(
    /// Identifies one node (process) in the cluster.
    NodeId(u64),
    "node:"
);
id_type!(
    /// Identifies one replicated group: the metadata group or a partition group.
    GroupId(u64),
    "group:"
);
id_type!(
    /// Identifies one multi-step operation in the metadata (M2–M5).
    OperationId(u64),
    "operation:"
);

impl GroupId {
    /// The metadata group's reserved id; partition groups use any other.
    pub const METADATA: GroupId = GroupId(u64::MAX);
}

id_type!(
    /// A view number of one group. The primary of a view is fixed by the view.
    View(u32),
    "view:"
);
id_type!(
    /// An operation number in one group's log. Op 0 is the empty log.
    Op(u64),
    "op:"
);
id_type!(
    /// Bumped each time a group is created or re-created, so that frames for an
    /// older group with the same id are refused.
    Incarnation(u64),
    "incarnation:"
);
id_type!(
    /// The position of a node inside one group's member list. The same node has
    /// a different member index in each group.
    MemberIndex(u8),
    "member:"
);
id_type!(
    /// A per-group monotonic timestamp of Commit heartbeats (R14, R22). It orders
    /// Commits within one view; it is not wall-clock time.
    Timestamp(u64),
    "ts:"
);
id_type!(
    /// Identifies one client session (a host application handle or a client
    /// connection). Exactly-once is per (client, request number).
    ClientId(u128),
    "client:"
);
id_type!(
    /// A client's request number; a retry reuses it.
    RequestNumber(u64),
    "request:"
);
id_type!(
    /// A node's session with the metadata group.
    SessionId(u64),
    "session:"
);
id_type!(
    /// A metadata epoch: the number of a committed metadata event.
    Epoch(u64),
    "epoch:"
);

impl View {
    /// The next view.
    ///
    /// # Panics
    /// On overflow of u32: four billion view changes in one group is a bug.
    #[inline]
    pub fn next(self) -> View {
        View(self.0.checked_add(1).expect("view number overflow"))
    }
}

impl Op {
    /// The next op number.
    ///
    /// # Panics
    /// On overflow of u64, which cannot happen in practice.
    #[inline]
    pub fn next(self) -> Op {
        Op(self.0.checked_add(1).expect("op number overflow"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_display_with_their_kind() {
        assert_eq!(GroupId(7).to_string(), "group:7");
        assert_eq!(View(3).next(), View(4));
        assert_eq!(Op(0).next(), Op(1));
        assert!(View(1) < View(2));
    }
}
