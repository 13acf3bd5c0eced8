//! The `[admin]` table: who may call the admin port's operator endpoints,
//! where `/metrics` may be served apart from them, and the port's limits.
//! Where the admin port itself listens stays `[node] admin`, beside the
//! node's other addresses.
//!
//! Addresses of the admin port (`[node] admin`, `[admin] metrics_listen`)
//! may be written as a port alone (`7301`, `"7301"` or `":7301"`), which
//! binds loopback (`127.0.0.1`): the control plane is reachable from other
//! machines only when an operator writes a non-loopback host on purpose.
//!
//! Every rule is checked at boot and its error names the key (`admin.token`,
//! `admin.token_file`, ...), like the rest of the configuration.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::token::AdminToken;
use super::{AdminLimits, AdminOptions};
use crate::config::ConfigError;

/// The most connections one admin listener may be configured to hold.
pub(crate) const CONNECTIONS_MAX_LIMIT: usize = 65_536;

/// The `[admin]` table (see the module docs and `config/default.toml`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSection {
    /// The token operator commands must present (`Authorization: Bearer`).
    /// Absent, with no `token_file`: the node refuses every operator command.
    pub token: Option<AdminToken>,
    /// A file holding the token (surrounding whitespace, such as the final
    /// newline, is ignored); an alternative to `token` that keeps the
    /// secret out of the configuration file.
    pub token_file: Option<PathBuf>,
    /// A second listener that serves only `GET /metrics` and `GET /health`,
    /// so scrapers can reach the node without reaching its control plane.
    #[serde(deserialize_with = "optional_listen_address")]
    pub metrics_listen: Option<SocketAddr>,
    /// Time a client has to send a request's head (then `408`), and again
    /// its body.
    #[serde(with = "crate::config::duration")]
    pub request_timeout: Duration,
    /// Time a connection has to close once its answer was sent.
    #[serde(with = "crate::config::duration")]
    pub disconnect_timeout: Duration,
    /// Connections each admin listener holds at once; further ones wait in
    /// the kernel's listen backlog.
    pub connections_max: usize,
}

impl Default for AdminSection {
    fn default() -> Self {
        let limits = AdminLimits::default();
        AdminSection {
            token: None,
            token_file: None,
            metrics_listen: None,
            request_timeout: limits.request_timeout,
            disconnect_timeout: limits.disconnect_timeout,
            connections_max: limits.connections_max,
        }
    }
}

fn rule(key: &'static str, rule: String) -> ConfigError {
    ConfigError::Rule { key, rule }
}

impl AdminSection {
    /// Check every rule; `admin` is the node's admin address (`[node] admin`).
    /// Reads `token_file` if it is set.
    pub fn validate(&self, admin: Option<SocketAddr>) -> Result<(), ConfigError> {
        self.options(admin).map(|_| ())
    }

    /// The options a node's admin port runs with; the errors of
    /// [`AdminSection::validate`].
    pub fn options(&self, admin: Option<SocketAddr>) -> Result<AdminOptions, ConfigError> {
        let token = match (&self.token, &self.token_file) {
            (Some(_), Some(_)) => {
                return Err(rule("admin.token_file", "set admin.token or admin.token_file, not both".into()));
            }
            (Some(token), None) => {
                AdminToken::check(token.expose()).map_err(|error| rule("admin.token", format!("the token {error}")))?;
                Some(token.clone())
            }
            (None, Some(path)) => Some(read_token_file(path)?),
            (None, None) => None,
        };
        if let (Some(metrics), Some(admin)) = (self.metrics_listen, admin)
            && metrics == admin
            && metrics.port() != 0
        {
            return Err(rule(
                "admin.metrics_listen",
                format!("{metrics} is node.admin too; give it a port of its own"),
            ));
        }
        let between = |key: &'static str, value: Duration, min: Duration, max: Duration| {
            if value < min || value > max {
                let (value, min, max) = (value.as_millis(), min.as_millis(), max.as_millis());
                return Err(rule(key, format!("must be in {min}ms..={max}ms ({value}ms given)")));
            }
            Ok(())
        };
        // actix-web reads its clock every 500 ms, so a shorter timeout could
        // expire before a client had any chance.
        between("admin.request_timeout", self.request_timeout, Duration::from_secs(1), Duration::from_secs(60))?;
        let disconnect = self.disconnect_timeout;
        between("admin.disconnect_timeout", disconnect, Duration::from_millis(100), Duration::from_secs(10))?;
        if self.connections_max == 0 || self.connections_max > CONNECTIONS_MAX_LIMIT {
            return Err(rule(
                "admin.connections_max",
                format!("must be in 1..={CONNECTIONS_MAX_LIMIT} ({} given)", self.connections_max),
            ));
        }
        let limits = AdminLimits {
            request_timeout: self.request_timeout,
            disconnect_timeout: self.disconnect_timeout,
            connections_max: self.connections_max,
        };
        Ok(AdminOptions { token, metrics_listen: self.metrics_listen, limits })
    }
}

/// The token in `path`, checked; errors name `admin.token_file` and the file.
fn read_token_file(path: &Path) -> Result<AdminToken, ConfigError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|error| rule("admin.token_file", format!("cannot read {shown}: {error}")))?;
    AdminToken::new(text.trim()).map_err(|error| rule("admin.token_file", format!("the token in {shown} {error}")))
}

/// An admin address as the configuration writes it: `"HOST:PORT"`, or a
/// port alone (`7301`, `"7301"`, `":7301"`) for `127.0.0.1:PORT`.
pub(crate) fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let port = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    text.parse().map_err(|_| format!("{text:?} is not HOST:PORT (e.g. \"127.0.0.1:7301\") or a port alone (\"7301\")"))
}

/// Deserialize an optional admin address (see [`parse_listen_address`]).
pub(crate) fn optional_listen_address<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Port(u16),
        Text(String),
    }
    match Option::<Raw>::deserialize(deserializer)? {
        None => Ok(None),
        Some(Raw::Port(port)) => Ok(Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))),
        Some(Raw::Text(text)) => parse_listen_address(&text).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn refused_key(text: &str) -> &'static str {
        match Config::from_toml(text) {
            Err(ConfigError::Rule { key, .. }) => key,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn t4_admin_addresses_default_to_loopback() {
        let loopback = |port| Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        assert_eq!(parse_listen_address("7301"), loopback(7301));
        assert_eq!(parse_listen_address(":7301"), loopback(7301));
        assert_eq!(parse_listen_address("0.0.0.0:7301"), Ok("0.0.0.0:7301".parse().expect("address")));
        assert_eq!(parse_listen_address("[::1]:7301"), Ok("[::1]:7301".parse().expect("address")));
        assert!(parse_listen_address("example.org:7301").is_err());
        let config = Config::from_toml("[admin]\nmetrics_listen = 9100\n").expect("valid");
        assert_eq!(config.admin.metrics_listen, Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 9100))));
        let config = Config::from_toml("[admin]\nmetrics_listen = \"0.0.0.0:9100\"\n").expect("valid");
        assert_eq!(config.admin.metrics_listen, Some("0.0.0.0:9100".parse().expect("address")));
    }

    #[test]
    fn t4_admin_rules_name_their_key() {
        assert_eq!(refused_key("[admin]\ntoken = \"short\"\n"), "admin.token");
        assert_eq!(refused_key("[admin]\ntoken = \"has spaces in the token\"\n"), "admin.token");
        let both = "[admin]\ntoken = \"0123456789abcdef\"\ntoken_file = \"/nonexistent\"\n";
        assert_eq!(refused_key(both), "admin.token_file");
        assert_eq!(refused_key("[admin]\ntoken_file = \"/nonexistent/cohort-token\"\n"), "admin.token_file");
        assert_eq!(refused_key("[admin]\nrequest_timeout = \"0s\"\n"), "admin.request_timeout");
        assert_eq!(refused_key("[admin]\ndisconnect_timeout = \"1m\"\n"), "admin.disconnect_timeout");
        assert_eq!(refused_key("[admin]\nconnections_max = 0\n"), "admin.connections_max");
        let clash = "[node]\ncluster_id = \"7\"\nid = 1\nlisten = \"127.0.0.1:7101\"\nadmin = 7301\ndata_dir = \"d\"\n\
                     [tls]\ninsecure = true\n[admin]\nmetrics_listen = \"127.0.0.1:7301\"\n";
        assert_eq!(refused_key(clash), "admin.metrics_listen");
    }

    #[test]
    fn t4_the_token_file_is_read_and_trimmed() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("admin-token");
        std::fs::write(&path, "0123456789abcdef-from-a-file\n").expect("write");
        let text = format!("[admin]\ntoken_file = {:?}\n", path.display().to_string());
        let config = Config::from_toml(&text).expect("valid");
        let options = config.admin.options(None).expect("valid");
        assert_eq!(options.token.as_ref().map(AdminToken::expose), Some("0123456789abcdef-from-a-file"));
        std::fs::write(&path, "short\n").expect("write");
        match Config::from_toml(&text) {
            Err(ConfigError::Rule { key: "admin.token_file", rule }) => {
                assert!(
                    rule.contains("admin-token") && !rule.contains("short"),
                    "names the file, not the secret: {rule}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
