//! A cluster's certificate authority and the certificates it issues (T1,
//! T2), for `cohort certs`, the demo and `LocalCluster`.
//!
//! Why the project makes its own: a secure cluster must be as easy to start
//! as an insecure one, so two commands (`cohort certs init`, then `cohort
//! node`) must be enough, with no OpenSSL recipe in between. The CA is per
//! cluster: its certificate's subject names the cluster id, and only
//! certificates it signed are accepted by the cluster's nodes.
//!
//! A directory holds `ca.pem`, `ca.key` (keep it off the nodes once every
//! certificate is made), `cluster-id` (the random 128-bit cluster id, hex),
//! and per identity `node-<id>.pem`/`.key` or `client-<name>.pem`/`.key`.
//! Keys are written readable by their owner only.

use std::path::{Path, PathBuf};

use cohort_client::{format_cluster_id, parse_cluster_id};
use cohort_messages::{ClusterId, NodeId};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::tls::{NODES_NAME, TlsFiles, client_name, node_name};

/// Why a certificate could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file's content is wrong.
    #[error("{}: {reason}", path.display())]
    Content {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The certificate library refused.
    #[error("making a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// `init` would overwrite an existing authority.
    #[error("{} already holds a cluster CA; use another directory, or remove it first", dir.display())]
    Exists {
        /// The directory.
        dir: PathBuf,
    },
    /// A client name that cannot be part of a DNS name.
    #[error("client name {0:?}: use 1 to 63 letters, digits and '-'")]
    ClientName(String),
}

/// File names inside a certificates directory.
pub const CA_CERT_FILE: &str = "ca.pem";
/// The CA's private key.
pub const CA_KEY_FILE: &str = "ca.key";
pub use cohort_client::CLUSTER_ID_FILE;

/// A cluster's CA, able to issue certificates.
pub struct Authority {
    cluster: ClusterId,
    params: CertificateParams,
    key: KeyPair,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").field("cluster", &self.cluster).finish_non_exhaustive()
    }
}

/// The CA's parameters, rebuilt the same way each time so a later `cohort
/// certs node` signs with the subject the CA certificate has.
fn ca_params(cluster: ClusterId) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "cohort");
    name.push(DnType::CommonName, format!("cohort cluster {}", format_cluster_id(cluster)));
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

/// A random cluster id (128 bits from the system's random source).
pub(crate) fn random_cluster_id() -> Result<ClusterId, CertsError> {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| CertsError::Content { path: PathBuf::from("/dev/urandom"), reason: "no randomness".into() })?;
    Ok(ClusterId(u128::from_le_bytes(bytes)))
}

/// A certificate and its key, in PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

impl Authority {
    /// A new CA for `cluster`.
    pub fn create(cluster: ClusterId) -> Result<Authority, CertsError> {
        Ok(Authority { cluster, params: ca_params(cluster), key: KeyPair::generate()? })
    }

    /// The cluster this CA is for.
    pub fn cluster(&self) -> ClusterId {
        self.cluster
    }

    /// The CA certificate (self-signed).
    pub fn certificate_pem(&self) -> Result<String, CertsError> {
        Ok(self.params.self_signed(&self.key)?.pem())
    }

    fn issue(
        &self,
        names: Vec<String>,
        common_name: &str,
        usages: Vec<ExtendedKeyUsagePurpose>,
    ) -> Result<Issued, CertsError> {
        let mut params = CertificateParams::new(names)?;
        let mut subject = DistinguishedName::new();
        subject.push(DnType::OrganizationName, "cohort");
        subject.push(DnType::CommonName, common_name);
        params.distinguished_name = subject;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = usages;
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// A certificate for node `node`: names `node-<id>.cohort` and
    /// `nodes.cohort` (`NODES_NAME`), for both ends of a TLS connection.
    pub fn issue_node(&self, node: NodeId) -> Result<Issued, CertsError> {
        self.issue(
            vec![node_name(node), NODES_NAME.to_string()],
            &node_name(node),
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
        )
    }

    /// A certificate for client `name` (client side of TLS only; it names
    /// no node, so no node accepts it as a peer).
    pub fn issue_client(&self, name: &str) -> Result<Issued, CertsError> {
        check_client_name(name)?;
        self.issue(vec![client_name(name)], &client_name(name), vec![ExtendedKeyUsagePurpose::ClientAuth])
    }

    /// Write a new CA and cluster id into `dir` (created if missing); refuses
    /// to overwrite one.
    pub fn init(dir: &Path) -> Result<Authority, CertsError> {
        if dir.join(CA_KEY_FILE).exists() || dir.join(CLUSTER_ID_FILE).exists() {
            return Err(CertsError::Exists { dir: dir.to_path_buf() });
        }
        std::fs::create_dir_all(dir).map_err(|source| CertsError::Io { path: dir.to_path_buf(), source })?;
        let authority = Authority::create(random_cluster_id()?)?;
        write_file(&dir.join(CLUSTER_ID_FILE), &format!("{}\n", format_cluster_id(authority.cluster)), false)?;
        write_file(&dir.join(CA_CERT_FILE), &authority.certificate_pem()?, false)?;
        write_file(&dir.join(CA_KEY_FILE), &authority.key.serialize_pem(), true)?;
        Ok(authority)
    }

    /// The CA written in `dir` by [`Authority::init`].
    pub fn load(dir: &Path) -> Result<Authority, CertsError> {
        let id_path = dir.join(CLUSTER_ID_FILE);
        let id_text = read_file(&id_path)?;
        let cluster = parse_cluster_id(&id_text)
            .map_err(|error| CertsError::Content { path: id_path.clone(), reason: error.to_string() })?;
        let key_path = dir.join(CA_KEY_FILE);
        let key = KeyPair::from_pem(&read_file(&key_path)?)
            .map_err(|error| CertsError::Content { path: key_path, reason: error.to_string() })?;
        Ok(Authority { cluster, params: ca_params(cluster), key })
    }

    /// Issue node `node`'s certificate into `dir`; returns where its files are.
    pub fn write_node(&self, dir: &Path, node: NodeId) -> Result<TlsFiles, CertsError> {
        let issued = self.issue_node(node)?;
        write_issued(&node_files(dir, node), &issued)
    }

    /// Issue client `name`'s certificate into `dir`; returns where its files are.
    pub fn write_client(&self, dir: &Path, name: &str) -> Result<TlsFiles, CertsError> {
        let issued = self.issue_client(name)?;
        write_issued(&client_files(dir, name), &issued)
    }
}

fn check_client_name(name: &str) -> Result<(), CertsError> {
    let good = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if good { Ok(()) } else { Err(CertsError::ClientName(name.to_string())) }
}

/// Where node `node`'s files are in a certificates directory.
pub fn node_files(dir: &Path, node: NodeId) -> TlsFiles {
    files_of(dir, &format!("node-{}", node.0))
}

/// Where client `name`'s files are in a certificates directory.
pub fn client_files(dir: &Path, name: &str) -> TlsFiles {
    files_of(dir, &format!("client-{name}"))
}

fn files_of(dir: &Path, stem: &str) -> TlsFiles {
    TlsFiles { ca: dir.join(CA_CERT_FILE), cert: dir.join(format!("{stem}.pem")), key: dir.join(format!("{stem}.key")) }
}

fn write_issued(files: &TlsFiles, issued: &Issued) -> Result<TlsFiles, CertsError> {
    write_file(&files.cert, &issued.cert_pem, false)?;
    write_file(&files.key, &issued.key_pem, true)?;
    Ok(files.clone())
}

fn read_file(path: &Path) -> Result<String, CertsError> {
    std::fs::read_to_string(path).map_err(|source| CertsError::Io { path: path.to_path_buf(), source })
}

fn write_file(path: &Path, text: &str, secret: bool) -> Result<(), CertsError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |source| CertsError::Io { path: path.to_path_buf(), source };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true).mode(if secret { 0o600 } else { 0o644 });
    let mut file = options.open(path).map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

/// Throwaway certificates for a local cluster of `nodes` in `dir` (the
/// demo, `LocalCluster`, tests): a fresh CA (its key kept beside, so
/// [`Authority::load`] can issue more), one certificate per node and one
/// client certificate named `local`. A directory that already holds a CA
/// (a local cluster started again on its data) keeps it.
pub fn local_cluster(dir: &Path, nodes: impl IntoIterator<Item = NodeId>) -> Result<LocalCerts, CertsError> {
    let authority = if dir.join(CA_KEY_FILE).exists() { Authority::load(dir)? } else { Authority::init(dir)? };
    let mut node_files = Vec::new();
    for node in nodes {
        node_files.push((node, authority.write_node(dir, node)?));
    }
    let client = authority.write_client(dir, "local")?;
    Ok(LocalCerts { cluster: authority.cluster, nodes: node_files, client })
}

/// What [`local_cluster`] wrote.
#[derive(Clone, Debug)]
pub struct LocalCerts {
    /// The cluster id the CA is for.
    pub cluster: ClusterId,
    /// Each node's files.
    pub nodes: Vec<(NodeId, TlsFiles)>,
    /// The `local` client's files.
    pub client: TlsFiles,
}

impl LocalCerts {
    /// Node `node`'s files.
    pub fn node(&self, node: NodeId) -> Option<&TlsFiles> {
        self.nodes.iter().find(|(id, _)| *id == node).map(|(_, files)| files)
    }
}
