//! Certificates for the TLS tests and the serve benchmark, made with
//! rcgen: a CA, server certificates for 127.0.0.1 and client certificates
//! naming a principal in a URI SAN (mTLS).

use rcgen::{BasicConstraints, Certificate, CertificateParams, IsCa, KeyPair, SanType};
use std::path::{Path, PathBuf};

/// A certificate authority of a test's own.
pub struct TestCa {
    key: KeyPair,
    cert: Certificate,
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCa {
    pub fn new() -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        TestCa { key, cert }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// Write the CA certificate to `<dir>/<name>-ca.pem`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&path, self.pem()).unwrap();
        path
    }

    /// A server certificate for 127.0.0.1 and localhost: (cert, key) PEM
    /// files `<dir>/<name>-cert.pem`, `<dir>/<name>-key.pem`.
    pub fn server(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        self.issue(params, dir, name)
    }

    /// A client certificate whose URI SANs are `uris`: (cert, key).
    pub fn client(&self, dir: &Path, name: &str, uris: &[&str]) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = uris
            .iter()
            .map(|u| SanType::URI((*u).try_into().unwrap()))
            .collect();
        self.issue(params, dir, name)
    }

    fn issue(&self, params: CertificateParams, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let paths = (
            dir.join(format!("{name}-cert.pem")),
            dir.join(format!("{name}-key.pem")),
        );
        std::fs::write(&paths.0, cert.pem()).unwrap();
        std::fs::write(&paths.1, key.serialize_pem()).unwrap();
        paths
    }
}
