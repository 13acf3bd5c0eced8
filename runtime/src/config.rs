//! Node configuration: TOML with documented defaults, validated at boot.
//!
//! The defaults live twice, on purpose: in `config/default.toml` (what an
//! operator reads) and in code (so a config file need not declare anything).
//! A test checks that the two agree. Every validation error names the key and
//! the rule it breaks (R9, R23).

use std::time::Duration;

use cohort_core::TimingConfig;
use serde::Deserialize;

/// The shipped defaults file, for docs and tests.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// A whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Cluster-wide protocol timing (the `[cluster]` table).
    pub cluster: ClusterConfig,
    /// This node (the `[node]` table); required by `cohort node`.
    pub node: Option<NodeSection>,
    /// Group placement (the `[groups]` table).
    pub groups: GroupsSection,
    /// Trace export (the `[telemetry]` table); off by default.
    pub telemetry: TelemetryConfig,
    /// The node's log on stderr (the `[log]` table; O1).
    pub log: LogSection,
    /// The node's session with the metadata group (the `[session]` table; S1, S3).
    pub session: SessionConfig,
    /// How much a group keeps in flight and queued (the `[limits]` table).
    pub limits: LimitsSection,
    /// How peer links notice dead connections and redial (the `[links]` table; F1).
    pub links: LinksSection,
    /// Certificates of peer links and the client port (the `[tls]` table; T1, T2).
    pub tls: TlsSection,
    /// The admin port's token, metrics listener and limits (the `[admin]` table; T4).
    pub admin: AdminSection,
    /// The client port's bounds (the `[client]` table; T5).
    pub client: ClientSection,
    /// How primaries are spread over the nodes (the `[balance]` table; C5).
    pub balance: BalanceSection,
}

/// The `[balance]` table: the metadata primary spreads group primaries over
/// the live nodes by directed view changes (C5). Cluster-wide: whichever node
/// is metadata primary applies its own values.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BalanceSection {
    /// Balance at all (default true).
    pub enabled: bool,
    /// The most primary transfers the balancer asks for per second (default
    /// 500: a restarted node of a 100,000-group cluster gets its third back
    /// in about 70 s; at 50 it took 11 minutes). Each one is a short write
    /// outage of its group (one view change).
    pub transfers_max_per_second: u32,
}

impl Default for BalanceSection {
    fn default() -> Self {
        BalanceSection { enabled: true, transfers_max_per_second: 500 }
    }
}

impl BalanceSection {
    /// The balancer's budget per tick of `tick`: `None` when off, else at
    /// least 1 (a rate below one per tick rounds up to one per tick).
    pub(crate) fn transfers_per_tick(&self, tick: Duration) -> Option<u32> {
        if !self.enabled {
            return None;
        }
        let per_tick = u128::from(self.transfers_max_per_second) * tick.as_millis() / 1000;
        Some(u32::try_from(per_tick).unwrap_or(u32::MAX).max(1))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.enabled && self.transfers_max_per_second == 0 {
            return Err(rule(
                "balance.transfers_max_per_second",
                "must be at least 1 with balance.enabled = true (set enabled = false to turn balancing off)".into(),
            ));
        }
        Ok(())
    }
}

pub use crate::admin::config::AdminSection;

/// The `[tls]` table: the node's certificates from `cohort certs`, or an
/// explicit choice of plaintext (T1, T2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSection {
    /// The cluster CA's certificate.
    pub ca: Option<std::path::PathBuf>,
    /// This node's certificate.
    pub cert: Option<std::path::PathBuf>,
    /// This node's private key.
    pub key: Option<std::path::PathBuf>,
    /// Plaintext peers and clients; the node logs a warning at start.
    pub insecure: bool,
}

impl TlsSection {
    /// The choice this table makes (checked by [`Config::from_toml`]).
    pub(crate) fn security(&self) -> crate::node::Security {
        match (&self.ca, &self.cert, &self.key) {
            _ if self.insecure => crate::node::Security::Insecure,
            (Some(ca), Some(cert), Some(key)) => crate::node::Security::Tls(cohort_actors::TlsFiles {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => crate::node::Security::Unset,
        }
    }

    fn validate(&self, has_node: bool) -> Result<(), ConfigError> {
        let files = [("tls.ca", &self.ca), ("tls.cert", &self.cert), ("tls.key", &self.key)];
        if self.insecure {
            if let Some((key, _)) = files.iter().find(|(_, path)| path.is_some()) {
                return Err(rule(key, "is set together with tls.insecure = true: choose TLS or plaintext".into()));
            }
            return Ok(());
        }
        if !has_node {
            return Ok(());
        }
        if let Some((key, _)) = files.iter().find(|(_, path)| path.is_none()) {
            return Err(rule(
                key,
                "is missing: give ca, cert and key (`cohort certs init` and `cohort certs node` make them), or set \
                 insecure = true for plaintext"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// The `[links]` table: how a peer link notices a connection that stopped
/// making progress, and how fast it dials again (F1). Local to each node.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinksSection {
    /// A connection with no progress this long is closed and redialed.
    #[serde(with = "duration")]
    pub stall_timeout: Duration,
    /// How long one dial may take.
    #[serde(with = "duration")]
    pub connect_timeout: Duration,
    /// The longest wait between two dials.
    #[serde(with = "duration")]
    pub redial_backoff_max: Duration,
    /// Unsent bytes the kernel may hold per connection (`TCP_NOTSENT_LOWAT`).
    pub socket_unsent_max_bytes: u32,
}

impl Default for LinksSection {
    fn default() -> Self {
        let timing = cohort_actors::LinkTiming::default();
        LinksSection {
            stall_timeout: timing.stall_timeout,
            connect_timeout: timing.connect_timeout,
            redial_backoff_max: timing.redial_backoff_max,
            socket_unsent_max_bytes: timing.socket_unsent_max_bytes,
        }
    }
}

impl LinksSection {
    /// The links' timing.
    pub(crate) fn timing(&self) -> cohort_actors::LinkTiming {
        cohort_actors::LinkTiming {
            stall_timeout: self.stall_timeout,
            connect_timeout: self.connect_timeout,
            redial_backoff_max: self.redial_backoff_max,
            socket_unsent_max_bytes: self.socket_unsent_max_bytes,
        }
    }

    /// A healed link must be back before backups give up on their primary:
    /// a stall is noticed, and a dial retried, within the busy heartbeat
    /// timeout.
    fn validate(&self, cluster: &ClusterConfig) -> Result<(), ConfigError> {
        let heartbeat = cluster.commit_heartbeat_timeout;
        if self.stall_timeout < Duration::from_millis(500) || self.stall_timeout > heartbeat {
            return Err(rule(
                "links.stall_timeout",
                format!(
                    "must be at least 500ms and at most cluster.commit_heartbeat_timeout ({}); {} given",
                    ms(heartbeat),
                    ms(self.stall_timeout)
                ),
            ));
        }
        if self.connect_timeout.is_zero() || self.connect_timeout + self.redial_backoff_max > heartbeat {
            return Err(rule(
                "links.connect_timeout",
                format!(
                    "must be above 0, and with links.redial_backoff_max ({}) at most cluster.commit_heartbeat_timeout ({}); {} given",
                    ms(self.redial_backoff_max),
                    ms(heartbeat),
                    ms(self.connect_timeout)
                ),
            ));
        }
        if self.redial_backoff_max < cohort_actors::REDIAL_BACKOFF_MIN {
            return Err(rule(
                "links.redial_backoff_max",
                format!(
                    "must be at least {} ({} given)",
                    ms(cohort_actors::REDIAL_BACKOFF_MIN),
                    ms(self.redial_backoff_max)
                ),
            ));
        }
        if self.socket_unsent_max_bytes < 4096 {
            return Err(rule(
                "links.socket_unsent_max_bytes",
                format!("must be at least 4096 ({} given)", self.socket_unsent_max_bytes),
            ));
        }
        Ok(())
    }
}

/// The `[client]` table: what one client, or all of them, can hold of the
/// client port (T5).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientSection {
    /// Connections open at once; more are closed at accept.
    pub connections_max: usize,
    /// Time a new connection has for TLS and its Handshake.
    #[serde(with = "duration")]
    pub handshake_timeout: Duration,
    /// A connection that sends nothing this long is closed.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// Requests one connection may have in flight; more are answered Busy.
    pub in_flight_max: usize,
    /// How long the port waits for a shard's answer before replying Busy.
    #[serde(with = "duration")]
    pub answer_timeout: Duration,
    /// A write to a client that takes longer than this closes the connection.
    #[serde(with = "duration")]
    pub write_timeout: Duration,
    /// H4: bytes of answers one connection may hold unwritten; past them the
    /// node stops reading its requests until the client reads.
    pub answer_bytes_max: usize,
    /// H4: bytes of answers every connection together may hold unwritten.
    pub answer_bytes_node_max: usize,
}

impl Default for ClientSection {
    fn default() -> Self {
        let limits = crate::client_port::ClientPortLimits::default();
        ClientSection {
            connections_max: limits.connections_max,
            handshake_timeout: limits.handshake_timeout,
            idle_timeout: limits.idle_timeout,
            in_flight_max: limits.in_flight_max,
            answer_timeout: limits.answer_timeout,
            write_timeout: limits.write_timeout,
            answer_bytes_max: limits.answer_bytes_max,
            answer_bytes_node_max: limits.answer_bytes_node_max,
        }
    }
}

impl ClientSection {
    /// The port's limits.
    pub(crate) fn limits(&self) -> crate::client_port::ClientPortLimits {
        crate::client_port::ClientPortLimits {
            connections_max: self.connections_max,
            handshake_timeout: self.handshake_timeout,
            idle_timeout: self.idle_timeout,
            in_flight_max: self.in_flight_max,
            answer_timeout: self.answer_timeout,
            write_timeout: self.write_timeout,
            answer_bytes_max: self.answer_bytes_max,
            answer_bytes_node_max: self.answer_bytes_node_max,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in
            [("client.connections_max", self.connections_max), ("client.in_flight_max", self.in_flight_max)]
        {
            if value == 0 {
                return Err(rule(key, "must be at least 1".into()));
            }
        }
        for (key, value) in [
            ("client.handshake_timeout", self.handshake_timeout),
            ("client.idle_timeout", self.idle_timeout),
            ("client.answer_timeout", self.answer_timeout),
            ("client.write_timeout", self.write_timeout),
        ] {
            if value.is_zero() {
                return Err(rule(key, "must be longer than 0ms".into()));
            }
        }
        self.validate_answer_budgets()
    }

    /// H4: a connection's budget holds a few answers, the node's holds at
    /// least one connection's, and both fit a semaphore.
    fn validate_answer_budgets(&self) -> Result<(), ConfigError> {
        use crate::client_port::{ANSWER_BUDGET_MAX_BYTES, ANSWER_BUDGET_MIN_BYTES};
        let (connection, node) = (self.answer_bytes_max, self.answer_bytes_node_max);
        if !(ANSWER_BUDGET_MIN_BYTES..=ANSWER_BUDGET_MAX_BYTES).contains(&connection) {
            return Err(rule(
                "client.answer_bytes_max",
                format!(
                    "must be at least {ANSWER_BUDGET_MIN_BYTES} (64 KiB) and at most {ANSWER_BUDGET_MAX_BYTES} (4 GiB less a byte); {connection} given"
                ),
            ));
        }
        if !(connection..=ANSWER_BUDGET_MAX_BYTES).contains(&node) {
            return Err(rule(
                "client.answer_bytes_node_max",
                format!(
                    "must be at least client.answer_bytes_max ({connection}) and at most {ANSWER_BUDGET_MAX_BYTES} (4 GiB less a byte); {node} given"
                ),
            ));
        }
        Ok(())
    }
}

/// The `[limits]` table: how much each group's primary keeps in flight
/// and queued. Larger values let one busy group fill a flush (K3: many ops,
/// one sync); the pipeline also bounds the log suffix a view change carries.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsSection {
    /// Uncommitted ops a primary keeps in flight per group.
    pub pipeline_max_ops: u64,
    /// Requests a primary queues per group while its pipeline is full;
    /// beyond it a request is answered `Busy` (retryable).
    pub request_queue_max: usize,
    /// T5: how far above its view one peer message may take a replica that
    /// follows a live primary (`CoreConfig::view_jump_max_views`).
    pub view_jump_max_views: u32,
    /// T5: the largest snapshot a state transfer may declare
    /// (`CoreConfig::state_transfer_size_max_bytes`).
    pub state_transfer_size_max_bytes: u64,
    /// D1: bytes of operations a shard's primaries keep for members that
    /// lag (`CoreConfig::backlog_size_max_bytes`); 0 keeps none.
    pub backlog_size_max_bytes: u64,
}

impl Default for LimitsSection {
    fn default() -> Self {
        let core = cohort_core::CoreConfig::default();
        LimitsSection {
            pipeline_max_ops: core.pipeline_max_ops,
            request_queue_max: core.request_queue_max,
            view_jump_max_views: core.view_jump_max_views,
            state_transfer_size_max_bytes: core.state_transfer_size_max_bytes,
            backlog_size_max_bytes: core.backlog_size_max_bytes,
        }
    }
}

impl LimitsSection {
    /// The core's configuration with these limits.
    pub(crate) fn apply(&self, core: cohort_core::CoreConfig) -> cohort_core::CoreConfig {
        cohort_core::CoreConfig {
            pipeline_max_ops: self.pipeline_max_ops,
            request_queue_max: self.request_queue_max,
            view_jump_max_views: self.view_jump_max_views,
            state_transfer_size_max_bytes: self.state_transfer_size_max_bytes,
            backlog_size_max_bytes: self.backlog_size_max_bytes,
            ..core
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.apply(cohort_core::CoreConfig::default()).validate().map_err(|error| ConfigError::Rule {
            key: match error.field {
                "pipeline_max_ops" | "snapshot_interval_ops" => "limits.pipeline_max_ops",
                "view_jump_max_views" => "limits.view_jump_max_views",
                "state_transfer_size_max_bytes" => "limits.state_transfer_size_max_bytes",
                _ => "limits.request_queue_max",
            },
            rule: error.rule,
        })
    }
}

/// The `[session]` table: the node's session with the metadata group.
///
/// Every node keeps a session open by sending keepalives to the metadata
/// group's members; the metadata primary expires a session that stayed
/// silent for `session_timeout_ms` (S1), and the node then follows
/// `session_expired_policy` (S3). Durations are whole numbers of
/// `cluster.tick`, because the sans-IO agent counts in ticks. All nodes of a
/// cluster should use the same values: the metadata primary applies its own
/// timeout to every node's session.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// Silence after which the metadata primary expires a session (default
    /// 10000 ms). More than twice the keepalive interval.
    pub session_timeout_ms: u64,
    /// How often a node sends a keepalive (default 1000 ms).
    pub session_keepalive_interval_ms: u64,
    /// What a node does when its session expired: `"reconnect"` (default)
    /// opens a new session and re-owns its groups; `"shutdown"` stops the node.
    pub session_expired_policy: ExpiredPolicyName,
    /// With `reconnect`: open attempts in a row before the node stops (default 3).
    pub session_reconnect_attempts: u32,
    /// With `reconnect`: the wait after the first failed attempt, doubling
    /// after each further one (default 20000 ms; F2). With the other
    /// defaults the attempts span a metadata outage of 66 s.
    pub session_reconnect_backoff_ms: u64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            session_timeout_ms: 10_000,
            session_keepalive_interval_ms: 1_000,
            session_expired_policy: ExpiredPolicyName::Reconnect,
            session_reconnect_attempts: 3,
            session_reconnect_backoff_ms: 20_000,
        }
    }
}

/// `session_expired_policy` as written in the file (S3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpiredPolicyName {
    /// Stop the node.
    Shutdown,
    /// Open a new session, up to `session_reconnect_attempts` times in a row.
    Reconnect,
}

/// The `[session]` durations in ticks, checked.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionTicks {
    /// `session_timeout_ms` in ticks.
    pub(crate) timeout_ticks: u64,
    /// `session_keepalive_interval_ms` in ticks.
    pub(crate) keepalive_interval_ticks: u64,
    /// The policy with its attempts.
    pub(crate) policy: cohort_core::metadata::ExpiredPolicy,
    /// `session_reconnect_backoff_ms` in ticks.
    pub(crate) reconnect_backoff_ticks: u64,
}

impl SessionConfig {
    /// F2: how long the metadata group may stay unreachable, once the node
    /// learned its session expired, before `reconnect` stops the node
    /// (`None` under `shutdown`). Errors name the `[session]` key that breaks
    /// a rule.
    pub fn reconnect_span(&self, tick: Duration) -> Result<Option<Duration>, ConfigError> {
        let ticks = self.ticks(tick)?;
        let client = cohort_core::metadata::SessionClient::new(
            ticks.policy,
            ticks.keepalive_interval_ticks,
            ticks.reconnect_backoff_ticks,
        );
        let tick_ns = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX);
        Ok(client.reconnect_span_ticks().map(|span| Duration::from_nanos(span.saturating_mul(tick_ns))))
    }

    /// Check the rules and convert to ticks of `tick`; errors name the key.
    pub(crate) fn ticks(&self, tick: Duration) -> Result<SessionTicks, ConfigError> {
        let tick_ms = tick.as_millis().max(1);
        let ticks = |key: &'static str, value_ms: u64| -> Result<u64, ConfigError> {
            if value_ms == 0
                || !u128::from(value_ms).is_multiple_of(tick_ms)
                || !tick.subsec_nanos().is_multiple_of(1_000_000)
            {
                return Err(rule(
                    key,
                    format!("{value_ms}ms is not a whole, non-zero number of ticks of {}", ms(tick)),
                ));
            }
            Ok((u128::from(value_ms) / tick_ms) as u64)
        };
        let keepalive_interval_ticks =
            ticks("session.session_keepalive_interval_ms", self.session_keepalive_interval_ms)?;
        let timeout_ticks = ticks("session.session_timeout_ms", self.session_timeout_ms)?;
        if timeout_ticks <= 2 * keepalive_interval_ticks {
            return Err(rule(
                "session.session_timeout_ms",
                format!(
                    "must exceed 2 x session.session_keepalive_interval_ms ({}ms <= 2 x {}ms)",
                    self.session_timeout_ms, self.session_keepalive_interval_ms
                ),
            ));
        }
        let policy = match self.session_expired_policy {
            ExpiredPolicyName::Shutdown => cohort_core::metadata::ExpiredPolicy::Shutdown,
            ExpiredPolicyName::Reconnect => {
                if self.session_reconnect_attempts == 0 {
                    return Err(rule(
                        "session.session_reconnect_attempts",
                        "must be at least 1 with session_expired_policy = \"reconnect\" (use \"shutdown\" to stop at once)"
                            .into(),
                    ));
                }
                cohort_core::metadata::ExpiredPolicy::Reconnect { attempts: self.session_reconnect_attempts }
            }
        };
        let reconnect_backoff_ticks = ticks("session.session_reconnect_backoff_ms", self.session_reconnect_backoff_ms)?;
        Ok(SessionTicks { timeout_ticks, keepalive_interval_ticks, policy, reconnect_backoff_ticks })
    }
}

/// The `[telemetry]` table: where spans go (see `docs/tracing.md`).
///
/// Export is off unless `otlp_endpoint` is set here or the standard
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
/// environment variable is; the file wins over the environment.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// OTLP/HTTP (protobuf) URL that receives spans, used verbatim, so it
    /// includes the path: `"http://127.0.0.1:4318/v1/traces"` for Jaeger or
    /// an OpenTelemetry Collector. Absent: no export (default).
    pub otlp_endpoint: Option<String>,
    /// The most detailed level exported: `info` (default: writes, view
    /// changes, sessions) or `debug` (also heartbeats and repair).
    pub otlp_level: TraceLevel,
    /// The `service.name` resource attribute of every exported span.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig { otlp_endpoint: None, otlp_level: TraceLevel::Info, service_name: "cohort".into() }
    }
}

/// A span level as written in the file.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// The write path, view changes and session events.
    Info,
    /// Also heartbeats (Commit and CommitReply batches) and repair.
    Debug,
    /// Everything.
    Trace,
}

impl TraceLevel {
    /// The `tracing` level.
    pub(crate) fn level(self) -> tracing::Level {
        match self {
            TraceLevel::Error => tracing::Level::ERROR,
            TraceLevel::Warn => tracing::Level::WARN,
            TraceLevel::Info => tracing::Level::INFO,
            TraceLevel::Debug => tracing::Level::DEBUG,
            TraceLevel::Trace => tracing::Level::TRACE,
        }
    }
}

impl TelemetryConfig {
    /// Rules beyond parsing, each naming its key. The endpoint is used
    /// verbatim by the exporter, so one without a path (which would post to
    /// `/` and lose every span) is refused here rather than at run time.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(endpoint) = &self.otlp_endpoint {
            let Some(rest) = endpoint.strip_prefix("http://") else {
                return Err(rule(
                    "telemetry.otlp_endpoint",
                    format!(
                        "{endpoint:?} must be an http:// URL such as \"http://127.0.0.1:4318/v1/traces\" \
                         (OTLP over HTTP/protobuf; https is not built in)"
                    ),
                ));
            };
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            if authority.is_empty() {
                return Err(rule("telemetry.otlp_endpoint", format!("{endpoint:?} names no host")));
            }
            if path.is_empty() {
                return Err(rule(
                    "telemetry.otlp_endpoint",
                    format!("{endpoint:?} has no path; it is used verbatim, so add /v1/traces (OTLP/HTTP's path)"),
                ));
            }
        }
        if self.service_name.trim().is_empty() {
            return Err(rule("telemetry.service_name", "must not be empty".into()));
        }
        Ok(())
    }
}

/// The `[log]` table: which events the node writes to stderr, and how
/// (O1; `docs/operations.md#logs`). `COHORT_LOG` (else `RUST_LOG`) in the
/// environment replaces `level` for one run.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSection {
    /// A level (`error`, `warn`, `info`, `debug`, `trace`, `off`), or
    /// directives that give some modules another
    /// (`"info,cohort_actors::peer_link=debug"`). Default `info`.
    pub level: String,
    /// `text` (default; one line per event, for people) or `json` (one
    /// object per line, for a log shipper).
    pub format: LogFormat,
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection { level: "info".into(), format: LogFormat::Text }
    }
}

impl LogSection {
    /// The level must parse as a filter whose every directive names a level
    /// (`crate::logs::parse_level`): a typo is refused at start, not turned
    /// into a log that says nothing.
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::logs::parse_level(&self.level).map(|_| ()).map_err(|reason| rule("log.level", reason))
    }
}

/// How log lines are written.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `2026-12-06T05:59:12.345Z  INFO cohort_actors::peer_link: peer link up: ...`
    Text,
    /// `{"timestamp":"...","level":"INFO","fields":...}`, one object per line.
    Json,
}

/// The `[node]` table: who this node is and where it listens.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// The cluster this node belongs to, 32 hex digits (`cohort certs init`
    /// writes a random one); every node of a cluster must agree (R18).
    pub cluster_id: String,
    /// This node's id (not 0).
    pub id: u64,
    /// The address peers dial.
    pub listen: std::net::SocketAddr,
    /// Where clients send Request frames (optional).
    pub client: Option<std::net::SocketAddr>,
    /// Where the admin port (`/metrics`, `/health`, `/status`, operator
    /// commands) is served (optional); a port alone binds 127.0.0.1 (T4).
    #[serde(default, deserialize_with = "crate::admin::config::optional_listen_address")]
    pub admin: Option<std::net::SocketAddr>,
    /// Where the shards keep their logs.
    pub data_dir: std::path::PathBuf,
    /// Shards (threads); default 1.
    #[serde(default = "one")]
    pub shards: usize,
    /// The other nodes.
    #[serde(default)]
    pub peers: Vec<PeerEntry>,
}

fn one() -> usize {
    1
}

/// One `[[node.peers]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerEntry {
    /// The peer's node id.
    pub id: u64,
    /// The address it listens on.
    pub address: std::net::SocketAddr,
}

/// The most partition groups `[groups] partitions` may configure: every
/// node builds each at start, so the bound keeps a typo from exhausting memory.
pub const GROUPS_PARTITIONS_MAX: u64 = 1_000_000;

/// The `[groups]` table: the groups a node is built with (the metadata
/// group records them at start and may place more at run time); a node hosts `partitions` groups 0..partitions, each with every node of
/// the cluster as a member, in node-id order rotated by the group id.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupsSection {
    /// Partition groups.
    pub partitions: u64,
    /// Qr per group; absent means a majority.
    pub replication_quorum: Option<usize>,
    /// `sync` (acknowledge after commit) or `async` (after the primary's own durable copy), Q4.
    pub write_mode: WriteModeName,
}

impl Default for GroupsSection {
    fn default() -> Self {
        GroupsSection { partitions: 16, replication_quorum: None, write_mode: WriteModeName::Sync }
    }
}

/// Q4 write mode as written in the file.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteModeName {
    /// Acknowledge after commit.
    Sync,
    /// Acknowledge after the primary's own durable copy.
    Async,
}

impl NodeSection {
    /// The cluster id, parsed (checked by [`NodeSection::validate`]).
    pub fn cluster(&self) -> Result<cohort_messages::ClusterId, ConfigError> {
        cohort_client::parse_cluster_id(&self.cluster_id).map_err(|error| {
            rule(
                "node.cluster_id",
                format!("{:?} is not a cluster id ({error}); `cohort certs init` writes a random one", self.cluster_id),
            )
        })
    }

    /// Rules beyond parsing, each naming its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.cluster()?;
        if self.id == 0 {
            return Err(rule("node.id", "must not be 0".into()));
        }
        if self.shards == 0 || self.shards > cohort_messages::SHARD_COUNT_MAX as usize {
            return Err(rule(
                "node.shards",
                format!("must be in 1..={} ({} given)", cohort_messages::SHARD_COUNT_MAX, self.shards),
            ));
        }
        let mut seen = std::collections::BTreeSet::from([self.id]);
        for peer in &self.peers {
            if !seen.insert(peer.id) {
                return Err(rule("node.peers", format!("node id {} appears twice (or is this node's id)", peer.id)));
            }
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(rule("node.data_dir", "must not be empty".into()));
        }
        Ok(())
    }
}

/// The `[cluster]` table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Length of one tick.
    #[serde(with = "duration")]
    pub tick: Duration,
    /// P, the send-tick period (R1).
    #[serde(with = "duration")]
    pub commit_broadcast_interval: Duration,
    /// Busy timeout and quorum window (R20, R22, R24).
    #[serde(with = "duration")]
    pub commit_heartbeat_timeout: Duration,
    /// Idle heartbeat period (R20, R23).
    #[serde(with = "duration")]
    pub commit_idle_heartbeat_interval: Duration,
    /// Idle timeout (R22, R23).
    #[serde(with = "duration")]
    pub commit_idle_heartbeat_timeout: Duration,
    /// Election timeout.
    #[serde(with = "duration")]
    pub view_change_timeout: Duration,
    /// Repair retry.
    #[serde(with = "duration")]
    pub repair_timeout: Duration,
    /// Z3, opt-in, beyond seed 000: how long a group stays idle before it
    /// quiesces (docs/heartbeats.md, "Quiescence"). Absent: never.
    #[serde(deserialize_with = "duration::some")]
    pub commit_quiesce_timeout: Option<Duration>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            tick: Duration::from_millis(100),
            commit_broadcast_interval: Duration::from_millis(500),
            commit_heartbeat_timeout: Duration::from_secs(5),
            commit_idle_heartbeat_interval: Duration::from_secs(2),
            commit_idle_heartbeat_timeout: Duration::from_secs(12),
            view_change_timeout: Duration::from_secs(3),
            repair_timeout: Duration::from_millis(500),
            commit_quiesce_timeout: None,
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file is not valid TOML or has unknown keys or bad values.
    #[error("config does not parse: {0}")]
    Parse(String),
    /// A value breaks a rule.
    #[error("{key}: {rule}")]
    Rule {
        /// The full key, e.g. `cluster.commit_heartbeat_timeout`.
        key: &'static str,
        /// The rule, with the values involved.
        rule: String,
    },
}

fn rule(key: &'static str, rule: String) -> ConfigError {
    ConfigError::Rule { key, rule }
}

fn ms(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}

impl Config {
    /// Parse and validate a configuration file's text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|error| ConfigError::Parse(error.to_string()))?;
        config.cluster.validate()?;
        config.telemetry.validate()?;
        config.log.validate()?;
        config.session.ticks(config.cluster.tick)?;
        config.limits.validate()?;
        config.links.validate(&config.cluster)?;
        config.balance.validate()?;
        config.tls.validate(config.node.is_some())?;
        config.client.validate()?;
        if let Some(node) = &config.node {
            node.validate()?;
        }
        config.admin.validate(config.node.as_ref().and_then(|node| node.admin))?;
        if config.groups.partitions > GROUPS_PARTITIONS_MAX {
            return Err(rule(
                "groups.partitions",
                format!("must be at most {GROUPS_PARTITIONS_MAX} ({} given)", config.groups.partitions),
            ));
        }
        if let Some(quorum) = config.groups.replication_quorum {
            let members = config.node.as_ref().map_or(1, |node| node.peers.len() + 1);
            if quorum == 0 || quorum > members {
                return Err(rule(
                    "groups.replication_quorum",
                    format!("must be in 1..={members} (the cluster's nodes), {quorum} given"),
                ));
            }
        }
        Ok(config)
    }

    /// Read, parse and validate a configuration file; errors name the file.
    pub fn from_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| ConfigError::Parse(format!("{}: {error}", path.display())))?;
        Config::from_toml(&text).map_err(|error| match error {
            ConfigError::Parse(reason) => ConfigError::Parse(format!("{}: {reason}", path.display())),
            other => other,
        })
    }
}

impl ClusterConfig {
    /// R22: the longest a group whose backups wait `timeout` goes without a
    /// primary after its primary dies: the timeout, plus two broadcast
    /// intervals for the election.
    pub(crate) fn failover_bound(&self, timeout: Duration) -> Duration {
        timeout + 2 * self.commit_broadcast_interval
    }

    /// R22: the failover bound of an idle group, the longest of all (13 s
    /// with the defaults): what a client's patience must cover (O5).
    pub(crate) fn idle_failover_bound(&self) -> Duration {
        self.failover_bound(self.commit_idle_heartbeat_timeout.max(self.commit_heartbeat_timeout))
    }

    /// The boot checks (R9, R23), with key names and values in the errors.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.timing().map(|_| ())
    }

    /// The timing in ticks for the core; fails on any broken rule.
    pub(crate) fn timing(&self) -> Result<TimingConfig, ConfigError> {
        if self.tick.is_zero() {
            return Err(rule("cluster.tick", "must be longer than 0ms".into()));
        }
        let ticks = |key: &'static str, value: Duration| -> Result<u64, ConfigError> {
            let tick = self.tick.as_nanos();
            if !value.as_nanos().is_multiple_of(tick) || value.is_zero() {
                return Err(rule(
                    key,
                    format!("{} is not a whole, non-zero number of ticks of {}", ms(value), ms(self.tick)),
                ));
            }
            Ok((value.as_nanos() / tick) as u64)
        };
        let broadcast = self.commit_broadcast_interval;
        let heartbeat = self.commit_heartbeat_timeout;
        // R9: at least 2 s, and at least 4 x the broadcast interval.
        if heartbeat < Duration::from_secs(2) {
            return Err(rule(
                "cluster.commit_heartbeat_timeout",
                format!("must be at least 2s ({} given)", ms(heartbeat)),
            ));
        }
        if heartbeat < broadcast * 4 {
            return Err(rule(
                "cluster.commit_heartbeat_timeout",
                format!(
                    "must be at least 4 x cluster.commit_broadcast_interval ({} < 4 x {})",
                    ms(heartbeat),
                    ms(broadcast)
                ),
            ));
        }
        // R23: the idle interval is a whole multiple of the broadcast interval.
        let idle = self.commit_idle_heartbeat_interval;
        if idle.is_zero() || !idle.as_nanos().is_multiple_of(broadcast.as_nanos().max(1)) {
            return Err(rule(
                "cluster.commit_idle_heartbeat_interval",
                format!(
                    "must be a whole multiple of cluster.commit_broadcast_interval ({} is not a multiple of {})",
                    ms(idle),
                    ms(broadcast)
                ),
            ));
        }
        // R23: the longer timeout is at least 4 x the idle interval.
        let longer = self.commit_idle_heartbeat_timeout.max(heartbeat);
        if longer < idle * 4 {
            return Err(rule(
                "cluster.commit_idle_heartbeat_timeout",
                format!(
                    "the longer of it and cluster.commit_heartbeat_timeout must be at least 4 x cluster.commit_idle_heartbeat_interval ({} < 4 x {})",
                    ms(longer),
                    ms(idle)
                ),
            ));
        }
        let timing = TimingConfig {
            commit_broadcast_interval_ticks: ticks("cluster.commit_broadcast_interval", broadcast)?,
            commit_heartbeat_timeout_ticks: ticks("cluster.commit_heartbeat_timeout", heartbeat)?,
            commit_idle_heartbeat_interval_ticks: ticks("cluster.commit_idle_heartbeat_interval", idle)?,
            commit_idle_heartbeat_timeout_ticks: ticks(
                "cluster.commit_idle_heartbeat_timeout",
                self.commit_idle_heartbeat_timeout,
            )?,
            view_change_timeout_ticks: ticks("cluster.view_change_timeout", self.view_change_timeout)?,
            repair_timeout_ticks: ticks("cluster.repair_timeout", self.repair_timeout)?,
            commit_quiesce_timeout_ticks: match self.commit_quiesce_timeout {
                Some(value) => Some(ticks("cluster.commit_quiesce_timeout", value)?),
                None => None,
            },
        };
        timing.validate().map_err(|error| rule("cluster", error.to_string()))?;
        Ok(timing)
    }
}

/// Durations as `"500ms"`, `"5s"`, `"2m"` strings or integer milliseconds.
pub(crate) mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, de::Error};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Millis(u64),
        Text(String),
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(deserializer)? {
            Raw::Millis(ms) => Ok(Duration::from_millis(ms)),
            Raw::Text(text) => parse(&text).map_err(D::Error::custom),
        }
    }

    /// A duration key whose absence means "off".
    pub(crate) fn some<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
        deserialize(deserializer).map(Some)
    }

    pub(super) fn parse(text: &str) -> Result<Duration, String> {
        let text = text.trim();
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration like \"500ms\" or \"5s\""))?;
        let millis = match unit.trim() {
            "ms" => number,
            "s" => number.saturating_mul(1000),
            "m" => number.saturating_mul(60_000),
            other => return Err(format!("{text:?}: unknown unit {other:?} (use ms, s or m)")),
        };
        Ok(Duration::from_millis(millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r23_shipped_defaults_match_the_code() {
        let shipped = Config::from_toml(DEFAULT_TOML).expect("default.toml is valid");
        assert_eq!(shipped, Config::default());
        let timing = shipped.cluster.timing().expect("valid");
        assert_eq!(timing, TimingConfig::default());
    }

    #[test]
    fn r23_a_config_file_need_not_declare_the_options() {
        assert_eq!(Config::from_toml("").expect("empty is valid"), Config::default());
        assert_eq!(Config::from_toml("[cluster]\n").expect("empty table is valid"), Config::default());
    }

    #[test]
    fn t5_view_jump_and_snapshot_caps_reach_the_core_and_are_checked_under_their_keys() {
        let config = Config::from_toml("[limits]\nview_jump_max_views = 128\nstate_transfer_size_max_bytes = 8388608")
            .expect("valid");
        let core = config.limits.apply(cohort_core::CoreConfig::default());
        assert_eq!((core.view_jump_max_views, core.state_transfer_size_max_bytes), (128, 8 << 20));
        let error = Config::from_toml("[limits]\nview_jump_max_views = 8").expect_err("refused");
        assert!(matches!(&error, ConfigError::Rule { key: "limits.view_jump_max_views", .. }), "{error}");
        let error = Config::from_toml("[limits]\nstate_transfer_size_max_bytes = 1024").expect_err("refused");
        assert!(matches!(&error, ConfigError::Rule { key: "limits.state_transfer_size_max_bytes", .. }), "{error}");
    }

    #[test]
    fn d1_the_backlog_budget_reaches_the_core_and_zero_keeps_none() {
        let config = Config::from_toml("[limits]\nbacklog_size_max_bytes = 0").expect("0 is valid: no backlog");
        assert_eq!(config.limits.apply(cohort_core::CoreConfig::default()).backlog_size_max_bytes, 0);
        let default = Config::default().limits.apply(cohort_core::CoreConfig::default());
        assert_eq!(default.backlog_size_max_bytes, cohort_core::CoreConfig::default().backlog_size_max_bytes);
        assert_eq!(Config::default(), Config::from_toml(DEFAULT_TOML).expect("valid"));
    }

    #[test]
    fn z3_quiescence_is_off_unless_its_key_is_set_and_then_a_whole_number_of_ticks() {
        assert_eq!(Config::default().cluster.timing().expect("valid").commit_quiesce_timeout_ticks, None);
        let config = Config::from_toml("[cluster]\ncommit_quiesce_timeout = \"30s\"").expect("valid");
        assert_eq!(config.cluster.timing().expect("valid").commit_quiesce_timeout_ticks, Some(300));
        let error = Config::from_toml("[cluster]\ncommit_quiesce_timeout = \"150ms\"").expect_err("refused");
        assert!(matches!(&error, ConfigError::Rule { key: "cluster.commit_quiesce_timeout", .. }), "{error}");
    }

    #[test]
    fn r9_heartbeat_timeout_below_two_seconds_is_refused() {
        let error = Config::from_toml("[cluster]\ncommit_heartbeat_timeout = \"1500ms\"").expect_err("refused");
        assert!(matches!(&error, ConfigError::Rule { key: "cluster.commit_heartbeat_timeout", .. }), "{error}");
        assert!(error.to_string().contains("at least 2s"), "{error}");
    }

    #[test]
    fn r9_heartbeat_timeout_below_four_broadcasts_is_refused() {
        let text = "[cluster]\ncommit_broadcast_interval = \"1s\"\ncommit_heartbeat_timeout = \"3s\"\ncommit_idle_heartbeat_interval = \"2s\"";
        let error = Config::from_toml(text).expect_err("refused");
        assert!(error.to_string().contains("4 x cluster.commit_broadcast_interval"), "{error}");
    }

    #[test]
    fn r23_idle_interval_not_a_multiple_is_refused() {
        let error = Config::from_toml("[cluster]\ncommit_idle_heartbeat_interval = \"1200ms\"").expect_err("refused");
        assert!(matches!(&error, ConfigError::Rule { key: "cluster.commit_idle_heartbeat_interval", .. }), "{error}");
    }

    #[test]
    fn r23_idle_timeout_under_four_idle_intervals_is_refused() {
        let error = Config::from_toml(
            "[cluster]\ncommit_idle_heartbeat_interval = \"3s\"\ncommit_idle_heartbeat_timeout = \"6s\"",
        )
        .expect_err("refused");
        assert!(matches!(&error, ConfigError::Rule { key: "cluster.commit_idle_heartbeat_timeout", .. }), "{error}");
    }

    #[test]
    fn r23_larger_heartbeat_timeout_raises_the_idle_timeout() {
        // 20s heartbeat timeout >= 4 x 2s idle interval even though the idle timeout is short.
        let config =
            Config::from_toml("[cluster]\ncommit_heartbeat_timeout = \"20s\"\ncommit_idle_heartbeat_timeout = \"6s\"")
                .expect("valid");
        let timing = config.cluster.timing().expect("valid");
        assert_eq!(timing.idle_timeout_effective_ticks(), 200);
    }

    #[test]
    fn node_section_is_parsed_and_checked() {
        let text = r#"
            [node]
            cluster_id = "7"
            id = 1
            listen = "127.0.0.1:7001"
            data_dir = "/tmp/cohort-1"
            [[node.peers]]
            id = 2
            address = "127.0.0.1:7002"
            [tls]
            ca = "certs/ca.pem"
            cert = "certs/node-1.pem"
            key = "certs/node-1.key"
            [groups]
            partitions = 8
            write_mode = "async"
        "#;
        let config = Config::from_toml(text).expect("valid");
        let node = config.node.expect("a node section");
        assert_eq!((node.id, node.shards, node.peers.len()), (1, 1, 1));
        assert_eq!(config.groups.write_mode, WriteModeName::Async);
        let twice = text.replace("id = 2", "id = 1");
        let error = Config::from_toml(&twice).expect_err("duplicate id refused");
        assert!(matches!(&error, ConfigError::Rule { key: "node.peers", .. }), "{error}");
        let bad = text.replace("127.0.0.1:7002", "nowhere");
        let error = Config::from_toml(&bad).expect_err("bad address refused");
        assert!(error.to_string().contains("address"), "{error}");
        let no_id = text.replace("cluster_id = \"7\"\n", "");
        let error = Config::from_toml(&no_id).expect_err("a node needs a cluster id");
        assert!(error.to_string().contains("cluster_id"), "{error}");
        let bad_id = text.replace("cluster_id = \"7\"", "cluster_id = \"seven\"");
        let error = Config::from_toml(&bad_id).expect_err("not hex");
        assert!(matches!(&error, ConfigError::Rule { key: "node.cluster_id", .. }), "{error}");
        let no_tls = text.replace("key = \"certs/node-1.key\"", "");
        let error = Config::from_toml(&no_tls).expect_err("t1: a node needs its certificates or insecure");
        assert!(matches!(&error, ConfigError::Rule { key: "tls.key", .. }), "{error}");
        let both = text.replace("[tls]", "[tls]\ninsecure = true");
        let error = Config::from_toml(&both).expect_err("t1: files and insecure at once are ambiguous");
        assert!(matches!(&error, ConfigError::Rule { key: "tls.ca", .. }), "{error}");
        let quorum = text.replace("partitions = 8", "partitions = 8\nreplication_quorum = 3");
        let error = Config::from_toml(&quorum).expect_err("quorum over the cluster size refused");
        assert!(matches!(&error, ConfigError::Rule { key: "groups.replication_quorum", .. }), "{error}");
    }

    #[test]
    fn o1_the_log_section_is_checked_with_errors_that_name_the_key() {
        assert_eq!(Config::default().log, LogSection { level: "info".into(), format: LogFormat::Text });
        let config = Config::from_toml("[log]\nlevel = \"warn,cohort_actors::peer_link=debug\"\nformat = \"json\"")
            .expect("valid");
        assert_eq!(config.log.format, LogFormat::Json);
        let error = Config::from_toml("[log]\nlevel = \"loud\"").expect_err("not a level");
        assert!(matches!(&error, ConfigError::Rule { key: "log.level", .. }), "{error}");
        assert!(error.to_string().contains("error, warn, info, debug, trace, off"), "{error}");
        let error = Config::from_toml("[log]\nlevel = \"\"").expect_err("empty");
        assert!(matches!(&error, ConfigError::Rule { key: "log.level", .. }), "{error}");
        let error = Config::from_toml("[log]\nformat = \"xml\"").expect_err("unknown format");
        assert!(error.to_string().contains("text") && error.to_string().contains("json"), "{error}");
        let error = Config::from_toml("[log]\nlevle = \"info\"").expect_err("unknown key");
        assert!(error.to_string().contains("levle") && error.to_string().contains("level"), "{error}");
    }

    #[test]
    fn telemetry_is_off_by_default_and_its_endpoint_is_checked() {
        assert_eq!(Config::default().telemetry.otlp_endpoint, None);
        let on = Config::from_toml(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318/v1/traces\"\notlp_level = \"debug\"",
        )
        .expect("valid");
        assert_eq!(on.telemetry.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
        assert_eq!(on.telemetry.otlp_level, TraceLevel::Debug);
        for (bad, why) in [
            ("http://127.0.0.1:4318", "/v1/traces"),
            ("http://127.0.0.1:4318/", "/v1/traces"),
            ("https://collector:4318/v1/traces", "http://"),
            ("127.0.0.1:4318/v1/traces", "http://"),
            ("http:///v1/traces", "no host"),
        ] {
            let text = format!("[telemetry]\notlp_endpoint = {bad:?}");
            let error = Config::from_toml(&text).expect_err(bad);
            assert!(matches!(&error, ConfigError::Rule { key: "telemetry.otlp_endpoint", .. }), "{error}");
            assert!(error.to_string().contains(why), "{bad}: {error}");
        }
        let error = Config::from_toml("[telemetry]\nservice_name = \" \"").expect_err("empty name");
        assert!(matches!(&error, ConfigError::Rule { key: "telemetry.service_name", .. }), "{error}");
        let error = Config::from_toml("[telemetry]\notlp_level = \"loud\"").expect_err("unknown level");
        assert!(error.to_string().contains("loud"), "{error}");
    }

    #[test]
    fn s1_s3_session_keys_have_defaults_and_rules() {
        let session = Config::from_toml("").expect("valid").session;
        let ticks = session.ticks(Duration::from_millis(100)).expect("valid");
        assert_eq!((ticks.timeout_ticks, ticks.keepalive_interval_ticks), (100, 10));
        assert_eq!(ticks.policy, cohort_core::metadata::ExpiredPolicy::Reconnect { attempts: 3 });
        let shutdown = Config::from_toml("[session]\nsession_expired_policy = \"shutdown\"").expect("valid");
        assert_eq!(shutdown.session.session_expired_policy, ExpiredPolicyName::Shutdown);
        for (text, key, why) in [
            ("session_timeout_ms = 2000\nsession_keepalive_interval_ms = 1000", "session.session_timeout_ms", "2 x"),
            ("session_timeout_ms = 1050", "session.session_timeout_ms", "whole"),
            ("session_keepalive_interval_ms = 0", "session.session_keepalive_interval_ms", "non-zero"),
            ("session_reconnect_attempts = 0", "session.session_reconnect_attempts", "at least 1"),
            ("session_reconnect_backoff_ms = 0", "session.session_reconnect_backoff_ms", "non-zero"),
            ("session_reconnect_backoff_ms = 150", "session.session_reconnect_backoff_ms", "whole"),
        ] {
            let error = Config::from_toml(&format!("[session]\n{text}")).expect_err(text);
            assert!(matches!(&error, ConfigError::Rule { key: k, .. } if *k == key), "{text}: {error}");
            assert!(error.to_string().contains(why), "{text}: {error}");
        }
        let error = Config::from_toml("[session]\nsession_expired_policy = \"panic\"").expect_err("unknown policy");
        assert!(error.to_string().contains("panic"), "{error}");
    }

    #[test]
    fn f2_default_reconnect_attempts_span_a_metadata_outage_of_at_least_60_s() {
        let session = Config::from_toml("").expect("valid").session;
        assert_eq!(session.reconnect_span(Duration::from_millis(100)), Ok(Some(Duration::from_secs(66))));
        let shutdown = SessionConfig { session_expired_policy: ExpiredPolicyName::Shutdown, ..session };
        assert_eq!(shutdown.reconnect_span(Duration::from_millis(100)), Ok(None));
    }

    #[test]
    fn f1_link_keys_have_defaults_and_rules() {
        let links = Config::from_toml("").expect("valid").links;
        assert_eq!(links.timing(), cohort_actors::LinkTiming::default());
        for (text, key) in [
            ("[links]\nstall_timeout = \"100ms\"", "links.stall_timeout"),
            ("[links]\nstall_timeout = \"6s\"", "links.stall_timeout"),
            ("[links]\nconnect_timeout = \"0ms\"", "links.connect_timeout"),
            ("[links]\nconnect_timeout = \"4500ms\"", "links.connect_timeout"),
            ("[links]\nredial_backoff_max = \"1ms\"", "links.redial_backoff_max"),
            ("[links]\nsocket_unsent_max_bytes = 100", "links.socket_unsent_max_bytes"),
        ] {
            let error = Config::from_toml(text).expect_err(text);
            assert!(matches!(&error, ConfigError::Rule { key: k, .. } if *k == key), "{text}: {error}");
        }
    }

    #[test]
    fn the_example_node_config_is_valid_once_its_cluster_id_is_filled_in() {
        let example = include_str!("../../config/example-node.toml");
        let filled = example.replace("put-the-id-from-certs-init-here", "c0ffee");
        let config = Config::from_toml(&filled).unwrap_or_else(|error| panic!("example-node.toml: {error}"));
        assert!(matches!(config.tls.security(), crate::node::Security::Tls(_)), "the example uses TLS");
        assert!(Config::from_toml(example).is_err(), "the placeholder itself is refused, naming the key");
    }

    #[test]
    fn h4_answer_budgets_have_defaults_and_rules() {
        let client = Config::from_toml("").expect("valid").client;
        assert_eq!((client.answer_bytes_max, client.answer_bytes_node_max), (8 << 20, 256 << 20));
        assert_eq!(client.limits(), crate::client_port::ClientPortLimits::default());
        let set =
            Config::from_toml("[client]\nanswer_bytes_max = 65536\nanswer_bytes_node_max = 65536").expect("valid");
        assert_eq!((set.client.limits().answer_bytes_max, set.client.limits().answer_bytes_node_max), (65536, 65536));
        for (text, key, why) in [
            ("answer_bytes_max = 65535", "client.answer_bytes_max", "at least 65536"),
            ("answer_bytes_max = 4294967296\nanswer_bytes_node_max = 4294967296", "client.answer_bytes_max", "at most"),
            ("answer_bytes_node_max = 1048576", "client.answer_bytes_node_max", "client.answer_bytes_max (8388608)"),
            ("answer_bytes_node_max = 4294967296", "client.answer_bytes_node_max", "at most 4294967295"),
        ] {
            let error = Config::from_toml(&format!("[client]\n{text}")).expect_err(text);
            assert!(matches!(&error, ConfigError::Rule { key: k, .. } if *k == key), "{text}: {error}");
            assert!(error.to_string().contains(why), "{text}: {error}");
        }
        let error = Config::from_toml("[client]\nanswer_bytes_max = -1").expect_err("negative");
        assert!(error.to_string().contains("answer_bytes_max"), "{error}");
    }

    #[test]
    fn groups_partitions_is_bounded() {
        assert!(Config::from_toml("[groups]\npartitions = 1000000").is_ok());
        let error = Config::from_toml("[groups]\npartitions = 1000001").expect_err("too many");
        assert!(matches!(&error, ConfigError::Rule { key: "groups.partitions", .. }), "{error}");
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_refused_with_context() {
        let error = Config::from_toml("[cluster]\ncommit_hearbeat_timeout = \"5s\"").expect_err("typo refused");
        assert!(error.to_string().contains("commit_hearbeat_timeout"), "{error}");
        let error = Config::from_toml("[cluster]\ntick = \"5 parsecs\"").expect_err("bad unit refused");
        assert!(error.to_string().contains("unknown unit"), "{error}");
        let error = Config::from_toml("[cluster]\ntick = \"30ms\"").expect_err("fractional ticks refused");
        assert!(error.to_string().contains("whole"), "{error}");
    }
}
