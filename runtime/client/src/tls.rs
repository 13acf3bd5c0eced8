//! mTLS to the client port (T2): trust only the cluster's CA, present a
//! client certificate it signed.
//!
//! A client does not know which node is behind an address, so it checks the
//! name every node's certificate carries, `nodes.cohort`
//! ([`NODES_SERVER_NAME`]), and learns the node id from the node's
//! Handshake. The crypto provider is *ring*, passed explicitly, as the
//! nodes do.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::TlsConnector;

use crate::config::TlsFiles;
use crate::error::ClientError;

/// The DNS name every node's certificate carries for clients (the nodes'
/// `NODES_NAME`, cohort-actors' `tls` module).
pub const NODES_SERVER_NAME: &str = "nodes.cohort";

/// A loaded client TLS configuration.
#[derive(Clone)]
pub(crate) struct ClientTls {
    pub(crate) connector: TlsConnector,
    pub(crate) server_name: ServerName<'static>,
    /// Our own certificate (the leaf): the identity the nodes bind ids to.
    pub(crate) certificate: CertificateDer<'static>,
}

fn file_error(path: &Path, reason: impl std::fmt::Display) -> ClientError {
    ClientError::config(path.display().to_string(), reason.to_string())
}

fn read(path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|error| file_error(path, error))
}

impl ClientTls {
    /// Read and check the three files; an error names the file.
    pub(crate) fn load(files: &TlsFiles) -> Result<ClientTls, ClientError> {
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(&read(&files.ca)?) {
            let certificate = certificate.map_err(|error| file_error(&files.ca, error))?;
            roots.add(certificate).map_err(|error| file_error(&files.ca, error))?;
        }
        if roots.is_empty() {
            return Err(file_error(&files.ca, "holds no CA certificate"));
        }
        let chain = CertificateDer::pem_slice_iter(&read(&files.cert)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| file_error(&files.cert, error))?;
        let Some(certificate) = chain.first().cloned() else {
            return Err(file_error(&files.cert, "holds no certificate"));
        };
        let key = PrivateKeyDer::from_pem_slice(&read(&files.key)?).map_err(|error| file_error(&files.key, error))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| ClientError::config("TLS", error.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|error| file_error(&files.key, format!("does not fit the certificate: {error}")))?;
        let server_name = ServerName::try_from(NODES_SERVER_NAME)
            .map_err(|error| ClientError::config("TLS server name", error.to_string()))?;
        Ok(ClientTls { connector: TlsConnector::from(Arc::new(config)), server_name, certificate })
    }
}

/// The TLS error inside an I/O error, if that is what it is: a failure
/// retrying cannot fix (a certificate of another CA, a refused client
/// certificate), as opposed to a connection that broke.
pub(crate) fn tls_failure(error: &std::io::Error) -> Option<String> {
    let inner = error.get_ref()?;
    inner.downcast_ref::<rustls::Error>().map(|tls| tls.to_string())
}
