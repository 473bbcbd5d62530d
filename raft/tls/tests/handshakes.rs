//! The TLS listener against real handshakes on loopback: which certificate a new handshake sees
//! after the files change, who is refused, and which bad files stop a listener from starting.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use revkv_tls::rustls::pki_types::{CertificateDer, ServerName};
use revkv_tls::rustls::{ClientConfig, RootCertStore};
use revkv_tls::testing::{CertificateFiles, TestCa};
use revkv_tls::{PeerTls, ServerTls, TlsError, TlsFiles};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// How long a test waits for a rotation to show.
const ROTATION_DEADLINE: Duration = Duration::from_secs(10);

fn files(certificate: &CertificateFiles, ca: Option<&Path>, client_cert_auth: bool) -> TlsFiles {
    TlsFiles {
        cert_file: certificate.cert_file.clone(),
        key_file: certificate.key_file.clone(),
        trusted_ca_file: ca.map(Path::to_path_buf),
        client_cert_auth,
    }
}

/// Serves a router answering "hello" on a free loopback port with `tls`.
async fn start_server(tls: &ServerTls) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = Router::new().route("/", get(|| async { "hello" }));
    let tls = tls.clone();
    tokio::spawn(async move {
        revkv_tls::serve(listener, Some(&tls), router, std::future::pending()).await
    });
    address
}

fn roots(ca: &TestCa) -> Arc<RootCertStore> {
    let mut roots = RootCertStore::empty();
    let der = CertificateDer::from_pem_slice(ca.certificate_pem().as_bytes()).unwrap();
    roots.add(der).unwrap();
    Arc::new(roots)
}

use revkv_tls::rustls::pki_types::pem::PemObject;

/// A client trusting `ca`, presenting `identity` when given.
fn client_config(ca: &TestCa, identity: Option<&TestCa>) -> Arc<ClientConfig> {
    let builder = ClientConfig::builder_with_provider(revkv_tls::crypto_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots(ca));
    let config = match identity {
        Some(issuer) => {
            let (certificate, key) = issuer.issue_pem("a client");
            let chain = CertificateDer::pem_slice_iter(certificate.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = revkv_tls::rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes())
                .unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// One GET / over TLS: the server certificate seen and the answer's first line, or why not.
async fn get_over_tls(
    address: SocketAddr,
    config: Arc<ClientConfig>,
) -> Result<(Vec<u8>, String), String> {
    let stream = TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|error| format!("handshake: {error}"))?;
    let seen = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let request = b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n";
    tls.write_all(request)
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = String::new();
    tls.read_to_string(&mut answer)
        .await
        .map_err(|error| format!("read: {error}"))?;
    let first_line = answer.lines().next().unwrap_or("").to_string();
    if first_line.is_empty() {
        return Err("no answer".into());
    }
    Ok((seen, first_line))
}

fn certificate_der(path: &Path) -> Vec<u8> {
    let pem = std::fs::read(path).unwrap();
    CertificateDer::from_pem_slice(&pem).unwrap().to_vec()
}

/// Replaces a certificate and key the way an operator's tooling does: write aside, then rename.
fn replace(target: &CertificateFiles, with: &CertificateFiles) {
    for (from, to) in [
        (&with.key_file, &target.key_file),
        (&with.cert_file, &target.cert_file),
    ] {
        let aside = to.with_extension("new");
        std::fs::copy(from, &aside).unwrap();
        std::fs::rename(&aside, to).unwrap();
    }
}

#[tokio::test]
async fn a_tls_listener_serves_clients_that_trust_its_ca() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test CA");
    let server = ca.issue(directory.path(), "server");
    let address = start_server(&ServerTls::load(&files(&server, None, false)).unwrap()).await;
    let (seen, status) = get_over_tls(address, client_config(&ca, None))
        .await
        .unwrap();
    assert_eq!(seen, certificate_der(&server.cert_file));
    assert_eq!(status, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn new_handshakes_see_a_replaced_certificate_without_a_restart() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test CA");
    let server = ca.issue(directory.path(), "server");
    let address = start_server(&ServerTls::load(&files(&server, None, false)).unwrap()).await;
    let first = certificate_der(&server.cert_file);
    // One client configuration throughout: its session cache would resume the first session (and
    // its certificate) if the server allowed resumption.
    let client = client_config(&ca, None);
    let (seen, _) = get_over_tls(address, client.clone()).await.unwrap();
    assert_eq!(seen, first);

    let rotated = ca.issue(directory.path(), "rotated");
    replace(&server, &rotated);
    let expected = certificate_der(&rotated.cert_file);
    assert_ne!(expected, first);
    let deadline = Instant::now() + ROTATION_DEADLINE;
    loop {
        let (seen, status) = get_over_tls(address, client.clone()).await.unwrap();
        assert_eq!(status, "HTTP/1.1 200 OK");
        if seen == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate never showed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_replacement_that_does_not_load_keeps_the_previous_certificate() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test CA");
    let server = ca.issue(directory.path(), "server");
    let address = start_server(&ServerTls::load(&files(&server, None, false)).unwrap()).await;
    let first = certificate_der(&server.cert_file);
    // A new certificate whose key has not been written yet: the pair does not match.
    let rotated = ca.issue(directory.path(), "rotated");
    std::fs::copy(&rotated.cert_file, &server.cert_file).unwrap();
    let (seen, status) = get_over_tls(address, client_config(&ca, None))
        .await
        .unwrap();
    assert_eq!((seen, status.as_str()), (first, "HTTP/1.1 200 OK"));
    // Once the key follows, the pair loads.
    std::fs::copy(&rotated.key_file, &server.key_file).unwrap();
    let (seen, _) = get_over_tls(address, client_config(&ca, None))
        .await
        .unwrap();
    assert_eq!(seen, certificate_der(&rotated.cert_file));
}

#[tokio::test]
async fn client_cert_auth_refuses_clients_without_a_certificate_of_the_ca() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test CA");
    let foreign = TestCa::new("foreign CA");
    let ca_file = ca.write_certificate(&directory.path().join("ca.pem"));
    let server = ca.issue(directory.path(), "server");
    let tls = ServerTls::load(&files(&server, Some(&ca_file), true)).unwrap();
    let address = start_server(&tls).await;
    let (_, status) = get_over_tls(address, client_config(&ca, Some(&ca)))
        .await
        .unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    let anonymous = get_over_tls(address, client_config(&ca, None)).await;
    assert!(anonymous.is_err(), "no certificate: {anonymous:?}");
    let outsider = get_over_tls(address, client_config(&ca, Some(&foreign))).await;
    assert!(outsider.is_err(), "foreign CA: {outsider:?}");
}

#[tokio::test]
async fn peers_refuse_a_member_certificate_of_another_ca_both_ways() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("cluster CA");
    let foreign = TestCa::new("foreign CA");
    let ca_file = ca.write_certificate(&directory.path().join("ca.pem"));
    let foreign_ca_file = foreign.write_certificate(&directory.path().join("foreign-ca.pem"));
    let member = ca.issue(directory.path(), "member");
    let intruder = foreign.issue(directory.path(), "intruder");
    let member_tls = PeerTls::load(&files(&member, Some(&ca_file), true)).unwrap();
    let intruder_tls = PeerTls::load(&files(&intruder, Some(&foreign_ca_file), true)).unwrap();
    let member_address = start_server(member_tls.server()).await;
    let intruder_address = start_server(intruder_tls.server()).await;

    let (_, status) = get_over_tls(member_address, member_tls.client_config())
        .await
        .unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK", "a member calls a member");
    let inbound = get_over_tls(member_address, intruder_tls.client_config()).await;
    assert!(inbound.is_err(), "the intruder calls a member: {inbound:?}");
    let outbound = get_over_tls(intruder_address, member_tls.client_config()).await;
    assert!(
        outbound.unwrap_err().starts_with("handshake"),
        "a member never talks to a server of another CA"
    );
}

#[tokio::test]
async fn plain_http_to_a_tls_listener_gets_no_http_answer() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test CA");
    let server = ca.issue(directory.path(), "server");
    let address = start_server(&ServerTls::load(&files(&server, None, false)).unwrap()).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    assert!(
        !answer.starts_with(b"HTTP/"),
        "answered plain HTTP: {:?}",
        String::from_utf8_lossy(&answer)
    );
}

#[test]
fn bad_files_are_errors_that_name_the_file() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test CA");
    let good = ca.issue(directory.path(), "good");
    let other = ca.issue(directory.path(), "other");
    let missing = directory.path().join("missing.pem");
    let garbage = directory.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let load = |cert: &Path, key: &Path, ca: Option<&Path>, auth| {
        let files = TlsFiles {
            cert_file: cert.to_path_buf(),
            key_file: key.to_path_buf(),
            trusted_ca_file: ca.map(Path::to_path_buf),
            client_cert_auth: auth,
        };
        ServerTls::load(&files).map(|_| ()).unwrap_err()
    };
    let error = load(&missing, &good.key_file, None, false);
    assert!(matches!(error, TlsError::Read { .. }), "{error}");
    assert!(error.to_string().contains("missing.pem"), "{error}");
    let error = load(&garbage, &good.key_file, None, false);
    assert!(matches!(error, TlsError::NoCertificate { .. }), "{error}");
    let error = load(&good.cert_file, &garbage, None, false);
    assert!(matches!(error, TlsError::NoPrivateKey { .. }), "{error}");
    let error = load(&good.cert_file, &other.key_file, None, false);
    assert!(matches!(error, TlsError::KeyMismatch { .. }), "{error}");
    let error = load(&good.cert_file, &good.key_file, None, true);
    assert!(matches!(error, TlsError::Settings(_)), "{error}");
    let error = load(&good.cert_file, &good.key_file, Some(&garbage), true);
    assert!(error.to_string().contains("garbage.pem"), "{error}");
    let peer_without_auth = PeerTls::load(&files(&good, None, false)).unwrap_err();
    assert!(
        peer_without_auth
            .to_string()
            .contains("--peer-client-cert-auth"),
        "{peer_without_auth}"
    );
}
