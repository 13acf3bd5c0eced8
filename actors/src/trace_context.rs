//! The bridge between `tracing` spans and the [`TraceContext`] of a frame
//! header, so that one client write is one trace across nodes.
//!
//! The sender puts the context of the span that sends a message in the
//! frame header ([`context_of`]); the receiver makes its handling span a
//! child of that remote span ([`set_remote_parent`]) before entering it. Both
//! are no-ops costing a branch when the span is disabled (no subscriber, or
//! a filter turned its level off) or when the OpenTelemetry layer is absent,
//! so the data path pays nothing for tracing that is off: no allocation, no
//! lock, and [`TraceContext::NONE`] in the header.
//!
//! The conversion lives here, in the runtime, because the core is sans-IO
//! and knows neither `tracing` nor OpenTelemetry.

use cohort_messages::TraceContext;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C context of `span`, for a frame header; [`TraceContext::NONE`] if
/// the span is disabled or not exported by OpenTelemetry.
pub(crate) fn context_of(span: &Span) -> TraceContext {
    if span.is_disabled() {
        return TraceContext::NONE;
    }
    let context = span.context();
    let span_ref = context.span();
    let span_context = span_ref.span_context();
    if !span_context.is_valid() {
        return TraceContext::NONE;
    }
    TraceContext {
        trace_id: span_context.trace_id().to_bytes(),
        span_id: span_context.span_id().to_bytes(),
        flags: span_context.trace_flags().to_u8(),
    }
}

/// The OpenTelemetry span context a header's [`TraceContext`] names, or
/// `None` for [`TraceContext::NONE`] or a context with a zero span id.
/// `remote` says whether the span lives in another process.
pub(crate) fn span_context_of(trace: TraceContext, remote: bool) -> Option<SpanContext> {
    if !trace.is_some() {
        return None;
    }
    let span_context = SpanContext::new(
        TraceId::from_bytes(trace.trace_id),
        SpanId::from_bytes(trace.span_id),
        TraceFlags::new(trace.flags),
        remote,
        TraceState::NONE,
    );
    span_context.is_valid().then_some(span_context)
}

/// Make `span` a child of the remote span `trace` names (from a frame
/// header). Must be called before `span` is entered or its context is read;
/// does nothing for [`TraceContext::NONE`] or a disabled span.
pub(crate) fn set_remote_parent(span: &Span, trace: TraceContext) {
    set_parent(span, trace, true);
}

/// Make `span` a child of a span of this process that `trace` names, which
/// may have closed already (a shard remembers the contexts of the ops in
/// flight, not their spans). Same rules as [`set_remote_parent`].
pub(crate) fn set_local_parent(span: &Span, trace: TraceContext) {
    set_parent(span, trace, false);
}

fn set_parent(span: &Span, trace: TraceContext, remote: bool) {
    if span.is_disabled() {
        return;
    }
    if let Some(parent) = span_context_of(trace, remote) {
        // Fails only if the layer is absent or the span already started;
        // either way the span stays a root, which is what untraced means.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
}

/// Link `span` to the span `trace` names (a cause that is not its parent).
pub(crate) fn add_link(span: &Span, trace: TraceContext) {
    if span.is_disabled() {
        return;
    }
    if let Some(linked) = span_context_of(trace, true) {
        span.add_link(linked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_subscriber_everything_is_none() {
        let span = tracing::info_span!("untraced");
        assert_eq!(context_of(&span), TraceContext::NONE);
        // No panic and no effect on a disabled span.
        set_remote_parent(&span, TraceContext { trace_id: [1; 16], span_id: [2; 8], flags: 1 });
        add_link(&span, TraceContext { trace_id: [1; 16], span_id: [2; 8], flags: 1 });
    }

    #[test]
    fn a_header_context_converts_both_ways() {
        assert!(span_context_of(TraceContext::NONE, true).is_none());
        let zero_span = TraceContext { trace_id: [7; 16], span_id: [0; 8], flags: 1 };
        assert!(span_context_of(zero_span, true).is_none(), "a zero span id is invalid");
        let trace = TraceContext { trace_id: [7; 16], span_id: [9; 8], flags: 1 };
        let span_context = span_context_of(trace, true).expect("valid");
        assert!(!span_context_of(trace, false).expect("valid").is_remote());
        assert!(span_context.is_remote());
        assert!(span_context.is_sampled());
        assert_eq!(span_context.trace_id().to_bytes(), [7; 16]);
        assert_eq!(span_context.span_id().to_bytes(), [9; 8]);
    }
}
