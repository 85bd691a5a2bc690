//! Throwaway certificates for the TLS tests: a CA and a leaf for `localhost` and 127.0.0.1 it
//! signed (rustls, like browsers, refuses a self-signed CA certificate used as the server's own).

use std::path::{Path, PathBuf};

/// PEM files of a test PKI.
pub struct TestPki {
    /// The CA certificate (trust this).
    pub ca: PathBuf,
    /// The server's certificate, signed by the CA.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

/// Write a fresh CA and a leaf for `localhost`/127.0.0.1 into `dir`.
pub fn test_pki(dir: &Path) -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "ontime test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).unwrap();
    let pki = TestPki {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    std::fs::write(&pki.ca, ca_cert.pem()).unwrap();
    std::fs::write(&pki.cert, leaf_cert.pem()).unwrap();
    std::fs::write(&pki.key, leaf_key.serialize_pem()).unwrap();
    pki
}
