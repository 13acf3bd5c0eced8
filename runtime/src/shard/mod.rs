//! A shard: one actix Arbiter (thread) running a [`ShardActor`] that shells
//! the sans-IO core, its [`Outbox`] actors (one per peer node), and a storage
//! worker thread. [`traces`] holds the spans of the shard's message flows.

mod actor;
pub mod group;
mod observed;
mod outbox;
pub mod storage_worker;
pub mod traces;

pub use actor::{
    ClientAnswer, GetReport, Inbound, ReplaceOutbox, ShardActor, ShardReport, ShardSetup, Submit, SubscribeGroup,
};
pub use group::{GroupEvent, GroupRole};
pub use outbox::{Outbox, Outgoing, PanicForTest, ReplaceLink};
