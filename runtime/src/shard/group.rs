//! One actor per group replica, with a typed role.
//!
//! The replica's protocol state lives in the shard's sans-IO core, where the
//! shard batches every group's Commits and flushes every group's log with one
//! sync (see docs/architecture.md). The group actor is the replica's face to
//! the rest of the node and to the host: it holds the typed role
//! ([`GroupRole`]: primary, backup, electing or candidate, with the view) and the commit
//! point, as the core reports them, and tells subscribers about every change
//! ([`GroupEvent`]). A host's custom group actors ([`super::custom`]) get
//! the same role messages from the shard, and the applied ops as well.

use actix::prelude::*;
use cohort_actors::core::Role;
use cohort_messages::{GroupId, Op, View};
use tokio::sync::mpsc;

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
    Candidate(View),
}

impl GroupRole {
    /// The view the role holds in.
    ///
    /// ```
    /// use cohort_runtime::prelude::*;
    /// assert_eq!(GroupRole::Backup(View(3)).view(), View(3));
    /// assert!(GroupRole::Primary(View(4)).is_primary());
    /// ```
    pub fn view(self) -> View {
        match self {
            GroupRole::Primary(view)
            | GroupRole::Backup(view)
            | GroupRole::ViewChange(view)
            | GroupRole::Candidate(view) => view,
        }
    }

    /// True for [`GroupRole::Primary`].
    pub fn is_primary(self) -> bool {
        matches!(self, GroupRole::Primary(_))
    }

    pub(crate) fn from_core(role: Role, view: View) -> GroupRole {
        match role {
            Role::Primary => GroupRole::Primary(view),
            Role::Backup => GroupRole::Backup(view),
            Role::ViewChange => GroupRole::ViewChange(view),
            Role::Candidate => GroupRole::Candidate(view),
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

/// Subscribers get at most this many unread events; a slower one misses events
/// (and can read the current state with [`GetGroupState`]).
pub const SUBSCRIBER_EVENTS_MAX: usize = 1024;

/// The group actor.
pub struct GroupActor {
    group: GroupId,
    role: Option<GroupRole>,
    commit: Op,
    subscribers: Vec<mpsc::Sender<GroupEvent>>,
}

impl GroupActor {
    /// The actor of `group`, before the core reported anything.
    pub fn new(group: GroupId) -> GroupActor {
        GroupActor { group, role: None, commit: Op(0), subscribers: Vec::new() }
    }

    fn publish(&mut self, event: GroupEvent) {
        self.subscribers.retain(|subscriber| match subscriber.try_send(event.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }
}

impl Actor for GroupActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(256);
    }
}

/// The replica's role changed: became primary or backup of a view, or
/// stepped down into a view change. The shard sends it to the group's
/// [`GroupActor`] and to a custom group actor (see [`super::custom`]).
///
/// ```
/// use cohort_runtime::prelude::*;
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

impl Handler<RoleChanged> for GroupActor {
    type Result = ();

    fn handle(&mut self, changed: RoleChanged, _ctx: &mut Self::Context) {
        let role = changed.role;
        if self.role != Some(role) {
            self.role = Some(role);
            self.publish(GroupEvent::Role { group: self.group, role });
        }
    }
}

/// From the shard: the commit point moved.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CommitMoved(pub Op);

impl Handler<CommitMoved> for GroupActor {
    type Result = ();

    fn handle(&mut self, moved: CommitMoved, _ctx: &mut Self::Context) {
        if moved.0 > self.commit {
            self.commit = moved.0;
            self.publish(GroupEvent::Committed { group: self.group, op: moved.0 });
        }
    }
}

/// Subscribe to the group's events; the current role comes first.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Subscribe(pub mpsc::Sender<GroupEvent>);

impl Handler<Subscribe> for GroupActor {
    type Result = ();

    fn handle(&mut self, subscribe: Subscribe, _ctx: &mut Self::Context) {
        if let Some(role) = self.role {
            let _ = subscribe.0.try_send(GroupEvent::Role { group: self.group, role });
        }
        self.subscribers.push(subscribe.0);
    }
}

/// Ask for the current role and commit point.
#[derive(Message)]
#[rtype(result = "GroupState")]
pub struct GetGroupState;

/// A group's role and commit point on this node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, MessageResponse)]
pub struct GroupState {
    /// The role, once the core reported one.
    pub role: Option<GroupRole>,
    /// The commit point applied here.
    pub commit: Op,
}

impl Handler<GetGroupState> for GroupActor {
    type Result = GroupState;

    fn handle(&mut self, _: GetGroupState, _ctx: &mut Self::Context) -> GroupState {
        GroupState { role: self.role, commit: self.commit }
    }
}
