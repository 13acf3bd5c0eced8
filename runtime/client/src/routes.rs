//! The route cache: which node leads each group, as far as the client knows
//! (C1).
//!
//! Why a cache, and why these rules: going to the primary first saves a
//! redirect on every request, but any entry may be stale after a failover.
//! Every source of knowledge carries a view number, and a newer view always
//! wins: a node's Routes answer (its copy of the metadata's owner records),
//! a Redirect (the view the redirecting member knows), and a Reply (the
//! node that served it is the primary of the reply's view). An entry is
//! dropped when its node cannot be reached or says it does not serve the
//! group, so the next request asks again. No I/O here; the calls that feed
//! it are in `call.rs`.

use std::collections::HashMap;

use cohort_messages::{GroupId, NodeId, View};

/// Where a group's primary is, as the client last learned.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The primary's node.
    pub node: NodeId,
    /// The view in which it is primary.
    pub view: View,
}

/// Group → primary, bounded by `groups_max`.
#[derive(Debug)]
pub(crate) struct RouteCache {
    routes: HashMap<GroupId, Route>,
    groups_max: usize,
}

impl RouteCache {
    pub(crate) fn new(groups_max: usize) -> RouteCache {
        debug_assert!(groups_max > 0);
        RouteCache { routes: HashMap::new(), groups_max: groups_max.max(1) }
    }

    pub(crate) fn get(&self, group: GroupId) -> Option<Route> {
        self.routes.get(&group).copied()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.routes.len()
    }

    /// What a Routes entry or a Redirect says: in `view`, the primary is
    /// `primary` (or unknown). A named primary replaces an entry of the
    /// same or an older view; "unknown" in a newer view drops the entry.
    pub(crate) fn learn(&mut self, group: GroupId, view: View, primary: Option<NodeId>) {
        let cached = self.routes.get(&group).copied();
        match primary {
            Some(node) if cached.is_none_or(|route| view >= route.view) => self.insert(group, Route { node, view }),
            None if cached.is_some_and(|route| view > route.view) => {
                self.routes.remove(&group);
            }
            _ => {}
        }
    }

    /// `node` served a request of `group` in `view`: it is the primary.
    pub(crate) fn served(&mut self, group: GroupId, node: NodeId, view: View) {
        self.learn(group, view, Some(node));
        debug_assert!(self.get(group).is_some_and(|route| route.view >= view));
    }

    /// `node` is unreachable or does not serve `group`: drop the entry if it
    /// names that node.
    pub(crate) fn forget(&mut self, group: GroupId, node: NodeId) {
        if self.routes.get(&group).is_some_and(|route| route.node == node) {
            self.routes.remove(&group);
        }
    }

    fn insert(&mut self, group: GroupId, route: Route) {
        if self.routes.len() >= self.groups_max && !self.routes.contains_key(&group) {
            let evicted = self.routes.keys().next().copied();
            if let Some(evicted) = evicted {
                self.routes.remove(&evicted);
            }
        }
        self.routes.insert(group, route);
        debug_assert!(self.routes.len() <= self.groups_max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: GroupId = GroupId(3);

    fn route(node: u64, view: u32) -> Option<Route> {
        Some(Route { node: NodeId(node), view: View(view) })
    }

    #[test]
    fn c1_a_newer_view_wins_and_an_older_one_is_ignored() {
        let mut cache = RouteCache::new(10);
        cache.learn(G, View(4), Some(NodeId(1)));
        assert_eq!(cache.get(G), route(1, 4));
        cache.learn(G, View(3), Some(NodeId(2)));
        assert_eq!(cache.get(G), route(1, 4), "a stale redirect does not move the route back");
        cache.learn(G, View(5), Some(NodeId(2)));
        assert_eq!(cache.get(G), route(2, 5));
        cache.learn(G, View(5), None);
        assert_eq!(cache.get(G), route(2, 5), "unknown in the same view keeps the entry");
        cache.learn(G, View(6), None);
        assert_eq!(cache.get(G), None, "a newer view without a primary drops it");
    }

    #[test]
    fn c1_an_unreachable_primary_is_forgotten_only_where_it_is_named() {
        let mut cache = RouteCache::new(10);
        cache.served(G, NodeId(1), View(2));
        cache.served(GroupId(4), NodeId(2), View(1));
        cache.forget(G, NodeId(2));
        assert_eq!(cache.get(G), route(1, 2), "another node's failure leaves it");
        cache.forget(G, NodeId(1));
        assert_eq!(cache.get(G), None);
        assert_eq!(cache.get(GroupId(4)), route(2, 1));
    }

    #[test]
    fn c1_the_cache_never_holds_more_than_its_limit() {
        let mut cache = RouteCache::new(3);
        for group in 0..10 {
            cache.learn(GroupId(group), View(1), Some(NodeId(1)));
            assert!(cache.len() <= 3);
        }
        assert!(cache.get(GroupId(9)).is_some(), "the newest entry is kept");
    }
}
