//! The operator's changes of groups and of the metadata's freeze, on the
//! admin port (C3, C4, the upgrade freeze). Each becomes one
//! [`MetadataCommand`], submitted like the multi-step operations of
//! [`super::operator`]:
//!
//! | request | command |
//! | --- | --- |
//! | `POST /admin/groups` `{"group":12,"kind":"register","members":[1,2,3]}` (optional `"replication_quorum"`) | `CreateGroup` |
//! | `POST /admin/groups/{id}/delete` | `DeleteGroup` |
//! | `POST /admin/groups/{id}/transfer-primary` `{"to":3}` | `TransferPrimary` |
//! | `POST /admin/freeze`, `POST /admin/unfreeze` | `Freeze`, `Unfreeze` (naming this node) |
//!
//! The body is checked field by field (a `400` names the field); the
//! metadata's refusal (the group exists, a member is not registered, the
//! metadata is frozen since epoch E, ...) comes back as `409` with its reason.

use cohort_messages::metadata::MetadataCommand;
use cohort_messages::replication::Replication;
use cohort_messages::{GroupId, NodeId};
use serde_json::{Map, Value};

use super::operator::BadInput;

fn bad<T>(field: &str, error: impl Into<String>) -> Result<T, BadInput> {
    Err(BadInput { field: field.into(), error: error.into() })
}

/// The command a path under `/admin/` names, if it is one of this module's;
/// `node` is the node the admin port belongs to (freezes name it).
pub(crate) fn parse(path: &str, body: &[u8], node: NodeId) -> Option<Result<MetadataCommand, BadInput>> {
    let command = match path {
        "/admin/groups" => parse_create(body),
        "/admin/freeze" => Ok(MetadataCommand::Freeze { by: node }),
        "/admin/unfreeze" => Ok(MetadataCommand::Unfreeze { by: node }),
        _ => {
            let rest = path.strip_prefix("/admin/groups/")?;
            let (id, action) = rest.split_once('/')?;
            let group = match parse_group(id) {
                Ok(group) => group,
                Err(bad) => return Some(Err(bad)),
            };
            match action {
                "delete" => Ok(MetadataCommand::DeleteGroup { group }),
                "transfer-primary" => parse_transfer(group, body),
                _ => return None,
            }
        }
    };
    Some(command.and_then(|command| match command.validate() {
        Ok(()) => Ok(command),
        Err(invalid) => bad("body", invalid.reason),
    }))
}

/// `12` or `group:12`.
fn parse_group(id: &str) -> Result<GroupId, BadInput> {
    let digits = id.strip_prefix("group:").unwrap_or(id);
    match digits.parse::<u64>() {
        Ok(id) if GroupId(id) == GroupId::METADATA => {
            bad("group", "the metadata group's members change through `cohort admin replace` and `move`, not here")
        }
        Ok(id) => Ok(GroupId(id)),
        Err(_) => bad("group", format!("{id:?} is not a group id")),
    }
}

fn object(body: &[u8], example: &str) -> Result<Map<String, Value>, BadInput> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => bad("body", format!("not a JSON object; send e.g. {example}")),
        Err(_) => bad("body", format!("not a JSON document; send e.g. {example}")),
    }
}

fn only_fields(object: &Map<String, Value>, fields: &[&str]) -> Result<(), BadInput> {
    match object.keys().find(|key| !fields.contains(&key.as_str())) {
        Some(unknown) => bad(unknown, format!("not a field here (the fields: {})", fields.join(", "))),
        None => Ok(()),
    }
}

fn node(value: &Value, field: &str) -> Result<NodeId, BadInput> {
    match value.as_u64() {
        Some(0) => bad(field, "node 0 is never a node"),
        Some(id) => Ok(NodeId(id)),
        None => bad(field, format!("{value} is not a node id")),
    }
}

fn parse_create(body: &[u8]) -> Result<MetadataCommand, BadInput> {
    let object = object(body, r#"{"group":12,"kind":"register","members":[1,2,3]}"#)?;
    only_fields(&object, &["group", "kind", "members", "replication_quorum"])?;
    let group = match object.get("group") {
        Some(value) => match value.as_u64() {
            Some(id) => parse_group(&id.to_string())?,
            None => return bad("group", format!("{value} is not a group id")),
        },
        None => return bad("group", "missing"),
    };
    let kind = match object.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => kind.clone(),
        Some(_) => return bad("kind", "not a non-empty string"),
        None => return bad("kind", "missing: the group kind its state machine is registered under"),
    };
    if kind == cohort_core::metadata::METADATA_KIND {
        return bad("kind", "reserved for the metadata group");
    }
    let Some(Value::Array(list)) = object.get("members") else {
        return bad("members", "missing or not a list of node ids");
    };
    let mut members = Vec::with_capacity(list.len());
    for value in list {
        let member = node(value, "members")?;
        if members.contains(&member) {
            return bad("members", format!("{member} listed twice"));
        }
        members.push(member);
    }
    if members.is_empty() || members.len() > cohort_messages::limits::GROUP_MEMBERS_MAX {
        return bad(
            "members",
            format!("{} members; name 1 to {}", members.len(), cohort_messages::limits::GROUP_MEMBERS_MAX),
        );
    }
    let quorum = match object.get("replication_quorum") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_u64().and_then(|quorum| u8::try_from(quorum).ok()) {
            Some(quorum) if quorum >= 1 && usize::from(quorum) <= members.len() => Some(quorum),
            _ => return bad("replication_quorum", format!("{value} is not in 1..={}", members.len())),
        },
    };
    let replication = Replication { quorum, ..Replication::default() };
    Ok(MetadataCommand::CreateGroup { group, kind, members, replication })
}

fn parse_transfer(group: GroupId, body: &[u8]) -> Result<MetadataCommand, BadInput> {
    let object = object(body, r#"{"to":3}"#)?;
    only_fields(&object, &["to"])?;
    let to = match object.get("to") {
        Some(value) => node(value, "to")?,
        None => return bad("to", "missing: the member that is to lead the group"),
    };
    Ok(MetadataCommand::TransferPrimary { group, to })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: NodeId = NodeId(2);

    fn parsed(path: &str, body: &str) -> Result<MetadataCommand, BadInput> {
        parse(path, body.as_bytes(), NODE).unwrap_or_else(|| panic!("{path} is not a change path"))
    }

    #[test]
    fn c3_create_and_delete_bodies_parse_into_commands() {
        let create = parsed("/admin/groups", r#"{"group":12,"kind":"register","members":[1,2,3]}"#);
        assert_eq!(
            create,
            Ok(MetadataCommand::CreateGroup {
                group: GroupId(12),
                kind: "register".into(),
                members: vec![NodeId(1), NodeId(2), NodeId(3)],
                replication: Replication::default(),
            })
        );
        let quorum = parsed("/admin/groups", r#"{"group":1,"kind":"kv","members":[1,2,3],"replication_quorum":3}"#);
        assert!(matches!(
            quorum,
            Ok(MetadataCommand::CreateGroup { replication: Replication { quorum: Some(3), .. }, .. })
        ));
        assert_eq!(parsed("/admin/groups/12/delete", ""), Ok(MetadataCommand::DeleteGroup { group: GroupId(12) }));
        assert_eq!(
            parsed("/admin/groups/group:12/delete", ""),
            Ok(MetadataCommand::DeleteGroup { group: GroupId(12) })
        );
    }

    #[test]
    fn c4_transfer_and_freeze_paths_parse_into_commands() {
        assert_eq!(
            parsed("/admin/groups/4/transfer-primary", r#"{"to":3}"#),
            Ok(MetadataCommand::TransferPrimary { group: GroupId(4), to: NodeId(3) })
        );
        assert_eq!(parsed("/admin/freeze", ""), Ok(MetadataCommand::Freeze { by: NODE }));
        assert_eq!(parsed("/admin/unfreeze", ""), Ok(MetadataCommand::Unfreeze { by: NODE }));
        assert!(parse("/admin/groups/4/teleport", b"", NODE).is_none());
        assert!(parse("/admin/operations", b"", NODE).is_none());
    }

    #[test]
    fn c3_bad_bodies_name_the_field() {
        let cases = [
            ("/admin/groups", "", "body"),
            ("/admin/groups", "[1]", "body"),
            ("/admin/groups", r#"{"kind":"kv","members":[1]}"#, "group"),
            ("/admin/groups", r#"{"group":1,"members":[1]}"#, "kind"),
            ("/admin/groups", r#"{"group":1,"kind":"","members":[1]}"#, "kind"),
            ("/admin/groups", r#"{"group":1,"kind":"cohort.metadata","members":[1]}"#, "kind"),
            ("/admin/groups", r#"{"group":1,"kind":"kv","members":[]}"#, "members"),
            ("/admin/groups", r#"{"group":1,"kind":"kv","members":[1,1]}"#, "members"),
            ("/admin/groups", r#"{"group":1,"kind":"kv","members":[0]}"#, "members"),
            ("/admin/groups", r#"{"group":1,"kind":"kv","members":"1,2"}"#, "members"),
            ("/admin/groups", r#"{"group":1,"kind":"kv","members":[1],"replication_quorum":2}"#, "replication_quorum"),
            ("/admin/groups", r#"{"group":1,"kind":"kv","members":[1],"force":true}"#, "force"),
            ("/admin/groups", &format!(r#"{{"group":{},"kind":"kv","members":[1]}}"#, u64::MAX), "group"),
            ("/admin/groups/x/delete", "", "group"),
            ("/admin/groups/4/transfer-primary", "{}", "to"),
            ("/admin/groups/4/transfer-primary", r#"{"to":0}"#, "to"),
            ("/admin/groups/4/transfer-primary", r#"{"to":"three"}"#, "to"),
        ];
        for (path, body, field) in cases {
            match parsed(path, body) {
                Err(bad) => assert_eq!(bad.field, field, "{path} {body}: {}", bad.error),
                Ok(command) => panic!("{path} {body} parsed as {command:?}"),
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse("/admin/groups", &body, NODE);
            let _ = parse("/admin/groups/3/transfer-primary", &body, NODE);
            let _ = parse(&format!("/admin/groups/{}/delete", String::from_utf8_lossy(&body)), b"", NODE);
        }
    }
}
