//! Issue 15's "done when", end to end: a three-member cluster of real `revkv serve` processes
//! with client and peer TLS, auth set up and enabled through `revkv ctl`'s etcdctl verbs. It
//! refuses plain HTTP, requests without a token, requests outside the user's keys and
//! administration by a non-root user, and serves the allowed ones on every member (a token from
//! one member is checked by another without a round trip); its peer port refuses a caller
//! without a certificate of the cluster's CA.

use crate::process_cluster;

use std::path::Path;
use std::time::Duration;

use process_cluster::{cluster_options, ctl_async, ClusterTls, CtlRun, ProcessCluster};
use revkv_client::{Client, ClientError, ClientTls, Credentials};
use revkv_tls::testing::TestCa;

const ROOT: &str = "root:root-password";
const APP: &str = "app:app-password";

/// `revkv ctl --cacert CA [--user USER] ARGS` against `endpoints`.
async fn ctl_as(endpoints: &str, ca: &Path, user: Option<&str>, args: &[&str]) -> CtlRun {
    let ca = ca.display().to_string();
    let mut full = vec!["--cacert", ca.as_str()];
    if let Some(user) = user {
        full.extend(["--user", user]);
    }
    full.extend(args);
    ctl_async(endpoints, &full, None).await
}

fn client_as(urls: &[String], ca: &Path, user: Option<&str>) -> Client {
    Client::builder(urls.to_vec())
        .tls(ClientTls {
            ca_file: Some(ca.to_path_buf()),
            ..ClientTls::default()
        })
        .credentials(user.map(|user| Credentials::parse(user).unwrap()))
        .max_attempts(3)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_with_auth_serves_only_who_belongs_and_only_where() {
    let directory = tempfile::tempdir().unwrap();
    let ca = TestCa::new("revkv test CA");
    let member = ca.issue(directory.path(), "member");
    let tls = ClusterTls {
        ca_file: ca.write_certificate(&directory.path().join("ca.pem")),
        cert_file: member.cert_file,
        key_file: member.key_file,
        client_cert_auth: false,
    };
    let options = cluster_options().with_tls(tls.clone()).with_grpc();
    let cluster = ProcessCluster::start(3, options).await;
    cluster.wait_for_published_client_urls().await;
    let urls = cluster.client_urls();
    let endpoints = urls.join(",");
    let ca_file = tls.ca_file.as_path();

    // Credentials against a cluster whose auth is still off are no error (etcd's client carries
    // on without a token too); once auth is on, the same client authenticates.
    let early_root_client = client_as(&urls, ca_file, Some(ROOT));
    early_root_client.put("secret/key", "s").await.unwrap();
    set_up_auth_with_ctl(&endpoints, ca_file).await;
    let after_enable = early_root_client.get("secret/key").await.unwrap();
    assert_eq!(after_enable.kv.value, "s");

    // Plain HTTP gets no answer; HTTPS without a token gets 401.
    let plain_url = urls[0].replacen("https://", "http://", 1);
    let plain = reqwest::Client::new()
        .get(format!("{plain_url}/v1/kv/app/x"))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    let anonymous = client_as(&urls, ca_file, None).get("app/x").await;
    assert!(
        matches!(anonymous, Err(ClientError::Unauthenticated { .. })),
        "{anonymous:?}"
    );
    let wrong = client_as(&urls, ca_file, Some("app:wrong"))
        .get("app/x")
        .await;
    assert!(
        matches!(wrong, Err(ClientError::Unauthenticated { .. })),
        "{wrong:?}"
    );

    // The user writes through one member and reads through another with the same token.
    let app_writer = client_as(&urls[..1], ca_file, Some(APP));
    app_writer.put("app/x", "1").await.unwrap();
    let app_reader = client_as(&urls[2..], ca_file, Some(APP));
    assert_eq!(app_reader.get("app/x").await.unwrap().kv.value, "1");

    // Outside its keys, and administration: 403, and nothing changes.
    let outside = app_writer.put("secret/key", "stolen").await;
    assert!(
        matches!(outside, Err(ClientError::Forbidden { .. })),
        "{outside:?}"
    );
    let peek = app_reader.get("secret/key").await;
    assert!(
        matches!(peek, Err(ClientError::Forbidden { .. })),
        "{peek:?}"
    );
    let compact = app_writer.compact(1).await;
    assert!(
        matches!(compact, Err(ClientError::Forbidden { .. })),
        "{compact:?}"
    );
    let root = client_as(&urls, ca_file, Some(ROOT));
    assert_eq!(root.get("secret/key").await.unwrap().kv.value, "s");

    // ctl as the user: allowed reads work, forbidden ones exit with an error naming no key.
    let got = ctl_as(&endpoints, ca_file, Some(APP), &["get", "app/x"]).await;
    let got = got.expect_success();
    assert!(got.stdout.contains('1'), "{}", got.stdout);
    let refused = ctl_as(&endpoints, ca_file, Some(APP), &["get", "secret/key"]).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("forbidden"), "{}", refused.stderr);
    assert!(!refused.stderr.contains("secret"), "{}", refused.stderr);

    etcdctl_as_a_user(&cluster, ca_file);

    // A refused auth change is an answer, not a fault: every member stays up and serving.
    let again = ctl_as(&endpoints, ca_file, Some(ROOT), &["role", "add", "app-rw"]).await;
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    for url in &urls {
        let member = client_as(std::slice::from_ref(url), ca_file, Some(APP));
        assert_eq!(member.get("app/x").await.unwrap().kv.value, "1", "{url}");
    }

    peer_port_refuses_a_caller_without_a_cluster_certificate(&cluster, &tls).await;
}

/// etcdctl's recipe: root with the root role, a role with read-write on `app/`, a user holding
/// it, then auth enable; the password of `user add` comes from standard input here. Every step
/// runs with root's credentials, as operators' scripts do before auth is on (etcdctl accepts that).
async fn set_up_auth_with_ctl(endpoints: &str, ca: &Path) {
    let steps: [&[&str]; 6] = [
        &[
            "user",
            "add",
            "root",
            "--new-user-password",
            "root-password",
        ],
        &["user", "grant-role", "root", "root"],
        &["role", "add", "app-rw"],
        &[
            "role",
            "grant-permission",
            "app-rw",
            "readwrite",
            "app/",
            "--prefix",
        ],
        &["user", "grant-role", "app", "app-rw"],
        &["auth", "enable"],
    ];
    let ca_text = ca.display().to_string();
    let add_app = ["--cacert", ca_text.as_str(), "user", "add", "app"];
    ctl_async(endpoints, &add_app, Some("app-password\n"))
        .await
        .expect_success();
    for step in steps {
        ctl_as(endpoints, ca, Some(ROOT), step)
            .await
            .expect_success();
    }
    let status = ctl_as(endpoints, ca, Some(ROOT), &["auth", "status"]).await;
    assert!(status.expect_success().stdout.contains("true"));
    let role = ctl_as(endpoints, ca, Some(ROOT), &["role", "get", "app-rw"]).await;
    assert!(role.expect_success().stdout.contains("readwrite app/"));
}

/// etcd's own client, unchanged, on the gRPC port of the same cluster: `--user` authenticates
/// and reaches the user's keys only; without it nothing is served.
fn etcdctl_as_a_user(cluster: &ProcessCluster, ca: &Path) {
    let endpoint = cluster.grpc_endpoints()[1].clone();
    let endpoint = format!("https://{}", endpoint.trim_start_matches("http://"));
    let etcdctl = |user: Option<&str>, args: &[&str]| {
        let mut command = std::process::Command::new("/usr/bin/etcdctl");
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoint}"))
            .arg(format!("--cacert={}", ca.display()))
            .arg("--command-timeout=10s");
        if let Some(user) = user {
            command.arg(format!("--user={user}"));
        }
        let output = command.args(args).output().expect("run etcdctl");
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        (output.status.success(), stdout, stderr)
    };
    let (written, _, stderr) = etcdctl(Some(APP), &["put", "app/from-etcdctl", "yes"]);
    assert!(written, "{stderr}");
    let (read, stdout, stderr) = etcdctl(Some(APP), &["get", "app/from-etcdctl"]);
    assert!(read && stdout.contains("yes"), "{stdout} {stderr}");
    let (forbidden, _, stderr) = etcdctl(Some(APP), &["get", "secret/key"]);
    assert!(
        !forbidden && stderr.contains("permission denied"),
        "{stderr}"
    );
    let (anonymous, _, stderr) = etcdctl(None, &["get", "app/from-etcdctl"]);
    assert!(!anonymous, "served without credentials: {stderr}");
}

/// The peer port requires a client certificate of the cluster's CA (mutual TLS): a caller that
/// trusts the CA but presents no certificate gets no answer, while the same request with a
/// member's certificate is answered (so the refusal is the certificate's doing).
async fn peer_port_refuses_a_caller_without_a_cluster_certificate(
    cluster: &ProcessCluster,
    tls: &ClusterTls,
) {
    let peer_url = cluster.member(2).peer_url();
    let ask = |client_tls: ClientTls| {
        let builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
        let http = client_tls.configure(builder).unwrap().build().unwrap();
        let url = format!("{peer_url}/");
        async move { http.get(url).send().await }
    };
    let without = ClientTls {
        ca_file: Some(tls.ca_file.clone()),
        ..ClientTls::default()
    };
    let answer = ask(without).await;
    assert!(answer.is_err(), "the peer port answered: {answer:?}");
    let with_member_certificate = ClientTls {
        ca_file: Some(tls.ca_file.clone()),
        cert_file: Some(tls.cert_file.clone()),
        key_file: Some(tls.key_file.clone()),
    };
    let answered = ask(with_member_certificate).await;
    assert!(
        answered.is_ok(),
        "a cluster certificate was refused: {answered:?}"
    );
}
