//! TLS end to end: real `revkv serve` processes with client and peer TLS, certificates made at
//! test time with rcgen. A TLS cluster serves the typed client and `revkv ctl` over https with the
//! CA and refuses plain HTTP; a replaced certificate is seen by new handshakes without a restart;
//! `--client-cert-auth` refuses clients without a certificate of the CA; a member whose
//! certificate comes from another CA is refused by the cluster's peers at the handshake; bad
//! certificate files stop `revkv serve` with a clear error.

use crate::process_cluster;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use process_cluster::{
    cluster_options, wait_until, ClusterTls, ProcessCluster, CONVERGENCE_TIMEOUT, REVKV_BINARY,
};
use revkv_client::{Client, ClientTls};
use revkv_tls::testing::TestCa;
use serde_json::json;

/// A CA and one member certificate in `directory`, as the harness's cluster TLS.
fn cluster_tls(directory: &Path, ca: &TestCa, client_cert_auth: bool) -> ClusterTls {
    let member = ca.issue(directory, "member");
    ClusterTls {
        ca_file: ca.write_certificate(&directory.join("ca.pem")),
        cert_file: member.cert_file,
        key_file: member.key_file,
        client_cert_auth,
    }
}

/// A client that trusts only the CA and keeps no connection, so every request makes a new
/// handshake; it records the server certificate of each answer.
fn fresh_handshake_client(ca_file: &Path) -> reqwest::Client {
    let tls = ClientTls {
        ca_file: Some(ca_file.to_path_buf()),
        ..ClientTls::default()
    };
    let builder = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .tls_info(true)
        .timeout(Duration::from_secs(10));
    tls.configure(builder).unwrap().build().unwrap()
}

/// The DER of the certificate the member at `url` presents on a new connection.
async fn served_certificate(client: &reqwest::Client, url: &str) -> Option<Vec<u8>> {
    let response = client.get(format!("{url}/healthz")).send().await.ok()?;
    let info = response.extensions().get::<reqwest::tls::TlsInfo>()?;
    info.peer_certificate().map(<[u8]>::to_vec)
}

fn certificate_der(pem: &str) -> Vec<u8> {
    use revkv_tls::rustls::pki_types::pem::PemObject;
    revkv_tls::rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// Replaces a file the way certificate tooling does: write aside, then rename over it.
fn replace_file(path: &Path, contents: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, contents).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_https_with_its_ca_refuses_plain_http_and_rotates_certificates() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("revkv test CA");
    let tls = cluster_tls(directory.path(), &ca, false);
    let cluster = ProcessCluster::start(3, cluster_options().with_tls(tls.clone())).await;
    cluster.wait_for_published_client_urls().await;
    let urls = cluster.client_urls();
    assert!(
        urls.iter().all(|url| url.starts_with("https://")),
        "{urls:?}"
    );

    // A write through one member, replicated over mutual TLS, read through another.
    let client = Client::builder(vec![urls[0].clone()])
        .tls(ClientTls {
            ca_file: Some(tls.ca_file.clone()),
            ..ClientTls::default()
        })
        .build()
        .unwrap();
    client.put("tls/greeting", "hello").await.unwrap();
    let reader = Client::builder(vec![urls[2].clone()])
        .tls(ClientTls {
            ca_file: Some(tls.ca_file.clone()),
            ..ClientTls::default()
        })
        .build()
        .unwrap();
    assert_eq!(reader.get("tls/greeting").await.unwrap().kv.value, "hello");

    // revkv ctl with etcdctl's --cacert, through the failover client and one client per member.
    let ctl = |args: &[&str]| {
        let output = Command::new(REVKV_BINARY)
            .args(["ctl", "--endpoints", &urls.join(",")])
            .args(["--cacert", &tls.ca_file.display().to_string()])
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "ctl {args:?}: {stdout} {stderr}");
        stdout
    };
    let got = ctl(&["get", "tls/greeting", "-o", "json"]);
    assert!(got.contains("\"hello\""), "{got}");
    let status = ctl(&["status"]);
    assert_eq!(status.matches("https://127.0.0.1:").count(), 3, "{status}");

    // Plain HTTP to the TLS listener gets no HTTP answer.
    let plain_url = urls[1].replacen("https://", "http://", 1);
    let plain = reqwest::Client::new()
        .get(format!("{plain_url}/healthz"))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    // And a client that does not trust the CA refuses the member.
    let untrusting = Client::builder(vec![urls[1].clone()])
        .tls(ClientTls {
            ca_file: Some(
                TestCa::new("another CA").write_certificate(&directory.path().join("other-ca.pem")),
            ),
            ..ClientTls::default()
        })
        .max_attempts(1)
        .build()
        .unwrap();
    assert!(untrusting.get("tls/greeting").await.is_err());

    // Rotation: new files from the same CA; new handshakes see the new certificate, no restart.
    let handshakes = fresh_handshake_client(&tls.ca_file);
    let before = served_certificate(&handshakes, &urls[0]).await.unwrap();
    assert_eq!(
        before,
        certificate_der(&std::fs::read_to_string(&tls.cert_file).unwrap())
    );
    let (new_certificate, new_key) = ca.issue_pem("member, rotated");
    replace_file(&tls.key_file, &new_key);
    replace_file(&tls.cert_file, &new_certificate);
    let expected = certificate_der(&new_certificate);
    let what = "member 1 to present the rotated certificate";
    wait_until(what, CONVERGENCE_TIMEOUT, async || {
        let seen = served_certificate(&handshakes, &urls[0]).await?;
        (seen == expected).then_some(())
    })
    .await;
    // The cluster still replicates (new peer connections present the rotated certificate).
    client
        .put("tls/after-rotation", "still here")
        .await
        .unwrap();
    assert_eq!(
        reader.get("tls/after-rotation").await.unwrap().kv.value,
        "still here"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cert_auth_refuses_clients_without_a_certificate_of_the_ca() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("revkv test CA");
    let tls = cluster_tls(directory.path(), &ca, true);
    let cluster = ProcessCluster::start(1, cluster_options().with_tls(tls.clone())).await;
    let url = cluster.member(1).client_url();

    // The harness's client presents the member certificate: served.
    cluster.client(1).put_ok("auth/key", "value").await;

    let with = |cert_file, key_file| {
        Client::builder(vec![url.clone()])
            .tls(ClientTls {
                ca_file: Some(tls.ca_file.clone()),
                cert_file,
                key_file,
            })
            .max_attempts(1)
            .build()
            .unwrap()
    };
    let anonymous = with(None, None).get("auth/key").await;
    assert!(
        anonymous.is_err(),
        "a client without a certificate was served: {anonymous:?}"
    );
    let outsider_files = TestCa::new("foreign CA").issue(directory.path(), "outsider");
    let outsider = with(
        Some(outsider_files.cert_file),
        Some(outsider_files.key_file),
    )
    .get("auth/key")
    .await;
    assert!(
        outsider.is_err(),
        "a certificate of another CA was served: {outsider:?}"
    );
    let insider_files = ca.issue(directory.path(), "client");
    let insider = with(Some(insider_files.cert_file), Some(insider_files.key_file));
    assert_eq!(insider.get("auth/key").await.unwrap().kv.value, "value");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_a_certificate_of_another_ca_is_refused_by_the_cluster() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("revkv test CA");
    let tls = cluster_tls(directory.path(), &ca, false);
    let mut cluster = ProcessCluster::start(3, cluster_options().with_tls(tls.clone())).await;
    cluster.wait_for_published_client_urls().await;
    cluster.client(1).put_ok("peers/before", "1").await;

    let foreign_directory = directory.path().join("foreign");
    std::fs::create_dir(&foreign_directory).unwrap();
    let foreign = cluster_tls(&foreign_directory, &TestCa::new("foreign CA"), false);
    let intruder = cluster
        .start_joining_member_with_tls(4, foreign.clone())
        .await;
    let (peer_url, client_url) = (intruder.peer_url(), intruder.client_url());

    // Its own calls to a member's peer listener (an append, a vote) fail at the handshake: the
    // member requires a certificate of the cluster's CA, and the intruder does not trust the
    // member's certificate either.
    let intruder_http = foreign
        .client_tls()
        .configure(reqwest::Client::builder().timeout(Duration::from_secs(10)))
        .unwrap()
        .build()
        .unwrap();
    let member_peer_url = cluster.member(1).peer_url();
    for path in ["/raft/append", "/raft/vote"] {
        let call = intruder_http
            .post(format!("{member_peer_url}{path}"))
            .body(vec![0u8; 8]);
        let answer = call.send().await;
        assert!(
            answer.is_err(),
            "{path} from the intruder was answered: {answer:?}"
        );
    }
    // The same call with the cluster's certificate gets through the handshake (and is refused by
    // the peer protocol instead, as undecodable).
    let member_http = tls
        .client_tls()
        .configure(reqwest::Client::builder().timeout(Duration::from_secs(10)))
        .unwrap()
        .build()
        .unwrap();
    let answer = member_http
        .post(format!("{member_peer_url}/raft/vote"))
        .body(vec![0u8; 8])
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{answer:?}");

    // Added as a learner, it never receives the log: the leader's appends fail at the handshake.
    let _ = cluster
        .client(1)
        .send(
            reqwest::Method::POST,
            "/v1/members",
            Some(json!({ "id": 4, "peer_url": peer_url, "client_url": client_url })),
            &[],
        )
        .await;
    let what = "the intruder to log a refused handshake from the leader";
    wait_until(what, CONVERGENCE_TIMEOUT, async || {
        cluster
            .log_text(4)
            .contains("TLS handshake refused")
            .then_some(())
    })
    .await;
    let intruder_client = cluster.client(4);
    assert!(
        !intruder_client.is_ready().await,
        "the intruder has a leader"
    );
    let status = intruder_client.status().await;
    let applied = status
        .as_ref()
        .and_then(|status| status["applied_index"].as_u64());
    assert!(
        matches!(applied, None | Some(0)),
        "the intruder applied entries: {status:?}"
    );
    // The cluster itself still serves.
    cluster.client(2).put_ok("peers/after", "2").await;
}

#[test]
fn bad_certificate_files_stop_serve_with_a_clear_error() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("revkv test CA");
    let member = ca.issue(directory.path(), "member");
    let other = ca.issue(directory.path(), "other");
    let missing = directory.path().join("missing.pem");
    let data_dir = directory.path().join("data");
    let path = |path: &Path| path.display().to_string();
    let cases: [(Vec<String>, &str); 4] = [
        (
            vec![
                "--cert-file".into(),
                path(&missing),
                "--key-file".into(),
                path(&member.key_file),
            ],
            "missing.pem",
        ),
        (
            vec![
                "--cert-file".into(),
                path(&member.cert_file),
                "--key-file".into(),
                path(&other.key_file),
            ],
            "does not fit the certificate",
        ),
        (
            vec!["--cert-file".into(), path(&member.cert_file)],
            "--key-file",
        ),
        (
            vec![
                "--peer-cert-file".into(),
                path(&member.cert_file),
                "--peer-key-file".into(),
                path(&member.key_file),
            ],
            "--peer-trusted-ca-file",
        ),
    ];
    for (flags, expected) in cases {
        let output = Command::new(REVKV_BINARY)
            .args(["serve", "--data-dir", &path(&data_dir)])
            .args([
                "--listen-client",
                "127.0.0.1:0",
                "--listen-peer",
                "127.0.0.1:0",
            ])
            .args([
                "--advertise-client",
                "https://127.0.0.1:1",
                "--advertise-peer",
                "https://127.0.0.1:2",
            ])
            .args(&flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{flags:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{flags:?}: {stderr:?} should say {expected:?}"
        );
        assert!(!stderr.contains("panicked"), "{flags:?}: {stderr}");
    }
}
