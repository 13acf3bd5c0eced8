//! P4: a candidate (learner) never votes, so it must never lead and never
//! take part in an election. Every `RoleChanged` of a candidate replica must
//! say `Candidate`; anything else means the core let a learner act as a
//! voter. (That candidates are never *counted* is checked by the scenarios
//! that stop voters while candidates run, `tests/tests/candidates.rs`.)

use cohort_actors::core::Role;
use cohort_messages::GroupId;

/// Check one reported role of `node` in `group`.
pub fn check(group: GroupId, node: usize, role: Role, candidate: bool) -> Result<(), String> {
    if candidate && role != Role::Candidate {
        return Err(format!("P4 broken: candidate node {node} of {group} reported role {role:?}"));
    }
    if !candidate && role == Role::Candidate {
        return Err(format!("P4 broken: voter node {node} of {group} reported role Candidate"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p4_a_candidate_reporting_primary_is_caught() {
        assert!(check(GroupId(1), 3, Role::Candidate, true).is_ok());
        assert!(check(GroupId(1), 3, Role::Primary, true).is_err());
        assert!(check(GroupId(1), 3, Role::ViewChange, true).is_err());
        assert!(check(GroupId(1), 0, Role::Candidate, false).is_err());
    }
}
