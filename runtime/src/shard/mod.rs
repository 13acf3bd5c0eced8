//! A shard: one actix Arbiter (thread) running a [`ShardActor`] that shells
//! the sans-IO core, its [`Outbox`] actors (one per peer node), and a storage
//! worker thread.

mod actor;
mod outbox;
pub mod storage_worker;

pub use actor::{ClientAnswer, GetReport, Inbound, ReplaceOutbox, ShardActor, ShardReport, ShardSetup, Submit};
pub use outbox::{Outbox, Outgoing, PanicForTest, ReplaceLink};
