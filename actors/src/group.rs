//! One actor per group replica: the replica's face to the host.
//!
//! Why the protocol state is not in here: a shard hosts thousands of
//! groups, and the shard actor drives all of their replicas from one core
//! (`cohort_core::Shard`) so that one tick walks only the groups that are
//! due, one flush makes every group's log durable with one sync, and one
//! batch per peer carries every group's heartbeats (R11, R27). A mailbox hop
//! per Prepare and PrepareOk, and a flush per group, would cost more than
//! the whole protocol. See docs/architecture.md.
//!
//! What the group actor is for: everything one replica owes the host. It
//! holds the typed role ([`GroupRole`]: primary, backup, learner or view
//! change, with the view), the callers in this process waiting for an
//! answer from the group, the subscribers to its role changes and commit
//! points ([`GroupEvent`]), and the link to the host's custom actor of the
//! group's kind ([`crate::custom`]). The shard hands it, once per turn, what
//! the turn produced for them ([`GroupTurn`]), and nothing at all when
//! nobody listens: a host that never subscribes and has no custom actor
//! pays no message per commit.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
use cohort_core::Role;
use cohort_core::effect::AppliedOp;
use cohort_messages::{ClientId, GroupId, Op, RequestNumber, View};
use tokio::sync::{mpsc, oneshot};

use crate::custom::CustomActorLink;
use crate::drops::Drops;
use crate::shard::ClientAnswer;

/// A replica's role, typed, with the view it holds in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GroupRole {
    /// Orders and commits operations in `view`.
    Primary(View),
    /// Follows the primary of `view`.
    Backup(View),
    /// Electing the primary of `view`.
    ViewChange(View),
    /// A learner (P4) following the primary of `view`: it applies committed
    /// ops but votes in no quorum.
    Learner(View),
}

impl GroupRole {
    /// The view the role holds in.
    ///
    /// ```
    /// use cohort_actors::group::GroupRole;
    /// use cohort_messages::View;
    /// assert_eq!(GroupRole::Backup(View(3)).view(), View(3));
    /// assert!(GroupRole::Primary(View(4)).is_primary());
    /// ```
    pub fn view(self) -> View {
        match self {
            GroupRole::Primary(view)
            | GroupRole::Backup(view)
            | GroupRole::ViewChange(view)
            | GroupRole::Learner(view) => view,
        }
    }

    /// True for [`GroupRole::Primary`].
    pub fn is_primary(self) -> bool {
        matches!(self, GroupRole::Primary(_))
    }

    /// The role the core reports, typed.
    pub fn from_core(role: Role, view: View) -> GroupRole {
        match role {
            Role::Primary => GroupRole::Primary(view),
            Role::Backup => GroupRole::Backup(view),
            Role::ViewChange => GroupRole::ViewChange(view),
            Role::Learner => GroupRole::Learner(view),
        }
    }
}

/// What a subscriber hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupEvent {
    /// The role changed (became primary, became backup, stepped down into a view change).
    Role {
        /// The group.
        group: GroupId,
        /// The new role.
        role: GroupRole,
    },
    /// Ops up to `op` are committed and applied here.
    Committed {
        /// The group.
        group: GroupId,
        /// The new commit point.
        op: Op,
    },
}

/// Subscribers get at most this many unread events; a slower one misses
/// events (and hears the current role again when it subscribes anew).
pub const SUBSCRIBER_EVENTS_MAX: usize = 1024;

/// The replica's role changed: became primary or backup of a view, or
/// stepped down into a view change. The group actor tells it to a custom
/// group actor (see [`crate::custom`]).
///
/// ```
/// use cohort_actors::group::{GroupRole, RoleChanged};
/// use cohort_messages::{GroupId, View};
/// let changed = RoleChanged { group: GroupId(7), role: GroupRole::Primary(View(2)) };
/// assert!(changed.role.is_primary());
/// ```
#[derive(Message, Clone, Copy, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct RoleChanged {
    /// The group.
    pub group: GroupId,
    /// The new role, with its view.
    pub role: GroupRole,
}

/// One thing a shard turn produced for the group's listeners, in the order
/// the core produced it.
#[derive(Debug)]
pub enum GroupNote {
    /// The answer to a request of a caller in this process.
    Answer {
        /// The client.
        client: ClientId,
        /// Its request.
        request: RequestNumber,
        /// The answer.
        answer: ClientAnswer,
    },
    /// The role changed.
    Role(GroupRole),
    /// Ops up to here are committed and applied.
    Committed(Op),
    /// Ops applied this turn (groups whose kind has a custom actor).
    Applied {
        /// In op order.
        ops: Vec<AppliedOp>,
        /// The applied point after them.
        through: Op,
    },
    /// The state machine was replaced by a snapshot taken at `op`.
    Restored {
        /// Its applied point.
        op: Op,
        /// The state machine's snapshot.
        state: Bytes,
    },
    /// The state at `op`, resent because the custom actor fell behind.
    Resync {
        /// Its applied point.
        op: Op,
        /// The state machine's snapshot.
        state: Bytes,
    },
}

/// What one shard turn produced for the group's listeners.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct GroupTurn(pub Vec<GroupNote>);

/// A caller in this process waits for the answer to `request`; registered
/// by the shard before the core sees the request.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wait {
    /// The client.
    pub client: ClientId,
    /// Its request.
    pub request: RequestNumber,
    /// Where the answer goes.
    pub answer: oneshot::Sender<ClientAnswer>,
}

/// Subscribe to the group's events; `role` (the replica's current one)
/// comes first.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Subscribe {
    /// Where events go.
    pub events: mpsc::Sender<GroupEvent>,
    /// The replica's role now.
    pub role: GroupRole,
    /// Its commit point now.
    pub commit: Op,
}

/// Ask for the custom actor (type-erased `Addr<A>`), if the kind has one.
#[derive(Message)]
#[rtype(result = "Option<Arc<dyn Any + Send + Sync>>")]
pub struct GetCustomActor;

/// The custom actor's mailbox overflowed: the shard should send the group's
/// state (a [`GroupNote::Resync`]) once it can.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct NeedsResync(pub GroupId);

/// Callers waiting at once, beyond which closed waiters (callers that gave
/// up) are swept out.
const WAITERS_SWEEP_MIN: usize = 64;

/// The group actor.
pub struct GroupActor {
    group: GroupId,
    role: GroupRole,
    commit: Op,
    waiters: HashMap<(ClientId, RequestNumber), oneshot::Sender<ClientAnswer>>,
    /// Waiters at the last sweep (sweeps run when the map doubles).
    waiters_swept: usize,
    subscribers: Vec<mpsc::Sender<GroupEvent>>,
    custom: Option<CustomActorLink>,
    /// Where to ask for a resync of the custom actor.
    shard: Recipient<NeedsResync>,
    drops: Arc<Drops>,
}

impl GroupActor {
    /// The actor of `group`, whose replica holds `role` at `commit`, with
    /// its kind's custom actor if it has one.
    pub fn new(
        group: GroupId,
        role: GroupRole,
        commit: Op,
        custom: Option<CustomActorLink>,
        shard: Recipient<NeedsResync>,
        drops: Arc<Drops>,
    ) -> GroupActor {
        GroupActor {
            group,
            role,
            commit,
            waiters: HashMap::new(),
            waiters_swept: 0,
            subscribers: Vec::new(),
            custom,
            shard,
            drops,
        }
    }

    fn publish(&mut self, event: GroupEvent) {
        self.subscribers.retain(|subscriber| match subscriber.try_send(event.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }

    fn note(&mut self, note: GroupNote) {
        match note {
            GroupNote::Answer { client, request, answer } => {
                if let Some(waiter) = self.waiters.remove(&(client, request)) {
                    let _ = waiter.send(answer);
                }
            }
            GroupNote::Role(role) => {
                if let Some(custom) = self.custom.as_mut() {
                    custom.role(role);
                }
                if self.role != role {
                    self.role = role;
                    self.publish(GroupEvent::Role { group: self.group, role });
                }
            }
            GroupNote::Committed(op) => {
                if op > self.commit {
                    self.commit = op;
                    self.publish(GroupEvent::Committed { group: self.group, op });
                }
            }
            GroupNote::Applied { ops, through } => {
                if let Some(custom) = self.custom.as_mut() {
                    custom.applied(ops, through, &self.drops);
                }
            }
            GroupNote::Restored { op, state } => {
                if let Some(custom) = self.custom.as_mut() {
                    custom.restored(op, state, &self.drops);
                }
            }
            GroupNote::Resync { op, state } => {
                if let Some(custom) = self.custom.as_mut() {
                    custom.resync(op, state, &self.drops);
                }
            }
        }
    }
}

impl Actor for GroupActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(256);
        // The custom actor first hears the replica's role.
        if let Some(custom) = self.custom.as_mut() {
            custom.role(self.role);
        }
    }
}

impl Handler<GroupTurn> for GroupActor {
    type Result = ();

    fn handle(&mut self, GroupTurn(notes): GroupTurn, _ctx: &mut Self::Context) {
        for note in notes {
            self.note(note);
        }
        if self.custom.as_ref().is_some_and(CustomActorLink::needs_resync) {
            let _ = self.shard.try_send(NeedsResync(self.group));
        }
    }
}

impl Handler<Wait> for GroupActor {
    type Result = ();

    fn handle(&mut self, wait: Wait, _ctx: &mut Self::Context) {
        if self.waiters.len() >= WAITERS_SWEEP_MIN.max(2 * self.waiters_swept) {
            self.waiters.retain(|_, waiter| !waiter.is_closed());
            self.waiters_swept = self.waiters.len();
        }
        self.waiters.insert((wait.client, wait.request), wait.answer);
    }
}

impl Handler<Subscribe> for GroupActor {
    type Result = ();

    fn handle(&mut self, subscribe: Subscribe, _ctx: &mut Self::Context) {
        self.role = subscribe.role;
        self.commit = self.commit.max(subscribe.commit);
        let _ = subscribe.events.try_send(GroupEvent::Role { group: self.group, role: self.role });
        self.subscribers.push(subscribe.events);
    }
}

impl Handler<GetCustomActor> for GroupActor {
    type Result = Option<Arc<dyn Any + Send + Sync>>;

    fn handle(&mut self, _: GetCustomActor, _ctx: &mut Self::Context) -> Self::Result {
        self.custom.as_ref().map(CustomActorLink::addr)
    }
}
