//! The TLS of the client and peer listeners, from etcd's certificate flags. The files are read
//! and checked here, while the settings are assembled, so a missing or bad file stops the start
//! with its name rather than failing the first connection.

use std::path::PathBuf;

use revkv_tls::{PeerTls, ServerTls, TlsFiles};

use super::ServeArgs;

impl ServeArgs {
    /// The client listener's TLS (etcd's `--cert-file`, `--key-file`, `--trusted-ca-file`,
    /// `--client-cert-auth`), its files read and checked now.
    pub(super) fn client_tls(&self) -> Result<Option<ServerTls>, String> {
        let client_cert_auth = self.client_cert_auth.unwrap_or(false);
        let Some(files) = tls_files(
            "",
            (&self.cert_file, &self.key_file),
            &self.trusted_ca_file,
            client_cert_auth,
        )?
        else {
            return Ok(None);
        };
        if files.trusted_ca_file.is_some() && !client_cert_auth {
            tracing::warn!(
                "--trusted-ca-file without --client-cert-auth: clients are not asked for \
                 certificates (as in etcd)"
            );
        }
        let tls = ServerTls::load(&files).map_err(|error| format!("client TLS: {error}"))?;
        Ok(Some(tls))
    }

    /// Mutual TLS between members (the `--peer-` set of the same flags).
    pub(super) fn peer_tls(&self) -> Result<Option<PeerTls>, String> {
        let Some(files) = tls_files(
            "peer-",
            (&self.peer_cert_file, &self.peer_key_file),
            &self.peer_trusted_ca_file,
            self.peer_client_cert_auth.unwrap_or(false),
        )?
        else {
            return Ok(None);
        };
        let tls = PeerTls::load(&files).map_err(|error| format!("peer TLS: {error}"))?;
        Ok(Some(tls))
    }
}

/// The files of one listener's TLS, or `None` when it has none; the flags are named with their
/// `prefix` (`""` or `"peer-"`) when they do not fit together.
fn tls_files(
    prefix: &str,
    (cert_file, key_file): (&Option<PathBuf>, &Option<PathBuf>),
    trusted_ca_file: &Option<PathBuf>,
    client_cert_auth: bool,
) -> Result<Option<TlsFiles>, String> {
    match (cert_file, key_file) {
        (Some(cert_file), Some(key_file)) => Ok(Some(TlsFiles {
            cert_file: cert_file.clone(),
            key_file: key_file.clone(),
            trusted_ca_file: trusted_ca_file.clone(),
            client_cert_auth,
        })),
        (None, None) if trusted_ca_file.is_none() && !client_cert_auth => Ok(None),
        (None, None) => Err(format!(
            "--{prefix}trusted-ca-file and --{prefix}client-cert-auth need --{prefix}cert-file and \
             --{prefix}key-file"
        )),
        _ => Err(format!(
            "--{prefix}cert-file and --{prefix}key-file go together: give both or neither"
        )),
    }
}
