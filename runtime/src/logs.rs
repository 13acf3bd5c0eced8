//! The node's log: `tracing` events written to stderr as text or JSON lines
//! (O1), beside the OTLP span export of [`crate::otlp`].
//!
//! What is logged, and at which level, is in `docs/operations.md#logs`.
//! Which events are written is a filter in `tracing-subscriber`'s
//! `EnvFilter` syntax (`info`, `warn,cohort_actors::peer_link=debug`), read
//! from [`LOG_ENV`] (`COHORT_LOG`), else [`RUST_LOG_ENV`] (`RUST_LOG`), else
//! the `[log] level` key: the environment wins, so an operator can turn a
//! module up for one run without editing the file. `[log] format` chooses
//! text (for people) or JSON (one object per line, for a log shipper).
//!
//! The filter is the log layer's own: span export keeps its own level
//! (`[telemetry] otlp_level`), so `COHORT_LOG=debug` does not export
//! heartbeat spans, nor does a quiet log stop spans. [`init_logs`] installs
//! both as the process's global subscriber; a host with a subscriber of its
//! own adds [`log_layer`] (and [`crate::otlp::otlp_layer`]) to it instead.

use tracing::Subscriber;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{ConfigError, LogFormat, LogSection};
use crate::otlp::{TracingError, TracingGuard};

/// cohort's own variable naming the log filter; it wins over [`RUST_LOG_ENV`].
pub const LOG_ENV: &str = "COHORT_LOG";
/// The conventional variable naming the log filter, read when [`LOG_ENV`] is unset.
pub const RUST_LOG_ENV: &str = "RUST_LOG";

/// Where the filter came from ([`LogSource::of`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogSource {
    /// [`LOG_ENV`] or [`RUST_LOG_ENV`], named, with its value.
    Environment(&'static str, String),
    /// The `[log] level` key.
    Config(String),
}

impl LogSource {
    /// The filter to use: `COHORT_LOG` if set and not blank, else
    /// `RUST_LOG`, else `log.level`.
    pub fn of(log: &LogSection) -> LogSource {
        Self::from_lookup(log, |variable| std::env::var(variable).ok())
    }

    fn from_lookup(log: &LogSection, lookup: impl Fn(&str) -> Option<String>) -> LogSource {
        for variable in [LOG_ENV, RUST_LOG_ENV] {
            if let Some(value) = lookup(variable).filter(|value| !value.trim().is_empty()) {
                return LogSource::Environment(variable, value);
            }
        }
        LogSource::Config(log.level.clone())
    }

    /// The filter's text.
    pub fn filter(&self) -> &str {
        match self {
            LogSource::Environment(_, value) | LogSource::Config(value) => value,
        }
    }

    /// Where it came from, as an error names it: `$COHORT_LOG` or `log.level`.
    fn name(&self) -> String {
        match self {
            LogSource::Environment(variable, _) => format!("${variable}"),
            LogSource::Config(_) => "log.level".into(),
        }
    }

    /// The parsed filter, or an error naming where the text came from.
    fn env_filter(&self) -> Result<EnvFilter, ConfigError> {
        match self {
            LogSource::Config(text) => {
                parse_level(text).map_err(|reason| ConfigError::Rule { key: "log.level", rule: reason })
            }
            LogSource::Environment(_, text) => {
                parse_filter(text).map_err(|reason| ConfigError::Parse(format!("{}: {reason}", self.name())))
            }
        }
    }
}

const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];

/// Parse a filter in `EnvFilter` syntax; the error says what is wrong and
/// what would do.
pub(crate) fn parse_filter(text: &str) -> Result<EnvFilter, String> {
    if text.trim().is_empty() {
        return Err("must not be empty; use a level such as \"info\" (or \"off\")".into());
    }
    EnvFilter::builder().parse(text).map_err(|error| {
        format!(
            "{text:?} is not a log filter ({error}); use a level (error, warn, info, debug, trace, off) or \
             directives such as \"info,cohort_actors::peer_link=debug\""
        )
    })
}

/// `[log] level`: [`parse_filter`], where each directive is a level or
/// names one (`target=level`). `EnvFilter` reads a bare word as a target
/// with every level, so a typo such as `level = "wran"` would turn the log
/// on for a target that does not exist, and every other line off.
pub(crate) fn parse_level(text: &str) -> Result<EnvFilter, String> {
    for directive in text.split(',').map(str::trim).filter(|directive| !directive.is_empty()) {
        let level = directive.rsplit_once('=').map_or(directive, |(_, level)| level);
        if !LEVELS.iter().any(|known| known.eq_ignore_ascii_case(level.trim())) {
            return Err(format!(
                "{directive:?} names no level; use a level (error, warn, info, debug, trace, off) or directives \
                 such as \"info,cohort_actors::peer_link=debug\""
            ));
        }
    }
    parse_filter(text)
}

/// A layer that writes events to stderr as `log` says (format, and the
/// filter of [`LogSource::of`]), for a host that composes its own
/// subscriber. Errors name the key or the variable that holds a bad filter.
pub fn log_layer<S>(log: &LogSection) -> Result<Box<dyn Layer<S> + Send + Sync>, ConfigError>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let filter = LogSource::of(log).env_filter()?;
    let ansi = matches!(log.format, LogFormat::Text) && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    Ok(match log.format {
        LogFormat::Text => layer.with_filter(filter).boxed(),
        // Fields at the top level, beside level, target and timestamp:
        // what a log shipper indexes without a nested "fields" object.
        LogFormat::Json => layer.json().flatten_event(true).with_filter(filter).boxed(),
    })
}

/// Install the process's global subscriber: the log as `log` says, and span
/// export as `telemetry` says (its guard, if export is on). Call once per
/// process, before the nodes start; [`TracingGuard::shutdown`] after they
/// stop sends the last spans.
pub fn init_logs(
    log: &LogSection,
    telemetry: &crate::config::TelemetryConfig,
    instance: Option<&str>,
) -> Result<Option<TracingGuard>, TracingError> {
    let subscriber = tracing_subscriber::registry().with(log_layer(log)?);
    let (otlp, guard) = match crate::otlp::otlp_layer(telemetry, instance)? {
        Some((layer, guard)) => (Some(layer), Some(guard)),
        None => (None, None),
    };
    tracing::subscriber::set_global_default(subscriber.with(otlp)).map_err(|_| TracingError::AlreadyInstalled)?;
    Ok(guard)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(level: &str) -> LogSection {
        LogSection { level: level.into(), ..LogSection::default() }
    }

    #[test]
    fn o1_cohort_log_wins_over_rust_log_which_wins_over_the_file() {
        let both = |variable: &str| match variable {
            LOG_ENV => Some("debug".to_string()),
            _ => Some("trace".to_string()),
        };
        assert_eq!(LogSource::from_lookup(&section("warn"), both), LogSource::Environment(LOG_ENV, "debug".into()));
        let rust_only = |variable: &str| (variable == RUST_LOG_ENV).then(|| "trace".to_string());
        let expected = LogSource::Environment(RUST_LOG_ENV, "trace".into());
        assert_eq!(LogSource::from_lookup(&section("warn"), rust_only), expected);
        let blank = |_: &str| Some("  ".to_string());
        assert_eq!(LogSource::from_lookup(&section("warn"), blank), LogSource::Config("warn".into()));
        assert_eq!(LogSource::from_lookup(&section("warn"), |_| None).filter(), "warn");
    }

    #[test]
    fn o1_a_bad_filter_names_where_it_came_from() {
        let error = LogSource::Config("loud".into()).env_filter().expect_err("not a level");
        assert!(matches!(&error, ConfigError::Rule { key: "log.level", .. }), "{error}");
        assert!(error.to_string().contains("names no level"), "{error}");
        let error = LogSource::Environment(LOG_ENV, "cohort=loud".into()).env_filter().expect_err("not a level");
        assert!(error.to_string().contains("$COHORT_LOG"), "{error}");
        assert!(parse_level("info,cohort_actors::peer_link=debug").is_ok());
        assert!(parse_level("WARN").is_ok());
        assert!(parse_level("cohort_actors").is_err(), "a bare target is a typo in the file");
        assert!(parse_filter("cohort_actors").is_ok(), "and a target's every level in the environment");
    }
}
