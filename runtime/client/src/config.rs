//! What a [`crate::ClusterClient`] is built from: the cluster id, the nodes'
//! client-port addresses, TLS files or an explicit insecure mode, and the
//! limits of every wait and queue (units in the names).
//!
//! Why the cluster id is needed: every frame header carries it and a node
//! closes a connection whose Handshake names another cluster (R18), without
//! a word. `cohort certs init` writes it beside the CA (`cluster-id`);
//! [`crate::read_cluster_id`] reads that file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::ClientError;

/// Where a client's TLS files are: the cluster CA's certificate and a
/// client certificate it signed, with its key (all PEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster CA's certificate.
    pub ca: PathBuf,
    /// The client's certificate chain.
    pub cert: PathBuf,
    /// The client's private key (PKCS#8).
    pub key: PathBuf,
}

impl TlsFiles {
    /// The files `cohort certs client --dir DIR --name NAME` writes:
    /// `ca.pem`, `client-NAME.pem` and `client-NAME.key`.
    ///
    /// ```
    /// let files = cohort_client::TlsFiles::client_in("certs", "app");
    /// assert_eq!(files.cert, std::path::Path::new("certs/client-app.pem"));
    /// ```
    pub fn client_in(dir: impl AsRef<Path>, name: &str) -> TlsFiles {
        let dir = dir.as_ref();
        TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("client-{name}.pem")),
            key: dir.join(format!("client-{name}.key")),
        }
    }
}

/// How the client speaks to the nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Security {
    /// mTLS with these files (T2): what every node with `[tls]` files expects.
    Tls(TlsFiles),
    /// Plaintext, for a cluster whose nodes run `[tls] insecure = true`.
    /// Every client then has the same identity: only the random client ids
    /// keep them apart.
    Insecure,
}

/// The bounds of every wait and queue of a client. The defaults suit a
/// cluster with the default `[cluster]` timing (a failover within about
/// `commit_heartbeat_timeout` + `view_change_timeout`, 8 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    /// How long a call keeps trying (through redirects, failovers and
    /// retries) before it fails; [`crate::ClusterClient::timeout`] sets it.
    pub call_timeout: Duration,
    /// How long one attempt at one node waits for its answer at most.
    pub attempt_timeout: Duration,
    /// How long a TCP connect may take.
    pub connect_timeout: Duration,
    /// How long TLS and the Handshake exchange may take (the node allows 5 s).
    pub handshake_timeout: Duration,
    /// A write to a node's socket that takes longer closes the connection.
    pub write_timeout: Duration,
    /// Requests (and route queries) one connection carries at once; more
    /// wait for a free place. The node answers `Busy` past its own
    /// `[client] in_flight_max` (default 256).
    pub requests_in_flight_max: usize,
    /// The first pause between retries; it doubles up to `retry_pause_max`.
    pub retry_pause_min: Duration,
    /// The longest pause between retries.
    pub retry_pause_max: Duration,
    /// An address that could not be reached is not dialed again for this long.
    pub unreachable_backoff: Duration,
    /// The most groups the route cache holds; past it, an arbitrary entry
    /// makes room (a later call queries its route again).
    pub route_cache_groups_max: usize,
    /// Redirects a call follows at once in a row before it pauses (a loop
    /// of stale answers during a view change).
    pub redirects_in_a_row_max: u32,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            call_timeout: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            requests_in_flight_max: 256,
            retry_pause_min: Duration::from_millis(20),
            retry_pause_max: Duration::from_millis(500),
            unreachable_backoff: Duration::from_secs(1),
            route_cache_groups_max: 1_000_000,
            redirects_in_a_row_max: 4,
        }
    }
}

impl ClientLimits {
    /// The reason a limit is unusable, naming it.
    pub fn validate(&self) -> Result<(), ClientError> {
        let durations = [
            ("limits.call_timeout", self.call_timeout),
            ("limits.attempt_timeout", self.attempt_timeout),
            ("limits.connect_timeout", self.connect_timeout),
            ("limits.handshake_timeout", self.handshake_timeout),
            ("limits.write_timeout", self.write_timeout),
            ("limits.retry_pause_min", self.retry_pause_min),
        ];
        if let Some((what, _)) = durations.iter().find(|(_, duration)| duration.is_zero()) {
            return Err(ClientError::config(*what, "must be longer than 0"));
        }
        if self.retry_pause_max < self.retry_pause_min {
            return Err(ClientError::config("limits.retry_pause_max", "must be at least limits.retry_pause_min"));
        }
        if self.requests_in_flight_max == 0 || self.route_cache_groups_max == 0 {
            return Err(ClientError::config(
                "limits.requests_in_flight_max, limits.route_cache_groups_max",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Check one `HOST:PORT` address: a host and a port number.
pub(crate) fn check_address(address: &str) -> Result<(), ClientError> {
    let port = address.rsplit_once(':').map(|(host, port)| (host.trim_matches(['[', ']']), port));
    match port {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|port| port > 0) => Ok(()),
        _ => Err(ClientError::config(format!("address {address:?}"), "expected HOST:PORT, e.g. 10.0.0.1:7400")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c1_addresses_need_a_host_and_a_port() {
        for good in ["127.0.0.1:7400", "node-1:1", "[::1]:7400"] {
            assert!(check_address(good).is_ok(), "{good}");
        }
        for bad in ["127.0.0.1", ":7400", "host:0", "host:port", ""] {
            assert!(check_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn c1_default_limits_are_valid_and_a_zero_is_named() {
        assert!(ClientLimits::default().validate().is_ok());
        let zero = ClientLimits { attempt_timeout: Duration::ZERO, ..ClientLimits::default() };
        assert!(matches!(zero.validate(), Err(ClientError::Config { what, .. }) if what == "limits.attempt_timeout"));
    }
}
