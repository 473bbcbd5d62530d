//! rustls hooks that read their certificate, key or CA from [`Watched`] files, so every new
//! handshake uses what the files hold now: the server's certificate, the peer client's
//! certificate, and the CA that client and server certificates are verified against.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

use crate::error::TlsError;
use crate::pem;
use crate::watched::Watched;

/// A certificate and key pair, reloaded when either file changes. Serves as the server's
/// certificate and as the certificate a peer client presents.
#[derive(Debug)]
pub(crate) struct ReloadingCertificate {
    key: Watched<CertifiedKey>,
}

impl ReloadingCertificate {
    pub(crate) fn load(cert_file: &Path, key_file: &Path) -> Result<Self, TlsError> {
        let (cert, key) = (cert_file.to_path_buf(), key_file.to_path_buf());
        let paths = vec![cert.clone(), key.clone()];
        let load = Box::new(move |contents: &[Vec<u8>]| {
            pem::certified_key((&cert, &contents[0]), (&key, &contents[1]))
        });
        Ok(ReloadingCertificate {
            key: Watched::load("certificate", paths, load)?,
        })
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.key.current())
    }
}

impl ResolvesClientCert for ReloadingCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.key.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Loads the CA file's certificates as a verifier of some kind.
fn watched_ca<T: 'static>(
    ca_file: &Path,
    build: impl Fn(Arc<rustls::RootCertStore>, &Path) -> Result<T, TlsError> + Send + Sync + 'static,
) -> Result<Watched<T>, TlsError> {
    let path: PathBuf = ca_file.to_path_buf();
    let paths = vec![path.clone()];
    let load = Box::new(move |contents: &[Vec<u8>]| {
        build(pem::trust_anchors(&path, &contents[0])?, &path)
    });
    Watched::load("trusted CA", paths, load)
}

fn bad_ca(path: &Path, error: impl std::fmt::Display) -> TlsError {
    TlsError::BadCa {
        path: path.to_path_buf(),
        reason: error.to_string(),
    }
}

/// Requires every client to present a certificate signed by the CA in the file, reloaded when the
/// file changes.
#[derive(Debug)]
pub(crate) struct ReloadingClientVerifier {
    verifier: Watched<Arc<dyn ClientCertVerifier>>,
}

impl ReloadingClientVerifier {
    pub(crate) fn load(ca_file: &Path) -> Result<Self, TlsError> {
        let verifier = watched_ca(ca_file, |roots, path| {
            WebPkiClientVerifier::builder_with_provider(roots, crate::crypto_provider())
                .build()
                .map_err(|error| bad_ca(path, error))
        })?;
        Ok(ReloadingClientVerifier { verifier })
    }
}

impl ClientCertVerifier for ReloadingClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    /// No hints: the hints would have to outlive a reload of the CA. A client then offers
    /// whatever certificate it has, which is what revkv's clients and peers do anyway.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        self.verifier
            .current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.verifier
            .current()
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.verifier
            .current()
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier.current().supported_verify_schemes()
    }
}

/// Verifies a server's certificate against the CA in the file, reloaded when the file changes.
#[derive(Debug)]
pub(crate) struct ReloadingServerVerifier {
    verifier: Watched<Arc<WebPkiServerVerifier>>,
}

impl ReloadingServerVerifier {
    pub(crate) fn load(ca_file: &Path) -> Result<Self, TlsError> {
        let verifier = watched_ca(ca_file, |roots, path| {
            WebPkiServerVerifier::builder_with_provider(roots, crate::crypto_provider())
                .build()
                .map_err(|error| bad_ca(path, error))
        })?;
        Ok(ReloadingServerVerifier { verifier })
    }
}

impl ServerCertVerifier for ReloadingServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.verifier.current().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.verifier
            .current()
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.verifier
            .current()
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier.current().supported_verify_schemes()
    }
}
