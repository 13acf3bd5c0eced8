//! The flags of every command that uses a running cluster's data (`cohort
//! write`, `cohort read`, `cohort bench --cluster`; C2), and the one place
//! that turns them into a [`ClusterClient`].
//!
//! Why one place: the three commands must agree on where the certificates
//! are, which cluster id is spoken and when plaintext is allowed, and a
//! mistake in any of them must fail before anything is dialed, naming the
//! flag or file to fix. The defaults follow what `cohort certs` writes
//! (`--dir certs`: `ca.pem`, `cluster-id`, and `client-NAME.pem`/`.key`
//! from `cohort certs client --name NAME`), so on the machine where the
//! certificates were made `--cluster` is the only flag a command needs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cohort_client::{CLUSTER_ID_FILE, ClientError, ClusterClient, TlsFiles, parse_cluster_id};
use cohort_messages::ClusterId;

/// The longest `--timeout-secs` (an hour): a typo must not make a command hang for days.
pub(super) const CALL_TIMEOUT_MAX_SECS: u64 = 3600;

/// `--timeout-secs` by default: the idle failover bound of the default
/// timing (13 s, R22) and room for the write after it, so a command run
/// while an idle group fails over waits for the new primary instead of
/// giving up first (O5). A test checks it against the bound.
pub(super) const CALL_TIMEOUT_DEFAULT_SECS: u64 = 20;

/// How to reach and prove ourselves to the cluster's client ports.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub(crate) struct ConnectArgs {
    /// The certificates directory (`cohort certs init --dir DIR`): its
    /// `ca.pem`, `cluster-id` and the client certificate of `--client`.
    #[arg(long, value_name = "DIR", default_value = "certs")]
    pub certs: PathBuf,
    /// The client certificate's name in `--certs`, as `cohort certs client
    /// --dir DIR --name NAME` made it (`client-NAME.pem`, `client-NAME.key`).
    #[arg(long, value_name = "NAME", default_value = "app", conflicts_with = "insecure")]
    pub client: String,
    /// The cluster CA's certificate, instead of `--certs` (with `--cert` and `--key`).
    #[arg(long, value_name = "FILE", requires_all = ["cert", "key"], conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,
    /// A client certificate the CA signed (with `--ca` and `--key`).
    #[arg(long, value_name = "FILE", requires_all = ["ca", "key"])]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key, PKCS#8 PEM (with `--ca` and `--cert`).
    #[arg(long, value_name = "FILE", requires_all = ["ca", "cert"])]
    pub key: Option<PathBuf>,
    /// Speak plaintext, to nodes that run `[tls] insecure = true`.
    #[arg(long)]
    pub insecure: bool,
    /// The cluster id, hex (the nodes' `[node] cluster_id`). Default: the
    /// `cluster-id` file in `--certs`, or beside `--ca` when given.
    #[arg(long, value_name = "HEX", value_parser = cluster_id_arg)]
    pub cluster_id: Option<ClusterId>,
    /// How long one write or read keeps trying through redirects,
    /// failovers and retries before it fails; the default covers the
    /// failover of an idle group (13 s).
    #[arg(long, value_name = "SECS", default_value_t = CALL_TIMEOUT_DEFAULT_SECS,
          value_parser = clap::value_parser!(u64).range(1..=CALL_TIMEOUT_MAX_SECS))]
    pub timeout_secs: u64,
}

impl Default for ConnectArgs {
    fn default() -> Self {
        ConnectArgs {
            certs: PathBuf::from("certs"),
            client: "app".into(),
            ca: None,
            cert: None,
            key: None,
            insecure: false,
            cluster_id: None,
            timeout_secs: CALL_TIMEOUT_DEFAULT_SECS,
        }
    }
}

/// Why no client could be built; the message names the flag or the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// No cluster id: no `--cluster-id`, and its file is missing or wrong.
    #[error(
        "no cluster id: {reason}; give --cluster-id HEX (the nodes' [node] cluster_id) or --certs DIR where `cohort certs init` wrote `{CLUSTER_ID_FILE}`"
    )]
    ClusterId {
        /// What went wrong with the file.
        reason: String,
    },
    /// The client refused the settings: a missing or unreadable file, an
    /// address that is not `HOST:PORT`.
    #[error("{source}{hint}")]
    Client {
        /// What the client said.
        source: ClientError,
        /// What to do about it.
        hint: String,
    },
}

impl ConnectArgs {
    /// TLS files, or `None` for `--insecure`.
    pub(crate) fn tls_files(&self) -> Option<TlsFiles> {
        if self.insecure {
            return None;
        }
        match (&self.ca, &self.cert, &self.key) {
            (Some(ca), Some(cert), Some(key)) => {
                Some(TlsFiles { ca: ca.clone(), cert: cert.clone(), key: key.clone() })
            }
            _ => Some(TlsFiles::client_in(&self.certs, &self.client)),
        }
    }

    /// `--cluster-id`, else the `cluster-id` file beside the CA.
    pub(crate) fn cluster(&self) -> Result<ClusterId, ConnectError> {
        if let Some(cluster) = self.cluster_id {
            return Ok(cluster);
        }
        let dir = self.ca.as_deref().and_then(Path::parent).unwrap_or(&self.certs);
        let path = dir.join(CLUSTER_ID_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|error| ConnectError::ClusterId { reason: format!("{}: {error}", path.display()) })?;
        parse_cluster_id(&text)
            .map_err(|error| ConnectError::ClusterId { reason: format!("{}: {error}", path.display()) })
    }

    /// How long one call keeps trying.
    pub(crate) fn call_timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    /// A client of the nodes at `addresses`. Nothing is dialed yet; the
    /// files are read now, so a missing one fails here.
    pub(crate) fn client(&self, addresses: &[String]) -> Result<ClusterClient, ConnectError> {
        let cluster = self.cluster()?;
        let builder = ClusterClient::builder(cluster, addresses.iter().cloned()).timeout(self.call_timeout());
        let builder = match self.tls_files() {
            Some(files) => builder.tls(files),
            None => builder.insecure(),
        };
        builder.build().map_err(|source| {
            let hint = match &source {
                ClientError::Config { what, .. } if what.starts_with("address") => String::new(),
                ClientError::Config { .. } if self.ca.is_none() && !self.insecure => format!(
                    " (make the client's certificate with `cohort certs client --dir {} --name {}`, or give --ca, --cert and --key, or --insecure for a plaintext cluster)",
                    self.certs.display(),
                    self.client
                ),
                _ => String::new(),
            };
            ConnectError::Client { source, hint }
        })
    }
}

/// `--cluster-id` as hex (as in `cluster-id` files and `[node] cluster_id`).
fn cluster_id_arg(text: &str) -> Result<ClusterId, String> {
    parse_cluster_id(text).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        connect: ConnectArgs,
    }

    fn parse(args: &[&str]) -> Result<ConnectArgs, clap::Error> {
        Flags::try_parse_from(std::iter::once("cohort").chain(args.iter().copied())).map(|flags| flags.connect)
    }

    #[test]
    fn c2_by_default_the_files_are_where_cohort_certs_writes_them() {
        let args = parse(&[]).expect("no flag is required");
        assert_eq!(args, ConnectArgs::default());
        assert_eq!(args.tls_files(), Some(TlsFiles::client_in("certs", "app")));
        let named = parse(&["--certs", "/etc/cohort", "--client", "ops"]).expect("parses");
        assert_eq!(named.tls_files(), Some(TlsFiles::client_in("/etc/cohort", "ops")));
    }

    #[test]
    fn c2_explicit_files_come_as_three_and_exclude_plaintext() {
        let explicit = parse(&["--ca", "a/ca.pem", "--cert", "me.pem", "--key", "me.key"]).expect("parses");
        let files = explicit.tls_files().expect("TLS");
        assert_eq!((files.ca.as_path(), files.key.as_path()), (Path::new("a/ca.pem"), Path::new("me.key")));
        assert!(parse(&["--ca", "ca.pem"]).is_err(), "--ca alone");
        assert!(parse(&["--cert", "me.pem", "--key", "me.key"]).is_err(), "no --ca");
        assert!(parse(&["--insecure", "--ca", "c", "--cert", "d", "--key", "e"]).is_err());
        assert!(parse(&["--insecure", "--client", "ops"]).is_err(), "a certificate name means TLS");
        assert_eq!(parse(&["--insecure"]).expect("parses").tls_files(), None);
    }

    #[test]
    fn c2_the_cluster_id_is_hex_from_the_flag_or_the_file_beside_the_ca() {
        let args = parse(&["--cluster-id", "10ca1c1a57e2"]).expect("parses");
        assert_eq!(args.cluster().ok(), Some(ClusterId(0x10CA_1C1A_57E2)));
        assert!(parse(&["--cluster-id", "not-hex"]).is_err());
        assert!(parse(&["--timeout-secs", "0"]).is_err());

        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(CLUSTER_ID_FILE), "00ff\n").expect("write");
        let ca = dir.path().join("ca.pem");
        let beside =
            ConnectArgs { ca: Some(ca.clone()), cert: Some(ca.clone()), key: Some(ca), ..ConnectArgs::default() };
        assert_eq!(beside.cluster().ok(), Some(ClusterId(255)));
        let in_certs = ConnectArgs { certs: dir.path().to_path_buf(), ..ConnectArgs::default() };
        assert_eq!(in_certs.cluster().ok(), Some(ClusterId(255)));

        let missing = ConnectArgs { certs: dir.path().join("nowhere"), ..ConnectArgs::default() };
        let error = missing.cluster().expect_err("no file").to_string();
        assert!(error.contains("nowhere/cluster-id") && error.contains("--cluster-id"), "{error}");
    }

    #[test]
    fn c2_missing_client_files_say_how_to_make_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let args =
            ConnectArgs { certs: dir.path().to_path_buf(), cluster_id: Some(ClusterId(1)), ..ConnectArgs::default() };
        let error = args.client(&["127.0.0.1:7201".into()]).expect_err("no files").to_string();
        assert!(error.contains("ca.pem") && error.contains("cohort certs client --dir"), "{error}");
        let bad = ConnectArgs { insecure: true, ..args };
        let error = bad.client(&["127.0.0.1".into()]).expect_err("no port").to_string();
        assert!(error.contains("HOST:PORT"), "{error}");
    }

    #[test]
    fn o5_the_default_timeout_covers_the_failover_of_an_idle_group() {
        let bound = crate::config::ClusterConfig::default().idle_failover_bound();
        assert_eq!(bound, Duration::from_secs(13), "docs/operations.md and the CLI's messages name 13 s");
        let default = parse(&[]).expect("parses").call_timeout();
        assert!(default >= bound + Duration::from_secs(5), "{default:?} leaves no room after the {bound:?} bound");
    }
}
