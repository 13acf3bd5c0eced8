//! Every way the admin port refuses a request, with its HTTP status, its
//! `reason` label of `cohort_refusals_total{port="admin"}` (T5) and the
//! JSON error the caller gets.
//!
//! Why one enum: a refusal is counted where it is answered, so a reason
//! cannot be answered without being counted, and the docs' table of
//! reasons (docs/metrics.md) is this list.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header;
use cohort_actors::{NodeMetrics, Port};

use super::answers::{AdminReply, Advice};

/// Why the admin port refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum AdminRefusal {
    /// A mutating call without `Authorization: Bearer <token>` (`401`).
    Unauthenticated,
    /// A bearer token that is not the node's (`401`).
    TokenMismatch,
    /// A mutating call, or a token, sent to a node that has no admin token
    /// configured: it takes no operator command at all (`403`).
    TokenUnset,
    /// A POST whose `Content-Type` is not `application/json` (`415`).
    ContentType,
    /// A body larger than the port's bound (`413`).
    BodyTooLarge,
    /// A body not received within the request timeout (`408`).
    BodyTimeout,
    /// A body or field the node cannot use (`400`).
    BadRequest,
    /// No such path (`404`).
    NotFound,
    /// A method the path does not take (`405`).
    MethodNotAllowed,
}

impl AdminRefusal {
    /// Every reason; each is exported from the start, at zero.
    pub(super) const ALL: [AdminRefusal; 9] = [
        AdminRefusal::Unauthenticated,
        AdminRefusal::TokenMismatch,
        AdminRefusal::TokenUnset,
        AdminRefusal::ContentType,
        AdminRefusal::BodyTooLarge,
        AdminRefusal::BodyTimeout,
        AdminRefusal::BadRequest,
        AdminRefusal::NotFound,
        AdminRefusal::MethodNotAllowed,
    ];

    /// The `reason` label value, also the `result` field of the answer.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            AdminRefusal::Unauthenticated => "unauthenticated",
            AdminRefusal::TokenMismatch => "token_mismatch",
            AdminRefusal::TokenUnset => "token_unset",
            AdminRefusal::ContentType => "content_type",
            AdminRefusal::BodyTooLarge => "body_too_large",
            AdminRefusal::BodyTimeout => "body_timeout",
            AdminRefusal::BadRequest => "bad_request",
            AdminRefusal::NotFound => "not_found",
            AdminRefusal::MethodNotAllowed => "method_not_allowed",
        }
    }

    /// The HTTP status it is answered with.
    pub(super) fn status(self) -> StatusCode {
        match self {
            AdminRefusal::Unauthenticated | AdminRefusal::TokenMismatch => StatusCode::UNAUTHORIZED,
            AdminRefusal::TokenUnset => StatusCode::FORBIDDEN,
            AdminRefusal::ContentType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AdminRefusal::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            AdminRefusal::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            AdminRefusal::BadRequest => StatusCode::BAD_REQUEST,
            AdminRefusal::NotFound => StatusCode::NOT_FOUND,
            AdminRefusal::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    /// The refusal an operator answer with `status` stands for, if any
    /// (the operator endpoints check paths, methods and fields themselves).
    pub(super) fn of_status(status: u16) -> Option<AdminRefusal> {
        match status {
            400 => Some(AdminRefusal::BadRequest),
            404 => Some(AdminRefusal::NotFound),
            405 => Some(AdminRefusal::MethodNotAllowed),
            _ => None,
        }
    }

    /// What the caller should do about it.
    fn advice(self) -> &'static str {
        match self {
            AdminRefusal::Unauthenticated => {
                "send Authorization: Bearer <token> ([admin] token of the node; `cohort admin --token` or COHORT_ADMIN_TOKEN)"
            }
            AdminRefusal::TokenMismatch => "the bearer token is not this node's [admin] token",
            AdminRefusal::TokenUnset => {
                "this node has no admin token, so it takes no operator command: set [admin] token or token_file and restart it"
            }
            AdminRefusal::ContentType => "send the body as Content-Type: application/json",
            AdminRefusal::BodyTooLarge => "the body is larger than the admin port takes",
            AdminRefusal::BodyTimeout => "the body did not arrive within the request timeout",
            AdminRefusal::BadRequest => "the request could not be used",
            AdminRefusal::NotFound => "no such path",
            AdminRefusal::MethodNotAllowed => "this path does not take that method",
        }
    }

    /// The JSON answer: `{"result": reason, "error": what to do}`.
    pub(crate) fn reply(self) -> AdminReply {
        let advice = Advice::new(self.advice());
        match self {
            AdminRefusal::Unauthenticated => AdminReply::Unauthenticated(advice),
            AdminRefusal::TokenMismatch => AdminReply::TokenMismatch(advice),
            AdminRefusal::TokenUnset => AdminReply::TokenUnset(advice),
            AdminRefusal::ContentType => AdminReply::ContentType(advice),
            AdminRefusal::BodyTooLarge => AdminReply::BodyTooLarge(advice),
            AdminRefusal::BodyTimeout => AdminReply::BodyTimeout(advice),
            AdminRefusal::BadRequest => AdminReply::BadRequest { field: None, error: advice.error },
            AdminRefusal::NotFound => AdminReply::NotFound(advice),
            AdminRefusal::MethodNotAllowed => AdminReply::MethodNotAllowed(advice),
        }
    }

    /// Log the refusal (O1): a caller without the right token is a warning,
    /// once per window and reason with a count of the rest; a wrong path,
    /// method or body is the caller's own mistake, at `debug`.
    fn log(self) {
        let reason = self.as_str();
        match self {
            AdminRefusal::Unauthenticated | AdminRefusal::TokenMismatch | AdminRefusal::TokenUnset => {
                if cohort_actors::admit_repeated_warning("admin command refused", &reason) {
                    tracing::warn!(reason, "the admin port refused a request: {reason}");
                }
            }
            _ => tracing::debug!(reason, "the admin port refused a request: {reason}"),
        }
    }

    /// Count the refusal and answer it with its JSON error ([`AdminRefusal::reply`]).
    pub(super) fn respond(self, metrics: &NodeMetrics) -> HttpResponse {
        metrics.inc_refused(Port::Admin, self.as_str());
        self.log();
        let mut response = HttpResponse::build(self.status());
        match self {
            AdminRefusal::Unauthenticated | AdminRefusal::TokenMismatch => {
                response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
            }
            AdminRefusal::MethodNotAllowed => {
                response.insert_header((header::ALLOW, "GET"));
            }
            _ => {}
        }
        response.json(self.reply())
    }
}

/// Create every reason's series, at zero, so that each is exported before
/// its first refusal.
pub(super) fn export_at_zero(metrics: &NodeMetrics) {
    for refusal in AdminRefusal::ALL {
        let _count = metrics.refused(Port::Admin, refusal.as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t4_every_refusal_is_a_4xx_with_a_distinct_reason() {
        let reasons: std::collections::BTreeSet<&str> = AdminRefusal::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(reasons.len(), AdminRefusal::ALL.len());
        for refusal in AdminRefusal::ALL {
            assert!(refusal.status().is_client_error(), "{refusal:?}");
        }
        assert_eq!(AdminRefusal::of_status(409), None, "a metadata refusal is an answer, not a port refusal");
    }

    #[test]
    fn t4_every_refusal_answers_its_reason_as_result() {
        for refusal in AdminRefusal::ALL {
            let json = serde_json::to_value(refusal.reply()).unwrap_or_default();
            assert_eq!(json["result"], refusal.as_str(), "{json}");
            assert!(json["error"].as_str().is_some_and(|error| !error.is_empty()), "{json}");
        }
    }

    #[test]
    fn t4_a_refusal_is_counted_where_it_is_answered() {
        let metrics = NodeMetrics::new();
        export_at_zero(&metrics);
        let text = metrics.encode();
        assert!(text.contains("cohort_refusals_total{port=\"admin\",reason=\"unauthenticated\"} 0"), "{text}");
        let response = AdminRefusal::Unauthenticated.respond(&metrics);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(metrics.refused(Port::Admin, "unauthenticated"), 1);
    }
}
