//! Where a node sends its requests to the metadata group.
//!
//! The agent's requests (sessions, reports, steps, reads of the metadata
//! group's record) must reach the metadata primary. A node knows only its
//! own replica, its applied metadata and what redirects say, and each can
//! be stale: after switches of the metadata group's voters (Z6) a node left
//! in an old incarnation names an old primary, and a node whose own
//! metadata is behind lists old voters. So:
//!
//! - a voter whose replica is the primary asks itself;
//! - a redirect that names a node sends the request there at once, voter
//!   or not (the node that left a behind node's voter list may be the very
//!   primary it needs), but only [`REDIRECTS_FOLLOWED_MAX`] times per
//!   request the agent sends: stale nodes that name each other cannot keep
//!   a request bouncing between them;
//! - a redirect that names nobody, a named redirect past that budget, or a
//!   request with no answer in time, moves on to the next voter of the
//!   node's list, once per send (a redirect then a resend of the same
//!   request must not skip a voter: with two other voters that would ask
//!   the same one for ever). "Next" counts from the last voter the route
//!   asked, not from a named node outside the list, so each voter is tried
//!   in turn however many stale names come between.
//!
//! One route serves one stream of requests (the agent's own, an operator's,
//! a node's reads of the whole state): a send resets the redirect budget
//! and the resend rule of its own stream only.
//!
//! The runtime's agent actor and the simulator's shell both route through
//! this type, so the simulator checks the routing the nodes run.

use cohort_messages::{NodeId, Redirect, Request};

use crate::client;

/// How many redirects one request the agent sends may follow before it
/// waits for the agent's retry: enough for a chain from a learner through a
/// former voter to the primary, and a bound on a loop of stale names.
pub const REDIRECTS_FOLLOWED_MAX: u32 = 4;

/// Where the next request to the metadata group goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// This node's own metadata replica.
    Local,
    /// Another node.
    Node(NodeId),
}

/// The node a node's metadata requests go to.
#[derive(Clone, Debug)]
pub struct MetadataRoute {
    me: NodeId,
    /// The node believed to be the metadata primary; `None` until a
    /// redirect or a retry named one.
    target: Option<NodeId>,
    /// The last voter the route asked: where the turn to the next voter
    /// counts from (`target` may be a named node outside the voters).
    cursor: Option<NodeId>,
    /// Redirects followed since the agent last sent.
    followed: u32,
    /// True once a redirect moved the target since the agent last sent.
    moved: bool,
}

impl MetadataRoute {
    /// The route of node `me`, which first asks its own replica if it votes.
    pub fn new(me: NodeId) -> MetadataRoute {
        MetadataRoute { me, target: None, cursor: None, followed: 0, moved: false }
    }

    /// The node requests go to, if one was chosen.
    pub fn target(&self) -> Option<NodeId> {
        self.target
    }

    /// The agent sends a request: `resend` if it is the one that had no
    /// answer in time, whose target may be down or cut off, so the next
    /// voter gets it, unless a redirect already moved the route since the
    /// last send (a primary keeps asking itself).
    pub fn on_send(&mut self, resend: bool, voters: &[NodeId], metadata_primary: bool) {
        if resend && !metadata_primary && !self.moved {
            self.aim(self.next_voter(voters), voters);
        }
        self.followed = 0;
        self.moved = false;
    }

    /// Where to send a request now. A voter whose replica is the primary,
    /// or that has no other node in mind, asks its own replica; every other
    /// node asks its target, or the first other voter.
    pub fn destination(&mut self, voters: &[NodeId], metadata_primary: bool) -> Destination {
        let voter = voters.contains(&self.me);
        if voter && (metadata_primary || self.target.is_none_or(|target| target == self.me)) {
            return Destination::Local;
        }
        let target = self.target.filter(|target| *target != self.me).unwrap_or_else(|| self.next_voter(voters));
        self.aim(target, voters);
        if target == self.me { Destination::Local } else { Destination::Node(target) }
    }

    /// Node `from` redirected a request, naming `primary` if it knows one.
    /// Returns where to resend it now: the named node, if it is not `from`
    /// and the request has redirects left to follow. Otherwise the route
    /// moves to the next voter and the resend waits for the agent's retry.
    pub fn redirected(&mut self, voters: &[NodeId], from: NodeId, primary: Option<NodeId>) -> Option<Destination> {
        let named = primary.filter(|primary| *primary != from && self.followed < REDIRECTS_FOLLOWED_MAX);
        self.moved = true;
        let Some(named) = named else {
            self.aim(self.next_voter(voters), voters);
            return None;
        };
        self.followed += 1;
        self.aim(named, voters);
        Some(if named == self.me { Destination::Local } else { Destination::Node(named) })
    }

    /// Send to `target` from now on; a voter also becomes the cursor.
    fn aim(&mut self, target: NodeId, voters: &[NodeId]) {
        self.target = Some(target);
        if voters.contains(&target) {
            self.cursor = Some(target);
        }
    }

    /// The voter after the last one asked, skipping this node (this node if
    /// it is the only voter, or there is none).
    fn next_voter(&self, voters: &[NodeId]) -> NodeId {
        let others: Vec<NodeId> = voters.iter().copied().filter(|voter| *voter != self.me).collect();
        let Some(first) = others.first().copied() else { return self.me };
        match self.cursor.and_then(|cursor| others.iter().position(|voter| *voter == cursor)) {
            Some(index) => others[(index + 1) % others.len()],
            None => first,
        }
    }
}

/// One stream of requests as a shell sends them: its [`MetadataRoute`] and
/// the request it sent last, which a redirect sends again at once. The
/// runtime's agent actor and the simulator both send the agent's requests
/// through it, so a resend and a redirect move the route the same way on
/// both.
#[derive(Clone, Debug)]
pub struct RequestRoute {
    route: MetadataRoute,
    last: Option<Request>,
}

impl RequestRoute {
    /// The stream of node `me`.
    pub fn new(me: NodeId) -> RequestRoute {
        RequestRoute { route: MetadataRoute::new(me), last: None }
    }

    /// Where `request` goes now. A request with the number of the last
    /// one sent is a resend (it had no answer in time), which moves the
    /// route on ([`MetadataRoute::on_send`]).
    pub fn on_submit(&mut self, request: &Request, voters: &[NodeId], metadata_primary: bool) -> Destination {
        let resend =
            self.last.as_ref().is_some_and(|last| last.client == request.client && last.request == request.request);
        self.route.on_send(resend, voters, metadata_primary);
        self.last = Some(request.clone());
        self.route.destination(voters, metadata_primary)
    }

    /// Node `from` redirected a request: if it is the last one sent, where
    /// to send it again now ([`MetadataRoute::redirected`]), with it. A
    /// redirect about an older request changes nothing.
    pub fn on_redirect(
        &mut self,
        voters: &[NodeId],
        from: NodeId,
        redirect: &Redirect,
    ) -> Option<(Destination, Request)> {
        let last = self.last.as_ref().filter(|last| client::redirects(last, redirect))?;
        let destination = self.route.redirected(voters, from, redirect.primary)?;
        Some((destination, last.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ids: &[u64]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    #[test]
    fn z6_a_voter_asks_its_own_replica_first_and_a_learner_the_first_voter() {
        let voters = nodes(&[1, 2]);
        assert_eq!(MetadataRoute::new(NodeId(1)).destination(&voters, false), Destination::Local);
        assert_eq!(MetadataRoute::new(NodeId(4)).destination(&voters, false), Destination::Node(NodeId(1)));
    }

    #[test]
    fn z6_a_primary_asks_itself_even_after_a_request_had_no_answer() {
        // Seed 813136: nodes 1 and 2 ran the metadata group's next
        // incarnation; their requests had gone to nodes left in the old one.
        let voters = nodes(&[1, 2, 3]);
        let mut route = MetadataRoute::new(NodeId(1));
        route.on_send(true, &voters, false);
        assert_eq!(route.destination(&voters, false), Destination::Node(NodeId(2)));
        route.on_send(true, &voters, true);
        assert_eq!(route.destination(&voters, true), Destination::Local);
    }

    #[test]
    fn z6_a_redirect_to_a_node_outside_the_voters_is_followed() {
        // Seed 812899: node 4 was left behind by two switches of the
        // metadata group; its voter list was old, and the primary was a
        // node that joined the voters since.
        let stale_voters = nodes(&[1, 2, 3]);
        let mut route = MetadataRoute::new(NodeId(4));
        route.on_send(false, &stale_voters, false);
        assert_eq!(route.destination(&stale_voters, false), Destination::Node(NodeId(1)));
        assert_eq!(route.redirected(&stale_voters, NodeId(1), Some(NodeId(5))), Some(Destination::Node(NodeId(5))));
        assert_eq!(route.destination(&stale_voters, false), Destination::Node(NodeId(5)));
    }

    #[test]
    fn z6_stale_nodes_naming_each_other_bounce_a_request_a_bounded_number_of_times() {
        let voters = nodes(&[1, 2, 3]);
        let mut route = MetadataRoute::new(NodeId(1));
        route.on_send(false, &voters, false);
        let mut followed = 0;
        let mut from = NodeId(4);
        while let Some(Destination::Node(next)) = route.redirected(&voters, from, Some(NodeId(9 - from.0))) {
            followed += 1;
            from = next;
        }
        assert_eq!(followed, REDIRECTS_FOLLOWED_MAX);
        assert!(voters.contains(&route.target().unwrap_or(NodeId(0))), "the retry goes to a voter");
        route.on_send(true, &voters, false);
        assert!(route.redirected(&voters, NodeId(2), Some(NodeId(5))).is_some(), "a new send may follow again");
    }

    #[test]
    fn z6_requests_without_an_answer_or_a_name_visit_every_other_voter_in_turn() {
        let voters = nodes(&[1, 2, 3]);
        let mut route = MetadataRoute::new(NodeId(2));
        let mut visited = Vec::new();
        for _ in 0..2 {
            route.on_send(true, &voters, false);
            visited.push(route.destination(&voters, false));
        }
        assert_eq!(route.redirected(&voters, NodeId(3), None), None);
        visited.push(route.destination(&voters, false));
        assert_eq!(route.redirected(&voters, NodeId(1), Some(NodeId(1))), None, "a node naming itself is no news");
        visited.push(route.destination(&voters, false));
        let expected = [1, 3, 1, 3].map(|id| Destination::Node(NodeId(id)));
        assert_eq!(visited, expected);
    }

    #[test]
    fn z6_a_redirect_naming_nobody_then_a_resend_move_the_route_once() {
        // Seed 813809: node 3's requests went to node 1, left in the old
        // incarnation, which knew no primary; the redirect moved the route
        // to node 2 and the resend moved it back to node 1, every time.
        let voters = nodes(&[1, 2, 3]);
        let mut route = MetadataRoute::new(NodeId(3));
        route.on_send(false, &voters, false);
        route.on_send(true, &voters, false);
        assert_eq!(route.destination(&voters, false), Destination::Node(NodeId(1)));
        assert_eq!(route.redirected(&voters, NodeId(1), None), None);
        route.on_send(true, &voters, false);
        assert_eq!(route.destination(&voters, false), Destination::Node(NodeId(2)));
        route.on_send(true, &voters, false);
        assert_eq!(route.destination(&voters, false), Destination::Node(NodeId(1)), "no answer: on to the next");
    }

    #[test]
    fn z6_a_stale_name_outside_the_voters_does_not_send_the_turn_back_to_the_first_voter() {
        // Node 5 lists voters 1, 2, 4; node 1, left in an old incarnation,
        // names node 3, which the switch removed. Were the turn counted
        // from node 3, it would go back to node 1 every time and voters 2
        // and 4 would never be asked.
        let voters = nodes(&[1, 2, 4]);
        let mut route = MetadataRoute::new(NodeId(5));
        route.on_send(false, &voters, false);
        assert_eq!(route.destination(&voters, false), Destination::Node(NodeId(1)));
        assert_eq!(route.redirected(&voters, NodeId(1), Some(NodeId(3))), Some(Destination::Node(NodeId(3))));
        assert_eq!(route.redirected(&voters, NodeId(3), None), None);
        assert_eq!(route.destination(&voters, false), Destination::Node(NodeId(2)));
        // Node 3 down: the resend after a redirect stays, the next one moves on.
        route.on_send(false, &voters, false);
        assert_eq!(route.redirected(&voters, NodeId(2), Some(NodeId(3))), Some(Destination::Node(NodeId(3))));
        route.on_send(true, &voters, false);
        assert_eq!(route.destination(&voters, false), Destination::Node(NodeId(3)));
        route.on_send(true, &voters, false);
        assert_eq!(route.destination(&voters, false), Destination::Node(NodeId(4)));
    }

    /// Request `number` of one client: 1 is its registration, writes follow.
    fn request(number: u64) -> Request {
        let operation = bytes::Bytes::from_static(b"command");
        let group = cohort_messages::GroupId::METADATA;
        let mut sequence = client::Sequence::new(cohort_messages::ClientId(5), group);
        if let Some(registration) = sequence.registration().filter(|_| number == 1) {
            return registration;
        }
        sequence.registered(cohort_messages::Op(1));
        (2..number).for_each(|_| drop(sequence.write(operation.clone())));
        sequence.write(operation)
    }

    fn redirect(request: &Request, primary: Option<u64>) -> Redirect {
        Redirect {
            client: request.client,
            request: request.request,
            group: request.group,
            view: cohort_messages::View(0),
            primary: primary.map(NodeId),
        }
    }

    #[test]
    fn z6_a_resend_moves_the_stream_on_and_a_redirect_resends_only_the_last_request() {
        let voters = nodes(&[1, 2, 3]);
        let mut stream = RequestRoute::new(NodeId(3));
        let (first, second) = (request(1), request(2));
        assert_eq!(stream.on_submit(&first, &voters, false), Destination::Local);
        assert_eq!(stream.on_submit(&first, &voters, false), Destination::Node(NodeId(1)), "no answer: next voter");
        assert_eq!(stream.on_submit(&second, &voters, false), Destination::Node(NodeId(1)), "a new request stays");
        assert_eq!(stream.on_redirect(&voters, NodeId(1), &redirect(&first, Some(2))), None, "about an older one");
        let resent = stream.on_redirect(&voters, NodeId(1), &redirect(&second, Some(2)));
        assert_eq!(resent, Some((Destination::Node(NodeId(2)), second.clone())));
        assert_eq!(stream.on_redirect(&voters, NodeId(2), &redirect(&second, None)), None, "names nobody");
        assert_eq!(stream.on_submit(&second, &voters, false), Destination::Node(NodeId(1)), "moved once, not twice");
    }
}
