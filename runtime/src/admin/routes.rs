//! The actix-web app of the admin port: which path takes which method, and
//! the checks a request passes before a node's [`NodeRoutes`] sees it.
//!
//! A POST under `/admin/` is checked in this order, each failure answered
//! and counted by [`AdminRefusal::respond`]: the caller's token
//! ([`auth::caller`]), the JSON content type, the body's size (by
//! `Content-Length` before reading, then while reading) and its arrival
//! within the request timeout. Only then does the node parse it.

use std::sync::Arc;
use std::time::Duration;

use actix_web::body::BoxBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, ContentType};
use actix_web::http::{Method, StatusCode};
use actix_web::{App, HttpRequest, HttpResponse, web};
use cohort_actors::{NodeMetrics, OPENMETRICS_CONTENT_TYPE};

use super::auth::{self, Caller};
use super::refusal::AdminRefusal;
use super::status::Audience;
use super::token::AdminToken;
use super::{AdminAnswer, BODY_MAX_BYTES, NodeRoutes};

/// What every handler of one listener shares.
pub(super) struct AdminState {
    /// The registry `/metrics` encodes.
    pub metrics: Arc<NodeMetrics>,
    /// The node's routes; `None` on the metrics listener.
    pub node: Option<Arc<dyn NodeRoutes>>,
    /// The token of operator commands; `None`: the node takes none.
    pub token: Option<AdminToken>,
    /// Time a POST's body has to arrive.
    pub request_timeout: Duration,
}

/// The app of one listener.
pub(super) fn app(
    state: web::Data<AdminState>,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<BoxBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .app_data(state)
        .service(web::resource("/metrics").route(web::get().to(metrics)).default_service(web::to(method_not_allowed)))
        .service(web::resource("/health").route(web::get().to(health)).default_service(web::to(method_not_allowed)))
        .service(web::resource("/status").route(web::get().to(status)).default_service(web::to(node_path_other)))
        .configure(super::console::configure)
        .default_service(web::to(fallback))
}

async fn metrics(state: web::Data<AdminState>) -> HttpResponse {
    HttpResponse::Ok().insert_header((header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)).body(state.metrics.encode())
}

async fn health() -> HttpResponse {
    HttpResponse::Ok().content_type(ContentType::plaintext()).body("ok\n")
}

async fn method_not_allowed(state: web::Data<AdminState>) -> HttpResponse {
    AdminRefusal::MethodNotAllowed.respond(&state.metrics)
}

async fn status(request: HttpRequest, state: web::Data<AdminState>) -> HttpResponse {
    let Some(node) = &state.node else { return AdminRefusal::NotFound.respond(&state.metrics) };
    let audience = match auth::caller(state.token.as_ref(), request.headers().get(header::AUTHORIZATION)) {
        Ok(Caller::Operator) => Audience::Operator,
        Ok(Caller::Anonymous) => Audience::Public,
        Err(refusal) => return refusal.respond(&state.metrics),
    };
    HttpResponse::Ok().json(node.status(audience))
}

/// Another method than GET on a path only a node's listener serves.
pub(super) async fn node_path_other(state: web::Data<AdminState>) -> HttpResponse {
    let refusal = if state.node.is_some() { AdminRefusal::MethodNotAllowed } else { AdminRefusal::NotFound };
    refusal.respond(&state.metrics)
}

/// Everything else: the operator endpoints under `/admin/` on a node's
/// listener, `404` otherwise.
async fn fallback(request: HttpRequest, payload: web::Payload, state: web::Data<AdminState>) -> HttpResponse {
    let Some(node) = state.node.clone().filter(|_| request.path().starts_with("/admin/")) else {
        return AdminRefusal::NotFound.respond(&state.metrics);
    };
    let body = if request.method() == Method::POST {
        match checked_body(&request, payload, &state).await {
            Ok(body) => body,
            Err(refusal) => return refusal.respond(&state.metrics),
        }
    } else {
        web::Bytes::new()
    };
    let answer = node.admin(request.method().as_str(), request.path(), &body).await;
    if let Some(refusal) = AdminRefusal::of_status(answer.status) {
        state.metrics.inc_refused(cohort_actors::Port::Admin, refusal.as_str());
    }
    if request.method() == Method::POST {
        // O1: every operator command, with its answer's status.
        let (path, status) = (request.path(), answer.status);
        tracing::info!(path, status, "operator command POST {path}: answered {status}");
    }
    respond(answer)
}

/// The body of a POST that passed every check of the module docs.
async fn checked_body(
    request: &HttpRequest,
    payload: web::Payload,
    state: &AdminState,
) -> Result<web::Bytes, AdminRefusal> {
    match auth::caller(state.token.as_ref(), request.headers().get(header::AUTHORIZATION))? {
        Caller::Operator => {}
        Caller::Anonymous => return Err(auth::anonymous_refusal(state.token.as_ref())),
    }
    if !auth::is_json(request.headers().get(header::CONTENT_TYPE)) {
        return Err(AdminRefusal::ContentType);
    }
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|value| value.to_str().ok());
    if declared.and_then(|length| length.trim().parse::<usize>().ok()).is_some_and(|length| length > BODY_MAX_BYTES) {
        return Err(AdminRefusal::BodyTooLarge);
    }
    match tokio::time::timeout(state.request_timeout, payload.to_bytes_limited(BODY_MAX_BYTES)).await {
        Err(_elapsed) => Err(AdminRefusal::BodyTimeout),
        Ok(Err(_limit_exceeded)) => Err(AdminRefusal::BodyTooLarge),
        Ok(Ok(Err(_payload_error))) => Err(AdminRefusal::BadRequest),
        Ok(Ok(Ok(body))) => Ok(body),
    }
}

/// An operator answer as an HTTP response.
fn respond(answer: AdminAnswer) -> HttpResponse {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let mut response = HttpResponse::build(status);
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response.insert_header((header::ALLOW, "POST"));
    }
    response.json(answer.body)
}
