//! The rustls configurations of revkv's listeners, built from etcd's flags: [`TlsFiles`] says
//! where the files are, [`ServerTls`] is a listener's configuration, and [`PeerTls`] adds the
//! client side that members use to call each other.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::Resumption;
use rustls::server::NoServerSessionStorage;
use rustls::{ClientConfig, ServerConfig};

use crate::error::TlsError;
use crate::reloading::{ReloadingCertificate, ReloadingClientVerifier, ReloadingServerVerifier};

/// A listener's TLS files and client certificate rule, with etcd's meanings: `cert_file` and
/// `key_file` (`--cert-file`, `--key-file`) are what the listener presents; with
/// `client_cert_auth` (`--client-cert-auth`) every client must present a certificate signed by
/// the CA in `trusted_ca_file` (`--trusted-ca-file`). As in etcd, a trusted CA without
/// `client_cert_auth` asks clients for nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub trusted_ca_file: Option<PathBuf>,
    pub client_cert_auth: bool,
}

/// A listener's rustls configuration. Its certificate and CA are reloaded from their files when
/// they change. Cheap to clone.
#[derive(Clone)]
pub struct ServerTls {
    files: TlsFiles,
    config: Arc<ServerConfig>,
}

impl ServerTls {
    /// Reads and checks the files now: a missing or malformed file, or a key that is not the
    /// certificate's, is an error naming the file.
    pub fn load(files: &TlsFiles) -> Result<ServerTls, TlsError> {
        let certificate = Arc::new(ReloadingCertificate::load(
            &files.cert_file,
            &files.key_file,
        )?);
        Self::with_certificate(files, certificate)
    }

    fn with_certificate(
        files: &TlsFiles,
        certificate: Arc<ReloadingCertificate>,
    ) -> Result<ServerTls, TlsError> {
        let builder = ServerConfig::builder_with_provider(crate::crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Settings(error.to_string()))?;
        let config = match (&files.trusted_ca_file, files.client_cert_auth) {
            (Some(ca_file), true) => builder
                .with_client_cert_verifier(Arc::new(ReloadingClientVerifier::load(ca_file)?))
                .with_cert_resolver(certificate),
            (None, true) => {
                return Err(TlsError::Settings(
                    "client certificate authentication needs a trusted CA file".into(),
                ))
            }
            (_, false) => builder
                .with_no_client_auth()
                .with_cert_resolver(certificate),
        };
        Ok(ServerTls {
            files: files.clone(),
            config: Arc::new(without_resumption(config)),
        })
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The configuration to accept connections with.
    pub fn rustls_config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }
}

/// `config` with session resumption off: a resumed session skips choosing the certificate and
/// verifying the client's, so it would go on with a replaced certificate or a replaced CA. Every
/// connection gets a full handshake instead; revkv's clients and peers keep their connections
/// open, so handshakes are rare.
fn without_resumption(mut config: ServerConfig) -> ServerConfig {
    config.session_storage = Arc::new(NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    config
}

/// The peer listener's configuration and the client configuration for calls to other members:
/// mutual TLS both ways. The peer listener requires a certificate signed by the peer CA, and the
/// client presents this member's certificate and accepts only servers the same CA signed. Cheap to
/// clone.
#[derive(Clone)]
pub struct PeerTls {
    server: ServerTls,
    client: Arc<ClientConfig>,
}

impl PeerTls {
    /// Reads and checks the files now. Members always authenticate each other, so a trusted CA and
    /// client certificate authentication (etcd's `--peer-trusted-ca-file` and
    /// `--peer-client-cert-auth`) are required.
    pub fn load(files: &TlsFiles) -> Result<PeerTls, TlsError> {
        let (Some(ca_file), true) = (&files.trusted_ca_file, files.client_cert_auth) else {
            return Err(TlsError::Settings(
                "peer TLS is always mutual: it needs the peer trusted CA file and peer client \
                 certificate authentication (--peer-trusted-ca-file and --peer-client-cert-auth)"
                    .into(),
            ));
        };
        let certificate = Arc::new(ReloadingCertificate::load(
            &files.cert_file,
            &files.key_file,
        )?);
        let server = ServerTls::with_certificate(files, certificate.clone())?;
        let mut client = ClientConfig::builder_with_provider(crate::crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Settings(error.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ReloadingServerVerifier::load(ca_file)?))
            .with_client_cert_resolver(certificate);
        // No resumption here either, so the peer's current certificate is verified every time.
        client.resumption = Resumption::disabled();
        Ok(PeerTls {
            server,
            client: Arc::new(client),
        })
    }

    /// The peer listener's side.
    pub fn server(&self) -> &ServerTls {
        &self.server
    }

    /// The configuration for calls to other members.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }
}

// A configuration's own Debug is long and says nothing about where it came from; the files do.
impl fmt::Debug for ServerTls {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("ServerTls")
            .field("files", &self.files)
            .finish()
    }
}

impl fmt::Debug for PeerTls {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("PeerTls")
            .field("files", &self.server.files)
            .finish()
    }
}
