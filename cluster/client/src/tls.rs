//! TLS settings of a [`Client`](crate::Client), as etcdctl has them: the CA that members'
//! certificates are checked against (`--cacert`), and a client certificate and key for members
//! that require one (`--cert`, `--key`, for `--client-cert-auth`).

use std::path::{Path, PathBuf};

use crate::error::ClientError;

/// Where the client's CA, certificate and key are (PEM files). Empty: plain HTTP only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA bundle members' certificates are verified against; `https://` endpoints need it.
    pub ca_file: Option<PathBuf>,
    /// The certificate to present to members that require one; needs `key_file`.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl ClientTls {
    /// True when no file is named.
    pub fn is_empty(&self) -> bool {
        self == &ClientTls::default()
    }

    /// Adds the CA and the identity to `builder` (rustls, with only the given CA trusted). For
    /// callers that build their own `reqwest` clients (the bench).
    pub fn configure(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, ClientError> {
        if self.is_empty() {
            return Ok(builder);
        }
        builder = builder.use_rustls_tls();
        if let Some(ca_file) = &self.ca_file {
            let bundle = reqwest::Certificate::from_pem_bundle(&read(ca_file)?)
                .map_err(|error| bad_file(ca_file, error))?;
            if bundle.is_empty() {
                return Err(bad_file(ca_file, "no PEM certificate in it"));
            }
            for certificate in bundle {
                builder = builder.add_root_certificate(certificate);
            }
        }
        match (&self.cert_file, &self.key_file) {
            (Some(cert_file), Some(key_file)) => {
                let mut pem = read(cert_file)?;
                pem.push(b'\n');
                pem.extend(read(key_file)?);
                let identity =
                    reqwest::Identity::from_pem(&pem).map_err(|error| ClientError::Invalid {
                        message: format!(
                            "the client certificate {} and key {} do not load: {error}",
                            cert_file.display(),
                            key_file.display()
                        ),
                    })?;
                Ok(builder.identity(identity))
            }
            (None, None) => Ok(builder),
            _ => Err(ClientError::Invalid {
                message: "a client certificate and its key go together: give both or neither"
                    .into(),
            }),
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|error| bad_file(path, error))
}

fn bad_file(path: &Path, error: impl std::fmt::Display) -> ClientError {
    ClientError::Invalid {
        message: format!("{}: {error}", path.display()),
    }
}
