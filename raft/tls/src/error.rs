//! The TLS layer's one error enum: every way loading a certificate, key or CA can fail, each
//! naming the file, so a member that cannot start says which file to fix.

use std::path::PathBuf;

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file holds no PEM certificate (or a malformed one).
    #[error("{path} holds no PEM certificate{detail}")]
    NoCertificate { path: PathBuf, detail: String },
    /// The file holds no PEM private key (or a malformed one).
    #[error("{path} holds no PEM private key{detail}")]
    NoPrivateKey { path: PathBuf, detail: String },
    /// The key is not usable with the certificate (unsupported, or not the certificate's key).
    #[error("the key in {key_file} does not fit the certificate in {cert_file}: {reason}")]
    KeyMismatch {
        cert_file: PathBuf,
        key_file: PathBuf,
        reason: String,
    },
    /// The CA file's certificates cannot serve as trust anchors.
    #[error("the CA certificates in {path} are not usable: {reason}")]
    BadCa { path: PathBuf, reason: String },
    /// The settings do not fit together (for example client certificate authentication without a
    /// trusted CA).
    #[error("{0}")]
    Settings(String),
}
