//! Throw-away certificates for tests (feature `test-certificates`): a CA, and member
//! certificates it signs for 127.0.0.1 and localhost, usable both as server and as client
//! certificates (a member's peer certificate is both).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate authority that lives as long as the test.
pub struct TestCa {
    params: CertificateParams,
    key: KeyPair,
    pem: String,
}

/// A certificate and key written to files.
#[derive(Clone, Debug)]
pub struct CertificateFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl TestCa {
    /// A new CA whose certificate names `name`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a CA key");
        let pem = params.self_signed(&key).expect("a CA certificate").pem();
        TestCa { params, key, pem }
    }

    /// The CA certificate in PEM.
    pub fn certificate_pem(&self) -> &str {
        &self.pem
    }

    /// Writes the CA certificate to `path` and returns the path.
    pub fn write_certificate(&self, path: &Path) -> PathBuf {
        std::fs::write(path, &self.pem).expect("write the CA certificate");
        path.to_path_buf()
    }

    /// A new certificate for 127.0.0.1 and localhost named `name`, signed by this CA, as PEM
    /// certificate and key.
    pub fn issue_pem(&self, name: &str) -> (String, String) {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
            .expect("certificate parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().expect("a key");
        let issuer = Issuer::from_params(&self.params, &self.key);
        let certificate = params
            .signed_by(&key, &issuer)
            .expect("a signed certificate");
        (certificate.pem(), key.serialize_pem())
    }

    /// [`issue_pem`](Self::issue_pem), written to `<directory>/<name>.pem` and
    /// `<directory>/<name>-key.pem`.
    pub fn issue(&self, directory: &Path, name: &str) -> CertificateFiles {
        let (certificate, key) = self.issue_pem(name);
        let files = CertificateFiles {
            cert_file: directory.join(format!("{name}.pem")),
            key_file: directory.join(format!("{name}-key.pem")),
        };
        std::fs::write(&files.cert_file, certificate).expect("write a certificate");
        std::fs::write(&files.key_file, key).expect("write a key");
        files
    }
}
