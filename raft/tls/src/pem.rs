//! Reading PEM files: certificate chains, private keys and CA bundles, with errors that name the
//! file.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;

use crate::error::TlsError;

/// The certificate chain in `bytes` (read from `path`), end-entity certificate first.
pub(crate) fn certificates(
    path: &Path,
    bytes: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::NoCertificate {
            path: path.to_path_buf(),
            detail: format!(": {error}"),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
            detail: String::new(),
        });
    }
    Ok(chain)
}

/// The first private key in `bytes` (read from `path`; PKCS#8, PKCS#1 or SEC1).
pub(crate) fn private_key(path: &Path, bytes: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(bytes).map_err(|error| TlsError::NoPrivateKey {
        path: path.to_path_buf(),
        detail: match error {
            rustls::pki_types::pem::Error::NoItemsFound => String::new(),
            other => format!(": {other}"),
        },
    })
}

/// The certificate and key read from `cert_file` and `key_file`, checked to belong together.
pub(crate) fn certified_key(
    (cert_file, cert_bytes): (&Path, &[u8]),
    (key_file, key_bytes): (&Path, &[u8]),
) -> Result<CertifiedKey, TlsError> {
    let chain = certificates(cert_file, cert_bytes)?;
    let key = private_key(key_file, key_bytes)?;
    CertifiedKey::from_der(chain, key, &crate::crypto_provider()).map_err(|error| {
        TlsError::KeyMismatch {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            reason: error.to_string(),
        }
    })
}

/// Every certificate in `bytes` (read from `path`) as a trust anchor.
pub(crate) fn trust_anchors(path: &Path, bytes: &[u8]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(path, bytes)? {
        roots.add(certificate).map_err(|error| TlsError::BadCa {
            path: path.to_path_buf(),
            reason: error.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

/// The whole file, or an error naming it.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}
