//! Exporting the node's spans over OTLP, for Jaeger or an OpenTelemetry
//! Collector (see `docs/tracing.md`).
//!
//! Export is a process-wide choice: a `tracing` subscriber is global, so a
//! host that embeds several nodes in one process installs one export for all
//! of them (every span names its node in the `cohort.node` attribute).
//! [`init_tracing`] installs a subscriber with cohort's export as its only
//! layer; a host with a subscriber of its own adds [`otlp_layer`] to it.
//! Either way the host keeps the returned [`TracingGuard`] and calls
//! [`TracingGuard::shutdown`] on exit, which sends the last batch.
//!
//! Choices, each forced by what was seen when this was built:
//! - **HTTP/protobuf with the blocking reqwest client.** The SDK's batch
//!   processor runs the export on a thread of its own, so it never touches
//!   actix's current-thread runtimes; a tonic (gRPC) exporter built inside
//!   actix deadlocks on flush and loses the last batch.
//! - **The endpoint is used verbatim** when it comes from the config, so it
//!   must include `/v1/traces` (the config check refuses one without a path).
//!   From the standard environment variable `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   the exporter appends `/v1/traces` itself.
//! - **The exporter's own spans are filtered out** (`h2`, `hyper`, `reqwest`,
//!   `opentelemetry*`, `tower`): exporting them would trace every export,
//!   whose export is traced in turn.
//! - **Shutdown is explicit.** Dropping a provider without `shutdown` may
//!   lose the spans still queued; the guard shuts down on drop as a last
//!   resort, but a caller that wants to know whether the flush worked calls
//!   [`TracingGuard::shutdown`].

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;

use crate::config::TelemetryConfig;

/// The standard variable naming the OTLP base URL (`/v1/traces` is appended).
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The standard variable naming the traces URL itself (used verbatim).
pub const TRACES_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";

/// Targets whose spans are never exported: the exporter's HTTP stack and the
/// SDK itself (a prefix matches every crate that starts with it, so
/// `opentelemetry` covers `opentelemetry_sdk` and `opentelemetry_otlp`).
pub(crate) const EXPORTER_TARGETS: [&str; 5] = ["h2", "hyper", "reqwest", "opentelemetry", "tower"];

/// Why trace export could not start or stop.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    /// The `[telemetry]` table breaks a rule; the message names the key.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The OTLP exporter could not be built (a bad endpoint in the environment, for example).
    #[error("building the OTLP exporter for {endpoint}: {reason}")]
    Exporter {
        /// The endpoint, or the environment variable that named it.
        endpoint: String,
        /// The exporter's error.
        reason: String,
    },
    /// [`init_tracing`] found a global subscriber already installed; add
    /// [`otlp_layer`] to that subscriber instead.
    #[error("a global tracing subscriber is already installed; add cohort_runtime::otlp::otlp_layer to it")]
    AlreadyInstalled,
    /// Flushing or shutting down the exporter failed; spans may be lost.
    #[error("flushing spans: {0}")]
    Flush(String),
}

/// Where spans go: `telemetry.otlp_endpoint`, else the standard
/// environment variables ([`TracingGuard::endpoint`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportEndpoint {
    /// `telemetry.otlp_endpoint`, used verbatim.
    Config(String),
    /// One of the standard environment variables, read by the exporter.
    Environment(&'static str),
}

impl std::fmt::Display for ExportEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportEndpoint::Config(url) => write!(f, "{url}"),
            ExportEndpoint::Environment(variable) => write!(f, "${variable}"),
        }
    }
}

/// Where `config` sends spans: the file's endpoint first, then the standard
/// environment variables; `None` means export is off.
pub(crate) fn export_endpoint(config: &TelemetryConfig) -> Option<ExportEndpoint> {
    if let Some(url) = &config.otlp_endpoint {
        return Some(ExportEndpoint::Config(url.clone()));
    }
    let set = |variable: &str| std::env::var(variable).is_ok_and(|value| !value.trim().is_empty());
    [TRACES_ENDPOINT_ENV, ENDPOINT_ENV].into_iter().find(|variable| set(variable)).map(ExportEndpoint::Environment)
}

/// Keeps trace export running; [`TracingGuard::shutdown`] sends what is
/// queued and stops it. Dropping the guard shuts down too, ignoring errors.
#[derive(Debug)]
pub struct TracingGuard {
    provider: SdkTracerProvider,
    endpoint: ExportEndpoint,
    stopped: bool,
}

impl TracingGuard {
    /// Where spans go.
    pub fn endpoint(&self) -> &ExportEndpoint {
        &self.endpoint
    }

    /// Send every span that has ended so far, and wait for the answer.
    pub fn flush(&self) -> Result<(), TracingError> {
        self.provider.force_flush().map_err(|error| TracingError::Flush(error.to_string()))
    }

    /// Send what is queued and stop exporting. Call it outside the actix
    /// System (or after the nodes stopped): it blocks until the last batch
    /// was answered or the exporter's timeout passed.
    pub fn shutdown(mut self) -> Result<(), TracingError> {
        self.stopped = true;
        self.provider.shutdown().map_err(|error| TracingError::Flush(error.to_string()))
    }
}

impl Drop for TracingGuard {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.provider.shutdown();
        }
    }
}

/// A layer that exports spans at `config.otlp_level` and above, for a host
/// that composes its own subscriber; `None` if export is off (no
/// `telemetry.otlp_endpoint` and neither [`ENDPOINT_ENV`] nor
/// [`TRACES_ENDPOINT_ENV`] set). `instance` becomes the `service.instance.id`
/// resource attribute (`cohort node` passes its node id).
pub fn otlp_layer<S>(
    config: &TelemetryConfig,
    instance: Option<&str>,
) -> Result<Option<(impl Layer<S> + use<S>, TracingGuard)>, TracingError>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    config.validate()?;
    let Some(endpoint) = export_endpoint(config) else { return Ok(None) };
    let mut exporter =
        opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    if let ExportEndpoint::Config(url) = &endpoint {
        exporter = exporter.with_endpoint(url.clone());
    }
    let exporter = exporter
        .build()
        .map_err(|error| TracingError::Exporter { endpoint: endpoint.to_string(), reason: error.to_string() })?;
    let mut resource = Resource::builder().with_service_name(config.service_name.clone());
    if let Some(instance) = instance {
        resource = resource.with_attribute(KeyValue::new("service.instance.id", instance.to_owned()));
    }
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
    let tracer = provider.tracer("cohort");
    let filter = Targets::new()
        .with_default(LevelFilter::from_level(config.otlp_level.level()))
        .with_targets(EXPORTER_TARGETS.map(|target| (target, LevelFilter::OFF)));
    // Inactivity tracking would time every enter and exit of every span and
    // add two attributes nobody reads in a trace view.
    let layer = tracing_opentelemetry::layer().with_tracer(tracer).with_tracked_inactivity(false).with_filter(filter);
    Ok(Some((layer, TracingGuard { provider, endpoint, stopped: false })))
}

/// Install a global subscriber that exports spans as `config` says, and
/// return its guard; `Ok(None)` if export is off. Call once per process,
/// before the nodes start, and [`TracingGuard::shutdown`] after they stop.
pub fn init_tracing(config: &TelemetryConfig, instance: Option<&str>) -> Result<Option<TracingGuard>, TracingError> {
    let Some((layer, guard)) = otlp_layer(config, instance)? else { return Ok(None) };
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::set_global_default(subscriber).map_err(|_| TracingError::AlreadyInstalled)?;
    Ok(Some(guard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_wins_and_off_is_the_default() {
        let config = TelemetryConfig {
            otlp_endpoint: Some("http://127.0.0.1:4318/v1/traces".into()),
            ..TelemetryConfig::default()
        };
        assert_eq!(export_endpoint(&config), Some(ExportEndpoint::Config("http://127.0.0.1:4318/v1/traces".into())));
        // The environment decides the rest; this test does not set it, so
        // only check that an unset environment means off.
        if std::env::var(ENDPOINT_ENV).is_err() && std::env::var(TRACES_ENDPOINT_ENV).is_err() {
            assert_eq!(export_endpoint(&TelemetryConfig::default()), None);
            assert!(init_tracing(&TelemetryConfig::default(), None).expect("off is fine").is_none());
        }
    }

    #[test]
    fn a_bad_endpoint_is_refused_before_anything_starts() {
        let config = TelemetryConfig { otlp_endpoint: Some("http://host:4318".into()), ..TelemetryConfig::default() };
        let error = otlp_layer::<tracing_subscriber::Registry>(&config, None).err().expect("refused");
        assert!(error.to_string().contains("telemetry.otlp_endpoint"), "{error}");
    }
}
