//! The shard's side of its group actors: started when first needed, and
//! retired when idle (Z1).
//!
//! Why retire them: a group actor is started by the group's first caller,
//! subscriber or actor lookup. A broker's partition is typically written
//! for a while and then left alone; kept for good, its actor (task,
//! mailbox, maps) would be most of what an idle group replica costs. The
//! handshake that keeps it from losing a caller is in [`crate::group`]: the
//! shard counts what it sends each actor ([`ActorLink::sent`]), the actor
//! counts what it handled, and only equal counts retire it.

use actix::prelude::*;
use cohort_messages::GroupId;

use super::ShardActor;
use crate::custom::CustomActorLink;
use crate::group::{GroupActor, GroupIdle, GroupRole, MayRetire, Retire, ShardRecipients};

/// A started group actor, and what the shard sent it.
pub(super) struct ActorLink {
    addr: Addr<GroupActor>,
    /// Messages sent to the actor that it counts as handled ([`GroupTurn`],
    /// [`Wait`], [`Subscribe`]).
    ///
    /// [`GroupTurn`]: crate::group::GroupTurn
    /// [`Wait`]: crate::group::Wait
    /// [`Subscribe`]: crate::group::Subscribe
    sent: u64,
    /// `sent` at the last sweep: equal at the next one, the shard sent the
    /// actor nothing for a whole sweep interval.
    swept: u64,
}

/// Which slice of the groups the next once-a-second sweep looks at.
pub(super) struct Sweep {
    /// Slices: seconds in a `commit_idle_heartbeat_timeout`, at least 1.
    slices: u64,
    /// The slice of the last sweep.
    slice: u64,
}

impl Sweep {
    /// Sweeps that visit every group once per `period_ticks` ticks of `tick`.
    pub(super) fn new(period_ticks: u64, tick: std::time::Duration) -> Sweep {
        Sweep { slices: (period_ticks / super::second_ticks(tick)).max(1), slice: 0 }
    }

    /// The slice count and the slice to sweep now.
    fn next_slice(&mut self) -> (u64, u64) {
        self.slice = (self.slice + 1) % self.slices;
        (self.slices, self.slice)
    }
}

impl ActorLink {
    /// The actor's address (the caller must send through [`ActorLink::send`]
    /// or [`ActorLink::try_send`] for what the actor counts).
    pub(super) fn addr(&self) -> &Addr<GroupActor> {
        &self.addr
    }

    /// Send a message the actor counts; `do_send` never drops it (the
    /// actor runs on this thread, between the shard's turns).
    pub(super) fn send<M>(&mut self, message: M)
    where
        M: Message<Result = ()> + Send + 'static,
        GroupActor: Handler<M>,
    {
        self.addr.do_send(message);
        self.sent += 1;
    }

    /// Send a message the actor counts, unless its mailbox is full.
    pub(super) fn try_send<M>(&mut self, message: M) -> bool
    where
        M: Message<Result = ()> + Send + 'static,
        GroupActor: Handler<M>,
    {
        let sent = self.addr.try_send(message).is_ok();
        self.sent += u64::from(sent);
        sent
    }
}

impl ShardActor {
    /// The actor of hosted `group`, started now if it has none yet; it
    /// first hears the replica's current role and commit point.
    pub(super) fn group_actor(&mut self, group: GroupId, ctx: &mut Context<Self>) -> Option<&mut ActorLink> {
        if self.groups.get(&group)?.actor.is_none() {
            self.start_group_actor(group, None, ctx)?;
        }
        self.groups.get_mut(&group)?.actor.as_mut()
    }

    /// Start `group`'s actor, with its kind's custom actor if it has one.
    pub(super) fn start_group_actor(
        &mut self,
        group: GroupId,
        custom: Option<CustomActorLink>,
        ctx: &mut Context<Self>,
    ) -> Option<()> {
        let replica = self.driver.shard().replica(group)?;
        let (role, commit) = (GroupRole::from_core(replica.role(), replica.view()), replica.commit_min());
        let link = self.groups.get_mut(&group)?;
        let shard = ShardRecipients { resync: ctx.address().recipient(), idle: ctx.address().recipient() };
        let addr = GroupActor::new(group, role, commit, custom, shard, std::sync::Arc::clone(&self.drops)).start();
        link.actor = Some(ActorLink { addr, sent: 0, swept: 0 });
        Some(())
    }

    /// Group actors alive on this shard (a pass over its groups).
    pub(super) fn group_actor_count(&self) -> usize {
        self.groups.values().filter(|link| link.actor.is_some()).count()
    }

    /// Once a second: ask each actor of this second's slice of the groups
    /// that the shard sent nothing since its slice's last turn whether it
    /// can retire. Every group's turn comes once per
    /// `commit_idle_heartbeat_timeout`, so an actor retires one to two of
    /// those after its group's last call, and the questions (and answers)
    /// are spread over the seconds instead of landing in one turn: at
    /// 100,000 groups that burst would delay the shard's ticks.
    pub(super) fn sweep_group_actors(&mut self) {
        let (slices, slice) = self.actor_sweep.next_slice();
        for (group, link) in &mut self.groups {
            if group.0 % slices != slice {
                continue;
            }
            if let Some(actor) = link.actor.as_mut() {
                // An actor sent nothing since has an empty mailbox; were it
                // full, its slice's next turn asks again.
                if actor.sent == actor.swept {
                    let _ = actor.addr.try_send(MayRetire);
                }
                actor.swept = actor.sent;
            }
        }
    }
}

impl Handler<GroupIdle> for ShardActor {
    type Result = ();

    fn handle(&mut self, idle: GroupIdle, _ctx: &mut Self::Context) {
        let Some(link) = self.groups.get_mut(&idle.group) else { return };
        // Only the actor that said so, and only if it handled everything
        // sent to it: one sent more since (a caller came) stays, and so
        // does a later actor of the group (hosted anew, or with a custom
        // actor), whatever its count.
        if let Some(actor) = link.actor.take_if(|actor| actor.addr == idle.actor && actor.sent == idle.handled) {
            // No subscriber and no custom actor: nobody follows the group
            // until one subscribes again.
            link.followed = false;
            // Were its mailbox full, the actor would stop anyway once the
            // last address (this one, and any a host looked up) is gone.
            let _ = actor.addr.try_send(Retire);
        }
    }
}
