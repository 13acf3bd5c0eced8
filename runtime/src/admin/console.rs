//! The web console (O6): one page on a node's admin listener that shows
//! what `/status` and `/metrics` already say, drawn for a person: nodes up
//! or down with their sessions, groups and primaries per node, the groups
//! without a primary, a placement map, view changes and writes as charts,
//! and the operations in flight.
//!
//! Why a page of static files and no endpoint of its own: the script in the
//! browser polls `GET /status` and `GET /metrics`, which anyone may read
//! (`auth.rs`), so the console can show nothing an anonymous caller could
//! not already fetch, and it never sends a token, so it sees the redacted
//! `/status`. It has no button that changes anything: operator commands
//! stay with `cohort admin` and the token. The charts are drawn from the
//! page's own samples of the counters (one per poll, the last few minutes
//! kept in the page), so the node holds no history for them.
//!
//! Why no build step: the HTML, CSS and plain JavaScript are compiled in
//! with `include_str!` and served as they are; the page loads nothing from
//! elsewhere (a node often has no internet). The `Content-Security-Policy`
//! allows scripts, styles and fetches from the node itself only, and no
//! inline script, so text from the cluster (kind names, addresses) that
//! reaches the page can never run; the script only ever puts such text in
//! the page as `textContent`.

use actix_web::http::header;
use actix_web::{HttpResponse, web};

use super::refusal::AdminRefusal;
use super::routes::{AdminState, node_path_other};

/// The page's paths and what each serves: (path, content type, body).
const FILES: [(&str, &str, &str); 3] = [
    ("/console", "text/html; charset=utf-8", include_str!("console/index.html")),
    ("/console/console.js", "text/javascript; charset=utf-8", include_str!("console/console.js")),
    ("/console/console.css", "text/css; charset=utf-8", include_str!("console/console.css")),
];

/// What the page may load and run: its own files and fetches to this
/// node, nothing inline, nothing from elsewhere, never inside a frame.
pub(super) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Add the console's routes to `config`: GET only, and only on a node's
/// listener (the metrics listener has no `/status` to show).
pub(super) fn configure(config: &mut web::ServiceConfig) {
    for (path, content_type, body) in FILES {
        config.service(
            web::resource(path)
                .route(web::get().to(move |state: web::Data<AdminState>| async move {
                    match state.node {
                        Some(_) => file(content_type, body),
                        None => AdminRefusal::NotFound.respond(&state.metrics),
                    }
                }))
                .default_service(web::to(node_path_other)),
        );
    }
}

/// One of the page's files with the headers that keep it to itself.
fn file(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, content_type))
        .insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script, without its comments.
    fn script() -> String {
        let (_, _, script) = FILES[1];
        script.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn o6_the_script_puts_data_in_the_page_as_text_only() {
        let script = script();
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            assert!(!script.contains(sink), "console.js uses {sink}: data must go in as textContent");
        }
    }

    #[test]
    fn o6_the_page_reads_public_endpoints_and_changes_nothing() {
        let script = script();
        assert!(script.contains("fetchText(\"/status\")") && script.contains("fetchText(\"/metrics\")"));
        for write in ["/admin/", "POST", "Authorization", "localStorage"] {
            assert!(!script.contains(write), "console.js mentions {write}");
        }
        for (path, _, body) in FILES {
            // The SVG namespace is a name, not an address that is loaded.
            let body = body.replace("\"http://www.w3.org/2000/svg\"", "");
            assert!(!body.contains("http://") && !body.contains("https://"), "{path} loads nothing from elsewhere");
        }
        let (_, _, html) = FILES[0];
        assert!(!html.contains("<script>") && !html.contains("style="), "no inline script or style (CSP)");
    }
}
