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
//!
//! Why a group actor can retire (Z1): the shard starts one when first
//! needed, by a caller's request, a subscriber or an actor lookup. A group
//! written once would otherwise keep its actor (its task, mailbox and maps,
//! about a third of what an idle group replica may cost) for good. So the
//! shard asks an actor it sent nothing for a while ([`MayRetire`]); one
//! that holds no open caller, no live subscriber and no custom actor
//! answers [`GroupIdle`] with the count of the shard's messages it handled,
//! and the shard retires it ([`Retire`]) only if that count is everything
//! it sent: a `Wait` sent after the question keeps the actor. A retired
//! group's next caller starts a fresh actor from the replica's state.

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
    /// use cohort_actors::GroupRole;
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
/// group actor (see [`crate::CustomGroupActor`]).
///
/// ```
/// use cohort_actors::{GroupRole, RoleChanged};
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

/// The shard sent the actor nothing for a while: it answers [`GroupIdle`]
/// if it can retire (see the module docs).
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct MayRetire;

/// A group actor holds no open caller, no live subscriber and no custom
/// actor, and had handled `handled` of the shard's messages when it said so.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct GroupIdle {
    /// The group.
    pub group: GroupId,
    /// [`GroupTurn`], [`Wait`] and [`Subscribe`] messages handled so far.
    pub handled: u64,
    /// The actor that said so (a group may have had several).
    pub actor: Addr<GroupActor>,
}

/// The shard took the actor's [`GroupIdle`]: it sends it nothing more, and
/// the actor stops.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct Retire;

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
    /// The shard: where to ask for a resync of the custom actor, and to say
    /// that this actor is idle.
    shard: ShardRecipients,
    /// The shard's messages handled so far ([`GroupTurn`], [`Wait`],
    /// [`Subscribe`]): the shard retires the actor only if it sent no more.
    handled: u64,
    drops: Arc<Drops>,
}

/// Where a group actor reaches its shard.
#[derive(Clone)]
pub struct ShardRecipients {
    /// For [`NeedsResync`].
    pub resync: Recipient<NeedsResync>,
    /// For [`GroupIdle`].
    pub idle: Recipient<GroupIdle>,
}

impl GroupActor {
    /// The actor of `group`, whose replica holds `role` at `commit`, with
    /// its kind's custom actor if it has one.
    pub fn new(
        group: GroupId,
        role: GroupRole,
        commit: Op,
        custom: Option<CustomActorLink>,
        shard: ShardRecipients,
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
            handled: 0,
            drops,
        }
    }

    /// Nothing here needs the actor: no caller still waits, no subscriber
    /// still listens, and there is no custom actor to feed. Forgets the
    /// callers and subscribers that went away.
    fn idle(&mut self) -> bool {
        self.sweep_waiters();
        self.subscribers.retain(|subscriber| !subscriber.is_closed());
        self.waiters.is_empty() && self.subscribers.is_empty() && self.custom.is_none()
    }

    /// Forget the callers that gave up.
    fn sweep_waiters(&mut self) {
        self.waiters.retain(|_, waiter| !waiter.is_closed());
        self.waiters_swept = self.waiters.len();
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
        self.handled += 1;
        for note in notes {
            self.note(note);
        }
        if self.custom.as_ref().is_some_and(CustomActorLink::needs_resync) {
            let _ = self.shard.resync.try_send(NeedsResync(self.group));
        }
    }
}

impl Handler<Wait> for GroupActor {
    type Result = ();

    fn handle(&mut self, wait: Wait, _ctx: &mut Self::Context) {
        self.handled += 1;
        if self.waiters.len() >= WAITERS_SWEEP_MIN.max(2 * self.waiters_swept) {
            self.sweep_waiters();
        }
        self.waiters.insert((wait.client, wait.request), wait.answer);
    }
}

impl Handler<Subscribe> for GroupActor {
    type Result = ();

    fn handle(&mut self, subscribe: Subscribe, _ctx: &mut Self::Context) {
        self.handled += 1;
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

impl Handler<MayRetire> for GroupActor {
    type Result = ();

    fn handle(&mut self, _: MayRetire, ctx: &mut Self::Context) {
        if self.idle() {
            // A shard whose mailbox is full asks again at its next sweep.
            let _ =
                self.shard.idle.try_send(GroupIdle { group: self.group, handled: self.handled, actor: ctx.address() });
        }
    }
}

impl Handler<Retire> for GroupActor {
    type Result = ();

    fn handle(&mut self, _: Retire, ctx: &mut Self::Context) {
        // The shard checked that this actor handled everything it was sent;
        // a caller that came since went to a new actor.
        debug_assert!(self.waiters.is_empty(), "group {:?} retired with a caller", self.group);
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cohort_messages::{NodeId, Redirect, View};

    use super::*;
    use crate::metrics::NodeMetrics;

    /// Stands in for the shard: keeps what a group actor tells it.
    #[derive(Default)]
    struct Shard {
        idle: Vec<u64>,
    }

    impl Actor for Shard {
        type Context = Context<Self>;
    }

    impl Handler<NeedsResync> for Shard {
        type Result = ();
        fn handle(&mut self, _: NeedsResync, _: &mut Context<Self>) {}
    }

    impl Handler<GroupIdle> for Shard {
        type Result = ();
        fn handle(&mut self, idle: GroupIdle, _: &mut Context<Self>) {
            self.idle.push(idle.handled);
        }
    }

    #[derive(Message)]
    #[rtype(result = "Vec<u64>")]
    struct Said;

    impl Handler<Said> for Shard {
        type Result = Vec<u64>;
        fn handle(&mut self, _: Said, _: &mut Context<Self>) -> Vec<u64> {
            std::mem::take(&mut self.idle)
        }
    }

    fn group_actor(shard: &Addr<Shard>) -> Addr<GroupActor> {
        let recipients = ShardRecipients { resync: shard.clone().recipient(), idle: shard.clone().recipient() };
        let drops = Arc::new(Drops::new(Arc::new(NodeMetrics::new())));
        GroupActor::new(GroupId(7), GroupRole::Primary(View(1)), Op(0), None, recipients, drops).start()
    }

    async fn said(shard: &Addr<Shard>) -> Vec<u64> {
        // The group actor and the shard share this thread: a short sleep lets both run.
        tokio::time::sleep(Duration::from_millis(20)).await;
        shard.send(Said).await.expect("the stand-in shard runs")
    }

    fn answer(request: u64) -> ClientAnswer {
        ClientAnswer::Redirect(Redirect {
            group: GroupId(7),
            client: ClientId(1),
            request: RequestNumber(request),
            view: View(1),
            primary: Some(NodeId(2)),
        })
    }

    #[actix_rt::test]
    async fn z1_a_group_actor_with_a_waiting_caller_or_a_subscriber_does_not_say_it_is_idle() {
        let shard = Shard::default().start();
        let actor = group_actor(&shard);
        // Nothing handled yet, nobody waits: idle at once.
        actor.do_send(MayRetire);
        assert_eq!(said(&shard).await, vec![0]);
        let (waiter, answered) = oneshot::channel();
        actor.do_send(Wait { client: ClientId(1), request: RequestNumber(1), answer: waiter });
        actor.do_send(MayRetire);
        assert_eq!(said(&shard).await, Vec::<u64>::new(), "a caller still waits");
        actor.do_send(GroupTurn(vec![GroupNote::Answer {
            client: ClientId(1),
            request: RequestNumber(1),
            answer: answer(1),
        }]));
        assert!(matches!(answered.await, Ok(ClientAnswer::Redirect(_))), "the caller hears its answer");
        let (events, mut heard) = mpsc::channel(8);
        actor.do_send(Subscribe { events, role: GroupRole::Primary(View(1)), commit: Op(0) });
        actor.do_send(MayRetire);
        assert_eq!(said(&shard).await, Vec::<u64>::new(), "a subscriber still listens");
        assert!(heard.recv().await.is_some(), "the subscriber heard the role");
        drop(heard);
        actor.do_send(MayRetire);
        // Wait, GroupTurn and Subscribe: three of the shard's messages handled.
        assert_eq!(said(&shard).await, vec![3], "idle once the subscriber went away");
    }

    #[actix_rt::test]
    async fn z1_a_caller_that_gave_up_does_not_keep_the_group_actor() {
        let shard = Shard::default().start();
        let actor = group_actor(&shard);
        let (waiter, answered) = oneshot::channel();
        actor.do_send(Wait { client: ClientId(1), request: RequestNumber(1), answer: waiter });
        drop(answered);
        actor.do_send(MayRetire);
        assert_eq!(said(&shard).await, vec![1]);
        actor.do_send(Retire);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!actor.connected(), "a retired actor stops");
    }
}
