//! A shard: one actix Arbiter (thread) running a [`ShardActor`] that shells
//! the sans-IO core, its [`Outbox`] actors (one per peer node), and a storage
//! worker thread. [`traces`] holds the spans of the shard's message flows.

mod actor;
pub mod custom;
pub mod group;
mod observed;
mod outbox;
pub mod storage_worker;
pub mod traces;

pub(crate) use actor::GetCustomActor;
pub use actor::{
    ClientAnswer, GetHostedGroups, GetReport, HostCandidate, Inbound, ProposeSeal, REMOTE_WAITERS_MAX, ReplaceOutbox,
    SetCandidates, ShardActor, ShardReport, ShardSetup, Submit, SubscribeGroup, SwitchIncarnation, UnloadGroup,
};
pub use custom::{Applied, AppliedOp, CustomGroupActor, GroupReplica, Restored};
pub use group::{GroupEvent, GroupRole, RoleChanged};
pub use outbox::{Outbox, Outgoing, PanicForTest, ReplaceLink};
