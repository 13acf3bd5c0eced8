//! Custom group actors: a host's own actix actor per group replica.
//!
//! A host registers a group kind with a state machine (`NodeBuilder::group_kind`)
//! and, for that kind, an actor (`NodeBuilder::group_actor`). The state machine stays the
//! replicated truth (cohort applies ops to it, snapshots it and restores it);
//! the actor follows it. It is for what a state machine cannot do: keep an
//! index in its own shape, serve reads from it, talk to the rest of the host,
//! batch domain commands before submitting them, act when it becomes primary.
//!
//! The group's own [`crate::group::GroupActor`] feeds its custom actor with
//! the core's `RoleChanged`, `Restored` and `Applied` effects of the group,
//! as the three messages of [`CustomGroupActor`]. Applied ops come in batches (one per apply step of
//! the core, usually one per group per shard turn), never one message per op.
//!
//! # What cohort guarantees to the actor
//!
//! For one actor instance (one group, one node, one life of its shard):
//!
//! - **Order.** Messages arrive in the order the core produced them. The first
//!   is the replica's current role. If the replica recovered from a snapshot,
//!   a [`Restored`] follows, then [`Applied`] for the ops replayed from the
//!   write-ahead log: a new instance sees the node's whole applied state,
//!   either as a snapshot or op by op.
//! - **Only committed ops, each exactly once.** [`Applied`] lists the ops the
//!   state machine applied, in op order, with the same operation bytes and the
//!   same result, each once. They are committed (a replication quorum holds
//!   them durably) and are never undone (P3), whatever the role. Ops whose
//!   request had already been applied (a retry that reached the log twice) are
//!   not applied and not listed, so op numbers may skip; `through` still moves
//!   past them. The next `Applied` covers the ops after `through`.
//! - **Restores.** [`Restored`] means: forget what you derived, the state
//!   machine now holds this snapshot, taken at `op`. It comes after recovery
//!   from a snapshot, after a state transfer (this replica lagged behind the
//!   primary's log), or, with `resync`, after this actor's mailbox overflowed.
//! - **No gaps, bounded memory.** The actor's mailbox holds
//!   [`GROUP_ACTOR_MAILBOX_MAX`] messages (set before `started`; the actor may
//!   change it there). `Applied` and `Restored` are sent with `try_send`. When
//!   the mailbox is full the message is dropped and counted
//!   (`cohort_frames_dropped_total{mailbox="custom",reason="mailbox_full"}`), cohort stops sending
//!   `Applied` to that actor, and on each later tick tries to send
//!   a `Restored { resync: true }` with a fresh snapshot of the state machine
//!   at its applied point. Once that is delivered, `Applied` resumes after it.
//!   An actor that keeps up never sees a resync; one that falls behind sees a
//!   jump, never a gap.
//! - **Roles, typed, with the view.** [`RoleChanged`] carries
//!   [`GroupRole`]: `Primary(view)`, `Backup(view)`, `ViewChange(view)`
//!   (stepped down, electing) or `Learner(view)` (P4: following, no vote). Role changes are rare and never dropped.
//!
//! # What cohort does not guarantee
//!
//! - **Freshness.** The actor sees what this node applied. A backup's actor
//!   lags its primary; even a primary's actor may miss writes that a newer
//!   primary committed after this node was cut off. A `Primary(view)` message
//!   says the replica became primary of `view`; by the time it is handled, a
//!   later view may exist elsewhere. So a read answered from the actor's own
//!   index is possibly stale: it reflects a prefix of the committed log that
//!   only grows (monotonic), not the latest write. For a linearizable read,
//!   ask cohort first (`Client::read`, V7: served by the
//!   primary only within its quorum window); its `op` is the applied point at
//!   that moment. Answer from the index once the actor's `through` has reached
//!   it (a read index).
//! - **Fencing of the host's own side effects.** cohort fences replication by
//!   view: a deposed primary cannot commit. What the actor does outside
//!   cohort (calls to other systems while it believes it is primary) is not
//!   fenced; carry the view from [`RoleChanged`] in such calls so that their
//!   receiver can refuse an older view.
//! - **Durability of the actor's state.** Nothing the actor keeps is saved by
//!   cohort. After a restart a new instance is rebuilt from `Restored` and
//!   `Applied`.
//! - **Restarts of the actor.** A custom actor that stops or panics is not
//!   restarted until its shard is (the supervisor rebuilds a dead shard, with
//!   new instances of every group actor). Messages to it are counted as
//!   `mailbox_closed` drops. An old instance whose address the host kept
//!   hears nothing after its shard restarted; ask
//!   `NodeHandle::group_actor` again for the new one.
//! - **A thread of its own.** The actor runs on its shard's thread, beside
//!   the replicas of every group of the shard. Keep handlers short; move
//!   slow work to another arbiter.

use std::any::Any;
use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
pub use cohort_core::effect::AppliedOp;
use cohort_messages::{GroupId, NodeId, Op};

use crate::drops::Drops;
use crate::group::{GroupRole, RoleChanged};
use crate::kind::GroupKind;
use crate::metrics::{DropReason, Mailbox};

/// Messages a custom actor's mailbox holds before cohort drops and resyncs.
pub const GROUP_ACTOR_MAILBOX_MAX: usize = 256;

/// Ops of one group applied on this node, in op order (see the module docs).
///
/// ```
/// # use cohort_actors::Applied;
/// fn bytes_applied(applied: &Applied) -> usize {
///     applied.ops.iter().map(|op| op.operation.len()).sum()
/// }
/// # let _ = bytes_applied;
/// ```
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct Applied {
    /// The group.
    pub group: GroupId,
    /// The ops the state machine applied, in op order, each once.
    pub ops: Vec<AppliedOp>,
    /// The applied point after these ops; the next `Applied` starts after it.
    pub through: Op,
}

/// The group's state machine holds a snapshot taken at `op`: replace what the
/// actor derived from earlier ops (see the module docs).
///
/// ```
/// # use cohort_actors::Restored;
/// fn describe(restored: &Restored) -> String {
///     let why = if restored.resync { "mailbox overflowed" } else { "recovery or state transfer" };
///     format!("{} restored at {} ({why})", restored.group, restored.op)
/// }
/// # let _ = describe;
/// ```
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct Restored {
    /// The group.
    pub group: GroupId,
    /// The applied point of the snapshot.
    pub op: Op,
    /// The state machine's snapshot (what its `snapshot` returned, what its
    /// `restore` takes).
    pub state: Bytes,
    /// True when cohort resent the state because this actor fell behind.
    pub resync: bool,
}

/// What a host's actor must handle to follow a group: [`Applied`],
/// [`Restored`] and [`RoleChanged`]. Implemented for every actor that does.
///
/// ```
/// use actix::prelude::*;
/// use cohort_actors::{Applied, CustomGroupActor, Restored};
/// use cohort_actors::RoleChanged;
/// use cohort_messages::Op;
///
/// /// Counts the ops applied on this node.
/// #[derive(Default)]
/// struct OpCounter { through: Op, ops: u64 }
///
/// impl Actor for OpCounter {
///     type Context = Context<Self>;
/// }
/// impl Handler<Applied> for OpCounter {
///     type Result = ();
///     fn handle(&mut self, applied: Applied, _: &mut Context<Self>) {
///         self.ops += applied.ops.len() as u64;
///         self.through = applied.through;
///     }
/// }
/// impl Handler<Restored> for OpCounter {
///     type Result = ();
///     fn handle(&mut self, restored: Restored, _: &mut Context<Self>) {
///         // The count before the snapshot is not known: start over from it.
///         self.ops = 0;
///         self.through = restored.op;
///     }
/// }
/// impl Handler<RoleChanged> for OpCounter {
///     type Result = ();
///     fn handle(&mut self, _: RoleChanged, _: &mut Context<Self>) {}
/// }
///
/// fn assert_custom<A: CustomGroupActor>() {}
/// assert_custom::<OpCounter>();
/// ```
pub trait CustomGroupActor:
    Actor<Context = Context<Self>> + Handler<Applied> + Handler<Restored> + Handler<RoleChanged>
{
}

impl<A> CustomGroupActor for A where
    A: Actor<Context = Context<A>> + Handler<Applied> + Handler<Restored> + Handler<RoleChanged>
{
}

/// Which group replica a custom actor is made for.
///
/// ```
/// use cohort_actors::GroupReplica;
/// use cohort_actors::GroupKind;
/// use cohort_messages::{GroupId, NodeId};
/// let replica = GroupReplica { node: NodeId(2), group: GroupId(9), kind: GroupKind::new("kv") };
/// assert_eq!(format!("{} {}", replica.node, replica.group), "node:2 group:9");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupReplica {
    /// The node it runs on.
    pub node: NodeId,
    /// The group.
    pub group: GroupId,
    /// The group's kind.
    pub kind: GroupKind,
}

/// Starts a kind's custom actor for a group, on the calling (shard) thread.
pub(crate) type CustomActorFactory = Arc<dyn Fn(&GroupReplica) -> CustomActorLink + Send + Sync>;

/// A factory that starts `A` with the bounded mailbox cohort relies on.
pub fn factory<A, F>(make: F) -> CustomActorFactory
where
    A: CustomGroupActor,
    F: Fn(&GroupReplica) -> A + Send + Sync + 'static,
{
    Arc::new(move |replica| {
        let addr = A::create(|ctx| {
            ctx.set_mailbox_capacity(GROUP_ACTOR_MAILBOX_MAX);
            make(replica)
        });
        CustomActorLink::new(replica.group, addr)
    })
}

/// The group actor's side of one custom actor: its recipients, the last
/// role it was told, and whether it needs a resync.
pub struct CustomActorLink {
    group: GroupId,
    applied: Recipient<Applied>,
    restored: Recipient<Restored>,
    role: Recipient<RoleChanged>,
    /// The `Addr<A>`, for the host's lookup (`NodeHandle::group_actor`).
    addr: Arc<dyn Any + Send + Sync>,
    told_role: Option<GroupRole>,
    resync: bool,
    closed: bool,
}

impl CustomActorLink {
    fn new<A: CustomGroupActor>(group: GroupId, addr: Addr<A>) -> CustomActorLink {
        CustomActorLink {
            group,
            applied: addr.clone().recipient(),
            restored: addr.clone().recipient(),
            role: addr.clone().recipient(),
            addr: Arc::new(addr),
            told_role: None,
            resync: false,
            closed: false,
        }
    }

    /// The actor's address, type-erased.
    pub fn addr(&self) -> Arc<dyn Any + Send + Sync> {
        Arc::clone(&self.addr)
    }

    /// Tell the actor its role, once per change.
    pub fn role(&mut self, role: GroupRole) {
        if self.told_role != Some(role) && !self.closed {
            self.told_role = Some(role);
            // Rare and small: never dropped (`do_send` ignores the bound).
            self.role.do_send(RoleChanged { group: self.group, role });
        }
    }

    /// Hand over applied ops, unless a resync is pending (it will cover them).
    pub fn applied(&mut self, ops: Vec<AppliedOp>, through: Op, drops: &Drops) {
        if self.resync || self.closed {
            return;
        }
        let result = self.applied.try_send(Applied { group: self.group, ops, through });
        self.sent(result, drops);
    }

    /// Hand over a restore from the core, unless a resync is pending.
    pub fn restored(&mut self, op: Op, state: Bytes, drops: &Drops) {
        if self.resync || self.closed {
            return;
        }
        let result = self.restored.try_send(Restored { group: self.group, op, state, resync: false });
        self.sent(result, drops);
    }

    /// True while the actor must be resent the state.
    pub fn needs_resync(&self) -> bool {
        self.resync && !self.closed
    }

    /// Send the replica's state at its applied point `op`; [`Self::needs_resync`]
    /// stays true until it is delivered.
    pub fn resync(&mut self, op: Op, state: Bytes, drops: &Drops) {
        if !self.needs_resync() {
            return;
        }
        match self.restored.try_send(Restored { group: self.group, op, state, resync: true }) {
            Ok(()) => self.resync = false,
            Err(SendError::Full(_)) => {}
            Err(SendError::Closed(_)) => {
                self.closed = true;
                drops.add(Mailbox::Custom, DropReason::MailboxClosed, 1);
            }
        }
    }

    /// Count a failed send; a full mailbox asks for a resync.
    fn sent<M>(&mut self, result: Result<(), SendError<M>>, drops: &Drops) {
        match result {
            Ok(()) => {}
            Err(SendError::Full(_)) => {
                drops.add(Mailbox::Custom, DropReason::MailboxFull, 1);
                self.resync = true;
            }
            Err(SendError::Closed(_)) => {
                drops.add(Mailbox::Custom, DropReason::MailboxClosed, 1);
                self.closed = true;
            }
        }
    }
}
