//! TLS on the listener (`serve --tls-cert --tls-key`): rustls with the
//! ring provider, so no OpenSSL is in the server's path. A certificate or
//! key that cannot be used is a clear error before anything listens.
//!
//! With `--client-ca`, clients may show a certificate signed by that CA
//! (mTLS); the principal it names is read once per connection after the
//! handshake (`intake::serve`) and handed to every request of the
//! connection as a [`ClientIdentity`].
//! A client without a certificate still connects and shows a bearer token.

use crate::auth::client_cert::{grant_of_certificate, lapse_of_certificate};
use crate::auth::{Grant, Unauthenticated};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The PEM files the listener serves TLS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Certificate authorities whose client certificates authenticate
    /// (mTLS); none asked for when `None`.
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--tls-cert {path}: {why}")]
    Cert { path: PathBuf, why: String },
    #[error("--tls-key {path}: {why}")]
    Key { path: PathBuf, why: String },
    #[error("--tls-cert and --tls-key do not go together: {0}")]
    Mismatch(String),
    #[error("--client-ca {path}: {why}")]
    ClientCa { path: PathBuf, why: String },
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    read_certificates(path, |why| TlsError::Cert {
        path: path.to_path_buf(),
        why,
    })
}

/// The certificates of a PEM file; `bad` says which flag's file is wrong.
fn read_certificates(
    path: &Path,
    bad: impl Fn(String) -> TlsError,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
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
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Mismatch(e.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let bad = |why: String| TlsError::ClientCa {
                path: path.clone(),
                why,
            };
            let mut roots = rustls::RootCertStore::empty();
            for ca in read_certificates(path, bad)? {
                roots.add(ca).map_err(|e| bad(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                // Bearer tokens stay a way in: a certificate is asked
                // for, not required.
                .allow_unauthenticated()
                .build()
                .map_err(|e| bad(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Mismatch(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Who a connection's client certificate names: the grant, or why it names
/// no one (then a request needs a bearer token). Absent from requests of
/// connections that showed no certificate.
#[derive(Debug, Clone)]
pub struct ClientIdentity(pub Result<(Arc<Grant>, Option<u64>), Unauthenticated>);

/// The principal a connection's client certificate names, if it showed
/// one (the verifier already checked the chain and its validity).
pub fn client_identity(conn: &rustls::ServerConnection) -> Option<ClientIdentity> {
    conn.peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| {
            let lapses = lapse_of_certificate(leaf);
            ClientIdentity(grant_of_certificate(leaf).map(|g| (Arc::new(g), lapses)))
        })
}
