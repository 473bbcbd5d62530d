//! rustls hooks that read their certificate, key or CA from [`Watched`] files, so every new
//! handshake uses what the files hold now: the server's certificate, the peer client's
//! certificate, and the CA that client and server certificates are verified against.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{
    verify_tls12_signature, verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms,
};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::VerifierBuilderError;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, Error, RootCertStore, SignatureScheme};

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

/// A rustls verifier built from the CA file's certificates and rebuilt when the file changes. `V`
/// is its kind: a verifier of client certificates ([`ReloadingClientVerifier`]) or of server
/// certificates ([`ReloadingServerVerifier`]). Only the certificate check needs the CA: the
/// handshake's signature checks use the crypto provider's algorithms, as rustls's own verifiers
/// do, so both kinds share them here.
#[derive(Debug)]
pub(crate) struct ReloadingVerifier<V: ?Sized> {
    verifier: Watched<Arc<V>>,
    algorithms: WebPkiSupportedAlgorithms,
}

/// Requires every client to present a certificate signed by the CA in the file.
pub(crate) type ReloadingClientVerifier = ReloadingVerifier<dyn ClientCertVerifier>;

/// Verifies a server's certificate against the CA in the file.
pub(crate) type ReloadingServerVerifier = ReloadingVerifier<WebPkiServerVerifier>;

impl<V: ?Sized + Send + Sync + 'static> ReloadingVerifier<V> {
    /// Loads the CA file's certificates and `build`s the verifier from them, and does it again
    /// for the first handshake after the file changes.
    fn watching_ca(
        ca_file: &Path,
        build: impl Fn(Arc<RootCertStore>, Arc<CryptoProvider>) -> Result<Arc<V>, VerifierBuilderError>
            + Send
            + Sync
            + 'static,
    ) -> Result<Self, TlsError> {
        let path = ca_file.to_path_buf();
        let paths = vec![path.clone()];
        let load = Box::new(move |contents: &[Vec<u8>]| {
            let roots = pem::trust_anchors(&path, &contents[0])?;
            build(roots, crate::crypto_provider()).map_err(|error| TlsError::BadCa {
                path: path.clone(),
                reason: error.to_string(),
            })
        });
        Ok(ReloadingVerifier {
            verifier: Watched::load("trusted CA", paths, load)?,
            algorithms: crate::crypto_provider().signature_verification_algorithms,
        })
    }
}

impl ReloadingClientVerifier {
    pub(crate) fn load(ca_file: &Path) -> Result<Self, TlsError> {
        Self::watching_ca(ca_file, |roots, provider| {
            WebPkiClientVerifier::builder_with_provider(roots, provider).build()
        })
    }
}

impl ReloadingServerVerifier {
    pub(crate) fn load(ca_file: &Path) -> Result<Self, TlsError> {
        Self::watching_ca(ca_file, |roots, provider| {
            WebPkiServerVerifier::builder_with_provider(roots, provider).build()
        })
    }
}

/// The handshake's signature checks, which `ClientCertVerifier` and `ServerCertVerifier` declare
/// alike: a macro, because two traits cannot share one method's body.
macro_rules! signature_checks {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            verify_tls12_signature(message, cert, dss, &self.algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            verify_tls13_signature(message, cert, dss, &self.algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.algorithms.supported_schemes()
        }
    };
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

    signature_checks!();
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

    signature_checks!();
}
