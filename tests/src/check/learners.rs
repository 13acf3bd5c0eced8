//! P4: a learner never votes, so it must never lead and never
//! take part in an election. Every `RoleChanged` of a learner replica must
//! say `Learner`; anything else means the core let a learner act as a
//! voter. (That learners are never *counted* is checked by the scenarios
//! that stop voters while learners run, `tests/tests/learners.rs`.)

use cohort_core::Role;
use cohort_messages::GroupId;

/// Check one reported role of `node` in `group`.
pub fn check(group: GroupId, node: usize, role: Role, learner: bool) -> Result<(), String> {
    if learner && role != Role::Learner {
        return Err(format!("P4 broken: learner node {node} of {group} reported role {role:?}"));
    }
    if !learner && role == Role::Learner {
        return Err(format!("P4 broken: voter node {node} of {group} reported role Learner"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p4_a_learner_reporting_primary_is_caught() {
        assert!(check(GroupId(1), 3, Role::Learner, true).is_ok());
        assert!(check(GroupId(1), 3, Role::Primary, true).is_err());
        assert!(check(GroupId(1), 3, Role::ViewChange, true).is_err());
        assert!(check(GroupId(1), 0, Role::Learner, false).is_err());
    }
}
