//! Who is calling the admin port, and whether a POST is shaped as the
//! operator endpoints take it (T4).
//!
//! The rules, in the order they are checked:
//! - a request without an `Authorization` header is anonymous: it may read
//!   `/metrics`, `/health` and the redacted `/status`, nothing else;
//! - a request with one must carry `Bearer <token>` with this node's token,
//!   or it is refused (`401`), whatever it asks for, so a mistyped token is
//!   reported instead of silently read as anonymous;
//! - a node without a token refuses every token (`403`) and every POST:
//!   an admin port reachable over a network must never take operator
//!   commands unauthenticated, so no token means no operator commands;
//! - a POST must say `Content-Type: application/json` (`415`), which also
//!   keeps a browser's cross-site form posts (which cannot set that type
//!   without a preflight) away from the endpoints.

use actix_web::http::header::HeaderValue;

use super::refusal::AdminRefusal;
use super::token::AdminToken;

/// Who a request comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Caller {
    /// The request presented this node's token.
    Operator,
    /// The request presented no token.
    Anonymous,
}

/// Who sent a request with this `Authorization` header (`None`: absent),
/// to a node whose token is `configured`.
pub(super) fn caller(
    configured: Option<&AdminToken>,
    authorization: Option<&HeaderValue>,
) -> Result<Caller, AdminRefusal> {
    let Some(authorization) = authorization else { return Ok(Caller::Anonymous) };
    let Some(configured) = configured else { return Err(AdminRefusal::TokenUnset) };
    let presented = bearer(authorization.as_bytes()).ok_or(AdminRefusal::Unauthenticated)?;
    if configured.matches(presented) { Ok(Caller::Operator) } else { Err(AdminRefusal::TokenMismatch) }
}

/// The refusal for an anonymous caller of a mutating endpoint.
pub(super) fn anonymous_refusal(configured: Option<&AdminToken>) -> AdminRefusal {
    match configured {
        Some(_) => AdminRefusal::Unauthenticated,
        None => AdminRefusal::TokenUnset,
    }
}

/// The credentials of `Bearer <credentials>` (the scheme is
/// case-insensitive, RFC 7235), or `None` for another scheme.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer ";
    let scheme = value.get(..SCHEME.len())?;
    if !scheme.eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let credentials = value[SCHEME.len()..].trim_ascii();
    (!credentials.is_empty()).then_some(credentials)
}

/// True if a `Content-Type` header says JSON (`application/json`, with or
/// without parameters such as `charset=utf-8`).
pub(super) fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|value| value.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(value: &str) -> HeaderValue {
        HeaderValue::from_str(value).expect("a header value")
    }

    #[test]
    fn t4_callers_by_header() {
        let token = AdminToken::new("the-admin-token-of-this-node").expect("valid");
        let configured = Some(&token);
        assert_eq!(caller(configured, None), Ok(Caller::Anonymous));
        assert_eq!(caller(configured, Some(&header("Bearer the-admin-token-of-this-node"))), Ok(Caller::Operator));
        assert_eq!(caller(configured, Some(&header("bearer  the-admin-token-of-this-node "))), Ok(Caller::Operator));
        assert_eq!(
            caller(configured, Some(&header("Bearer the-admin-token-of-another"))),
            Err(AdminRefusal::TokenMismatch)
        );
        for malformed in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "the-admin-token-of-this-node", ""] {
            assert_eq!(
                caller(configured, Some(&header(malformed))),
                Err(AdminRefusal::Unauthenticated),
                "{malformed:?}"
            );
        }
        // A node without a token takes no token at all.
        assert_eq!(caller(None, Some(&header("Bearer anything-at-all-here"))), Err(AdminRefusal::TokenUnset));
        assert_eq!(caller(None, None), Ok(Caller::Anonymous));
        assert_eq!(anonymous_refusal(None), AdminRefusal::TokenUnset);
        assert_eq!(anonymous_refusal(configured), AdminRefusal::Unauthenticated);
    }

    #[test]
    fn t4_only_json_content_types_pass() {
        for json in
            ["application/json", "Application/JSON", "application/json; charset=utf-8", " application/json ;x=y"]
        {
            assert!(is_json(Some(&header(json))), "{json:?}");
        }
        for other in ["text/plain", "application/x-www-form-urlencoded", "application/jsonx", "multipart/form-data", ""]
        {
            assert!(!is_json(Some(&header(other))), "{other:?}");
        }
        assert!(!is_json(None));
    }
}
