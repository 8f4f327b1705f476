//! TLS on the listener (`serve --tls-cert --tls-key`): rustls with the
//! ring provider, so no OpenSSL is in the server's path. A certificate or
//! key that cannot be used is a clear error before anything listens.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The PEM files the listener serves TLS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--tls-cert {path}: {why}")]
    Cert { path: PathBuf, why: String },
    #[error("--tls-key {path}: {why}")]
    Key { path: PathBuf, why: String },
    #[error("--tls-cert and --tls-key do not go together: {0}")]
    Mismatch(String),
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |why: String| TlsError::Cert {
        path: path.to_path_buf(),
        why,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    // The error names the file and what is wrong, never the key's bytes.
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Key {
        path: path.to_path_buf(),
        why: match e {
            rustls::pki_types::pem::Error::NoItemsFound => "no PEM private key in the file".into(),
            other => other.to_string(),
        },
    })
}

/// The server's rustls configuration: HTTP/1.1 and HTTP/2 by ALPN.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = certificates(&files.cert)?;
    let key = private_key(&files.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Mismatch(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Mismatch(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
