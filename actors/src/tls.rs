//! TLS for peer links and the client port (T1, T2): who may connect, and
//! who a connection is.
//!
//! Why certificates and not the cluster id: the cluster id travels in the
//! clear in every frame header, so it names a cluster but proves nothing.
//! Every node and client holds a certificate signed by the cluster's own CA
//! ([`crate::certs`] makes them). A node's certificate names it with the DNS
//! name `node-<id>.cohort` ([`node_name`]), and every node's certificate
//! also carries [`NODES_NAME`], the name clients check on the client port.
//!
//! - A dialing link checks that the answering node's certificate names the
//!   peer it dialed (rustls' server-name check), and presents its own.
//! - An accepting node requires a client certificate signed by the CA; once
//!   the Handshake claims a node id, the certificate must name that node
//!   ([`certifies_node`]), and every later frame's sender must be that node.
//! - On the client port, a client's identity is the SHA-256 of its
//!   certificate ([`identity_of`]); exactly-once client ids are bound to it.
//!
//! The crypto provider is *ring*: it builds with only a C compiler, which a
//! clean Debian machine with Rust already has; aws-lc-rs needs CMake as well.
//! The provider is passed explicitly, so nothing depends on which provider
//! another crate in the process enabled.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cohort_messages::NodeId;
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The name every node's certificate carries, which a client of the client
/// port checks (it does not know the node ids behind the addresses it has).
pub(crate) const NODES_NAME: &str = "nodes.cohort";

/// The name node `node`'s certificate carries.
pub fn node_name(node: NodeId) -> String {
    format!("node-{}.cohort", node.0)
}

/// The name a client certificate for `client` carries.
pub fn client_name(client: &str) -> String {
    format!("client-{client}.cohort")
}

/// A byte stream of a peer or client connection: plain TCP, or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection's stream, whichever it is.
pub type Stream = Box<dyn Io>;

/// Where a node's (or client's) TLS files are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster CA's certificate (PEM).
    pub ca: PathBuf,
    /// This node's certificate chain (PEM).
    pub cert: PathBuf,
    /// This node's private key (PEM, PKCS#8).
    pub key: PathBuf,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{what} {}: {source}", path.display())]
    Read {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no usable PEM of the expected kind.
    #[error("{what} {}: {reason}", path.display())]
    Pem {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Loaded certificates: the CA to trust, and our own chain and key.
#[derive(Debug)]
pub struct Credentials {
    roots: Arc<RootCertStore>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for Credentials {
    fn clone(&self) -> Self {
        Credentials { roots: Arc::clone(&self.roots), chain: self.chain.clone(), key: self.key.clone_key() }
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { what, path: path.to_path_buf(), source })
}

fn pem_error(what: &'static str, path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::Pem { what, path: path.to_path_buf(), reason: reason.into() }
}

impl Credentials {
    /// Read and check the three files.
    pub fn load(files: &TlsFiles) -> Result<Credentials, TlsError> {
        let ca_pem = read("CA certificate", &files.ca)?;
        let cert_pem = read("certificate", &files.cert)?;
        let key_pem = read("private key", &files.key)?;
        Credentials::from_pem(&ca_pem, &cert_pem, &key_pem).map_err(|(what, reason)| {
            let path = match what {
                "CA certificate" => &files.ca,
                "certificate" => &files.cert,
                _ => &files.key,
            };
            pem_error(what, path, reason)
        })
    }

    /// Credentials from PEM text; errors say which input is wrong.
    pub fn from_pem(ca: &[u8], cert: &[u8], key: &[u8]) -> Result<Credentials, (&'static str, String)> {
        let mut roots = RootCertStore::empty();
        let mut anchors = 0;
        for ca_cert in CertificateDer::pem_slice_iter(ca) {
            let ca_cert = ca_cert.map_err(|error| ("CA certificate", error.to_string()))?;
            roots.add(ca_cert).map_err(|error| ("CA certificate", error.to_string()))?;
            anchors += 1;
        }
        if anchors == 0 {
            return Err(("CA certificate", "holds no certificate".into()));
        }
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| ("certificate", error.to_string()))?;
        if chain.is_empty() {
            return Err(("certificate", "holds no certificate".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|error| ("private key", error.to_string()))?;
        Ok(Credentials { roots: Arc::new(roots), chain, key })
    }

    /// Our own certificate (the leaf of our chain).
    pub fn leaf(&self) -> &CertificateDer<'static> {
        &self.chain[0]
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn config_error(error: impl std::fmt::Display) -> TlsError {
    TlsError::Config(error.to_string())
}

/// The TLS side of a node: what its links dial with and its ports accept with.
#[derive(Clone)]
pub struct NodeTls {
    /// Dials peers: checks their certificate names the peer, presents ours.
    pub connector: TlsConnector,
    /// Accepts peers and clients: requires a certificate signed by the CA.
    pub acceptor: TlsAcceptor,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeTls")
    }
}

impl NodeTls {
    /// Build both sides from `credentials`.
    pub fn new(credentials: &Credentials) -> Result<NodeTls, TlsError> {
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::clone(&credentials.roots), provider())
            .build()
            .map_err(config_error)?;
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(credentials.chain.clone(), credentials.key.clone_key())
            .map_err(config_error)?;
        let client = client_config(credentials)?;
        Ok(NodeTls { connector: TlsConnector::from(Arc::new(client)), acceptor: TlsAcceptor::from(Arc::new(server)) })
    }
}

/// A client's TLS configuration: trust the cluster CA, present our certificate.
pub fn client_config(credentials: &Credentials) -> Result<rustls::ClientConfig, TlsError> {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_root_certificates(Arc::clone(&credentials.roots))
        .with_client_auth_cert(credentials.chain.clone(), credentials.key.clone_key())
        .map_err(config_error)
}

/// The server name a link dials `node` by.
pub(crate) fn server_name_of(node: NodeId) -> ServerName<'static> {
    ServerName::try_from(node_name(node)).unwrap_or_else(|_| ServerName::try_from(NODES_NAME).expect("a DNS name"))
}

/// T1: whether `certificate` (already verified against the CA by the TLS
/// handshake) names node `node`.
pub fn certifies_node(certificate: &CertificateDer<'_>, node: NodeId) -> bool {
    let Ok(name) = ServerName::try_from(node_name(node)) else { return false };
    let Ok(parsed) = rustls::server::ParsedCertificate::try_from(certificate) else { return false };
    rustls::client::verify_server_name(&parsed, &name).is_ok()
}

/// T2: who a client certificate is: the SHA-256 of its DER bytes.
pub fn identity_of(certificate: &CertificateDer<'_>) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, certificate.as_ref());
    let mut identity = [0u8; 32];
    identity.copy_from_slice(digest.as_ref());
    identity
}
