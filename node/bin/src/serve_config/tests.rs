//! Tests of `revkv serve`'s settings as a whole: flags and the TOML file go in, and the
//! `NodeConfig` or the error that comes out is checked, so each test covers its subsystem's
//! method and how `into_node_config` uses it.

use std::time::Duration;

use super::subsystems::LONGEST_LEASE_TTL_SECONDS;
use super::*;
use revkv_node::compaction::AutoCompaction;
use revkv_node::corruption_check::CorruptionCheckSettings;
use revkv_node::NodeConfig;
use revkv_storage::Limits;

#[test]
fn no_flags_give_a_single_member_cluster_on_the_default_ports() {
    let config = ServeArgs::default().into_node_config().unwrap();
    assert_eq!(config.listen_client, "127.0.0.1:7001".parse().unwrap());
    assert_eq!(config.member.listen_peer, "127.0.0.1:7101".parse().unwrap());
    assert_eq!(config.member.data_dir, PathBuf::from("revkv-data"));
    assert_eq!(config.member.initial_cluster.len(), 1);
    assert_eq!(
        config.member.initial_cluster[&1].peer_url,
        "http://127.0.0.1:7101"
    );
}

#[test]
fn no_flags_give_what_an_embedder_gets_from_node_config_single_member() {
    let listen_client: SocketAddr = "127.0.0.1:7001".parse().unwrap();
    let listen_peer: SocketAddr = "127.0.0.1:7101".parse().unwrap();
    let from_flags = ServeArgs::default().into_node_config().unwrap();
    let embedded =
        NodeConfig::single_member(PathBuf::from("revkv-data"), listen_client, listen_peer);
    assert_eq!(format!("{from_flags:?}"), format!("{embedded:?}"));
}

#[test]
fn the_initial_cluster_is_parsed_and_checked() {
    let args = ServeArgs {
        id: Some(2),
        listen_peer: Some("127.0.0.1:7102".parse().unwrap()),
        initial_cluster: Some(
            "1=http://127.0.0.1:7101, 2=http://127.0.0.1:7102,3=http://127.0.0.1:7103".into(),
        ),
        ..ServeArgs::default()
    };
    let config = args.clone().into_node_config().unwrap();
    assert_eq!(config.member.initial_cluster.len(), 3);
    let wrong_url = ServeArgs {
        initial_cluster: Some("2=http://127.0.0.1:9999".into()),
        ..args.clone()
    };
    assert!(wrong_url.into_node_config().is_err());
    let missing_self = ServeArgs {
        initial_cluster: Some("1=http://127.0.0.1:7101".into()),
        ..args.clone()
    };
    assert!(missing_self.into_node_config().is_err());
    let garbage = ServeArgs {
        initial_cluster: Some("one=two".into()),
        ..args
    };
    assert!(garbage.into_node_config().is_err());
}

#[test]
fn auto_compaction_settings_follow_etcd() {
    let with = |mode, retention: &str| ServeArgs {
        auto_compaction_mode: mode,
        auto_compaction_retention: Some(retention.into()),
        ..ServeArgs::default()
    };
    let off = with(None, "0").into_node_config().unwrap();
    assert_eq!(off.auto_compaction, AutoCompaction::Off);
    let hours = with(None, "2").into_node_config().unwrap();
    assert_eq!(
        hours.auto_compaction,
        AutoCompaction::Periodic {
            retention: Duration::from_secs(7200)
        }
    );
    let minutes = with(Some(AutoCompactionMode::Periodic), "30m");
    assert_eq!(
        minutes.into_node_config().unwrap().auto_compaction,
        AutoCompaction::Periodic {
            retention: Duration::from_secs(1800)
        }
    );
    let revisions = with(Some(AutoCompactionMode::Revision), "1000");
    assert_eq!(
        revisions.into_node_config().unwrap().auto_compaction,
        AutoCompaction::Revisions {
            keep: 1000,
            check_interval: Duration::from_secs(300)
        }
    );
    assert!(with(Some(AutoCompactionMode::Revision), "1h")
        .into_node_config()
        .is_err());
    assert!(with(None, "soon").into_node_config().is_err());
}

#[test]
fn watch_settings_are_checked() {
    let off = ServeArgs {
        watch_progress_notify_interval_ms: Some(0),
        ..ServeArgs::default()
    };
    assert_eq!(
        off.into_node_config()
            .unwrap()
            .watch
            .default_progress_interval,
        None
    );
    let tiny_buffer = ServeArgs {
        watch_buffer_messages: Some(2),
        ..ServeArgs::default()
    };
    assert!(tiny_buffer.into_node_config().is_err());
    let no_bytes = ServeArgs {
        watch_buffer_bytes: Some(0),
        ..ServeArgs::default()
    };
    assert!(no_bytes.into_node_config().is_err());
    let past_four_gibibytes = ServeArgs {
        watch_buffer_bytes: Some(1 << 33),
        ..ServeArgs::default()
    };
    assert!(past_four_gibibytes.into_node_config().is_err());
    let one_mebibyte = ServeArgs {
        watch_buffer_bytes: Some(1 << 20),
        ..ServeArgs::default()
    };
    let limits = one_mebibyte.into_node_config().unwrap().watch;
    assert_eq!(limits.stream_buffer_bytes, 1 << 20);
}

#[test]
fn the_stranded_intent_grace_is_taken_and_bounded() {
    let args = ServeArgs {
        auto_promote_intent_grace_seconds: Some(5),
        ..ServeArgs::default()
    };
    let promotion = args.into_node_config().unwrap().member.learner_promotion;
    assert_eq!(promotion.stranded_intent_grace, Duration::from_secs(5));
    for refused in [0, 24 * 60 * 60 + 1] {
        let args = ServeArgs {
            auto_promote_intent_grace_seconds: Some(refused),
            ..ServeArgs::default()
        };
        let error = args.into_node_config().unwrap_err();
        assert!(
            error.contains("--auto-promote-intent-grace-seconds"),
            "{error}"
        );
    }
    let defaults = ServeArgs::default().into_node_config().unwrap();
    assert_eq!(
        defaults.member.learner_promotion.stranded_intent_grace,
        Duration::from_secs(60)
    );
}

#[test]
fn the_auto_promote_bound_is_taken_and_zero_is_refused() {
    let args = ServeArgs {
        auto_promote_max_lag: Some(50),
        ..ServeArgs::default()
    };
    let config = args.into_node_config().unwrap();
    assert_eq!(config.member.learner_promotion.default_max_lag_entries, 50);
    let zero = ServeArgs {
        auto_promote_max_lag: Some(0),
        ..ServeArgs::default()
    };
    assert!(zero.into_node_config().is_err());
}

#[test]
fn hot_key_limits_are_taken_and_checked() {
    let args = ServeArgs {
        hot_keys_capacity: Some(32),
        hot_keys_window_seconds: Some(60),
        ..ServeArgs::default()
    };
    let limits = args.into_node_config().unwrap().http.hot_keys;
    assert_eq!(
        (limits.capacity, limits.window),
        (32, Duration::from_secs(60))
    );
    for bad in [
        ServeArgs {
            hot_keys_capacity: Some(0),
            ..ServeArgs::default()
        },
        ServeArgs {
            hot_keys_window_seconds: Some(1),
            ..ServeArgs::default()
        },
    ] {
        let error = bad.into_node_config().unwrap_err();
        assert!(error.contains("hot-keys"), "{error}");
    }
}

#[test]
fn keepalive_stream_limits_are_taken_and_checked() {
    let args = ServeArgs {
        max_lease_keepalive_streams: Some(12),
        lease_keepalive_idle_timeout_ms: Some(5000),
        ..ServeArgs::default()
    };
    let limits = args.into_node_config().unwrap().http.lease_stream;
    assert_eq!(
        (limits.max_streams, limits.idle_timeout),
        (12, Duration::from_secs(5))
    );
    let snapshots = ServeArgs {
        max_snapshot_streams: Some(3),
        ..ServeArgs::default()
    };
    assert_eq!(
        snapshots
            .into_node_config()
            .unwrap()
            .http
            .max_snapshot_streams,
        3
    );
    let no_snapshots = ServeArgs {
        max_snapshot_streams: Some(0),
        ..ServeArgs::default()
    };
    let error = no_snapshots.into_node_config().unwrap_err();
    assert!(error.contains("--max-snapshot-streams"), "{error}");
    for bad in [
        ServeArgs {
            max_lease_keepalive_streams: Some(0),
            ..ServeArgs::default()
        },
        ServeArgs {
            lease_keepalive_idle_timeout_ms: Some(10),
            ..ServeArgs::default()
        },
    ] {
        let error = bad.into_node_config().unwrap_err();
        assert!(error.contains("keepalive"), "{error}");
    }
}

#[test]
fn lease_settings_are_taken_and_checked_with_clear_errors() {
    let args = ServeArgs {
        max_leases: Some(50),
        max_keys_per_lease: Some(7),
        max_lease_ttl_seconds: Some(3600),
        lease_expiry_check_interval_ms: Some(100),
        lease_checkpoint_interval_ms: Some(2000),
        max_leases_per_checkpoint: Some(20),
        ..ServeArgs::default()
    };
    let config = args.clone().into_node_config().unwrap();
    let limits = &config.member.store.limits;
    assert_eq!(
        (
            limits.max_leases,
            limits.max_keys_per_lease,
            limits.max_lease_ttl_seconds
        ),
        (50, 7, 3600)
    );
    assert_eq!(limits.max_key_bytes, Limits::default().max_key_bytes);
    let lease = &config.member.lease;
    assert_eq!(lease.expiry_check_interval, Duration::from_millis(100));
    assert_eq!(lease.checkpoint_interval, Some(Duration::from_secs(2)));
    assert_eq!(lease.max_leases_per_checkpoint, 20);
    let off = ServeArgs {
        lease_checkpoint_interval_ms: Some(0),
        ..args.clone()
    };
    assert_eq!(
        off.into_node_config()
            .unwrap()
            .member
            .lease
            .checkpoint_interval,
        None
    );

    let no_leases = ServeArgs {
        max_leases: Some(0),
        ..args.clone()
    };
    fails_with(no_leases, "--max-leases must be at least 1");
    let no_keys = ServeArgs {
        max_keys_per_lease: Some(0),
        ..args.clone()
    };
    fails_with(no_keys, "--max-keys-per-lease");
    // The default election timeout (1-2 s) makes the minimum TTL 3 s.
    let below_minimum = ServeArgs {
        max_lease_ttl_seconds: Some(2),
        ..args.clone()
    };
    fails_with(below_minimum, "between 3 (the minimum TTL");
    let beyond_etcd = ServeArgs {
        max_lease_ttl_seconds: Some(LONGEST_LEASE_TTL_SECONDS + 1),
        ..args.clone()
    };
    fails_with(beyond_etcd, "--max-lease-ttl-seconds");
    let busy_check = ServeArgs {
        lease_expiry_check_interval_ms: Some(1),
        ..args.clone()
    };
    fails_with(busy_check, "--lease-expiry-check-interval-ms");
    let busy_checkpoints = ServeArgs {
        lease_checkpoint_interval_ms: Some(10),
        ..args.clone()
    };
    fails_with(busy_checkpoints, "or 0 to turn checkpoints off");
    let huge_batch = ServeArgs {
        max_leases_per_checkpoint: Some(51),
        ..args
    };
    fails_with(huge_batch, "between 1 and --max-leases (50)");
}

#[test]
fn flags_override_the_toml_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("revkv.toml");
    std::fs::write(
        &path,
        "id = 7\ndata-dir = \"/from/file\"\nheartbeat-ms = 20\nworker-threads = 1\n",
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path.clone()),
        id: Some(3),
        ..ServeArgs::default()
    };
    let merged = args.with_config_file().unwrap();
    assert_eq!(merged.id, Some(3));
    assert_eq!(merged.data_dir, Some(PathBuf::from("/from/file")));
    assert_eq!(merged.heartbeat_ms, Some(20));
    assert_eq!(merged.worker_threads, Some(1));
    std::fs::write(&path, "no-such-setting = 1\n").unwrap();
    let unknown = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    };
    assert!(unknown.with_config_file().is_err());
}

/// Asserts that `args` are refused with an error that says `expected`.
fn fails_with(args: ServeArgs, expected: &str) {
    let error = args.into_node_config().unwrap_err();
    assert!(
        error.contains(expected),
        "{error:?} should say {expected:?}"
    );
}

#[test]
fn the_grpc_url_is_advertised_from_its_listener_or_the_flag() {
    let none = ServeArgs::default().into_node_config().unwrap();
    assert_eq!(none.member.advertise.grpc_url, None);
    let listening = ServeArgs {
        listen_grpc: Some(([127, 0, 0, 1], 7201).into()),
        ..ServeArgs::default()
    };
    let config = listening.clone().into_node_config().unwrap();
    assert_eq!(
        config.member.advertise.grpc_url.as_deref(),
        Some("http://127.0.0.1:7201")
    );
    let given = ServeArgs {
        advertise_grpc: Some("http://etcd.example:2379/".into()),
        ..listening.clone()
    };
    let config = given.into_node_config().unwrap();
    assert_eq!(
        config.member.advertise.grpc_url.as_deref(),
        Some("http://etcd.example:2379")
    );
    let without_listener = ServeArgs {
        advertise_grpc: Some("http://127.0.0.1:7201".into()),
        ..ServeArgs::default()
    };
    fails_with(without_listener, "--advertise-grpc needs --listen-grpc");
    let with_space = ServeArgs {
        advertise_grpc: Some("http://a b:7201".into()),
        ..listening.clone()
    };
    fails_with(with_space, "holds a space");
    let all_interfaces = ServeArgs {
        listen_grpc: Some(([0, 0, 0, 0], 7201).into()),
        ..ServeArgs::default()
    };
    fails_with(all_interfaces, "give --advertise-grpc too");
}

#[test]
fn tls_flags_switch_urls_to_https_and_must_fit_together() {
    let directory = tempfile::tempdir().unwrap();
    let ca = revkv_tls::testing::TestCa::new("test CA");
    let ca_file = ca.write_certificate(&directory.path().join("ca.pem"));
    let member = ca.issue(directory.path(), "member");
    let tls = ServeArgs {
        cert_file: Some(member.cert_file.clone()),
        key_file: Some(member.key_file.clone()),
        peer_cert_file: Some(member.cert_file.clone()),
        peer_key_file: Some(member.key_file.clone()),
        peer_trusted_ca_file: Some(ca_file.clone()),
        peer_client_cert_auth: Some(true),
        ..ServeArgs::default()
    };
    let config = tls.clone().into_node_config().unwrap();
    assert!(config.client_tls.is_some() && config.member.peer_tls.is_some());
    assert_eq!(config.member.advertise.client_url, "https://127.0.0.1:7001");
    assert_eq!(
        config.member.initial_cluster[&1].peer_url,
        "https://127.0.0.1:7101"
    );

    let plain_peer_url = ServeArgs {
        initial_cluster: Some("1=http://127.0.0.1:7101".into()),
        ..tls.clone()
    };
    fails_with(plain_peer_url, "must start with https://");
    let key_missing = ServeArgs {
        key_file: None,
        ..tls.clone()
    };
    fails_with(key_missing, "--cert-file and --key-file go together");
    let one_way_peers = ServeArgs {
        peer_client_cert_auth: None,
        ..tls.clone()
    };
    fails_with(one_way_peers, "--peer-client-cert-auth");
    let auth_without_ca = ServeArgs {
        client_cert_auth: Some(true),
        ..tls.clone()
    };
    fails_with(auth_without_ca, "needs a trusted CA");
    let missing_file = ServeArgs {
        cert_file: Some(directory.path().join("nowhere.pem")),
        ..tls.clone()
    };
    fails_with(missing_file, "nowhere.pem");
    let ca_without_certificate = ServeArgs {
        trusted_ca_file: Some(ca_file),
        ..ServeArgs::default()
    };
    fails_with(ca_without_certificate, "need --cert-file and --key-file");
}

#[test]
fn tls_settings_come_from_the_toml_file_too() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("revkv.toml");
    let text = "cert-file = \"/etc/revkv/member.pem\"\nkey-file = \"/etc/revkv/member-key.pem\"\n\
                trusted-ca-file = \"/etc/revkv/ca.pem\"\nclient-cert-auth = true\n\
                peer-client-cert-auth = true\n";
    std::fs::write(&path, text).unwrap();
    let args = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    };
    let merged = args.with_config_file().unwrap();
    assert_eq!(
        merged.cert_file,
        Some(PathBuf::from("/etc/revkv/member.pem"))
    );
    assert_eq!(
        merged.trusted_ca_file,
        Some(PathBuf::from("/etc/revkv/ca.pem"))
    );
    assert_eq!(merged.client_cert_auth, Some(true));
    assert_eq!(merged.peer_client_cert_auth, Some(true));
}

#[test]
fn corruption_checks_are_off_by_default_and_checked_when_set() {
    let defaults = ServeArgs::default().into_node_config().unwrap();
    assert_eq!(
        defaults.corruption_check,
        CorruptionCheckSettings::default()
    );
    let with = |initial, time: Option<&str>| ServeArgs {
        initial_corrupt_check: initial,
        corrupt_check_time: time.map(str::to_string),
        ..ServeArgs::default()
    };
    let both = with(Some(true), Some("5m")).into_node_config().unwrap();
    assert_eq!(
        both.corruption_check,
        CorruptionCheckSettings {
            initial: true,
            interval: Some(Duration::from_secs(300)),
        }
    );
    let off = with(None, Some("0")).into_node_config().unwrap();
    assert_eq!(off.corruption_check.interval, None);
    for bad in ["5", "soon", "10ms", "8days"] {
        let refused = with(None, Some(bad)).into_node_config();
        let error = refused.expect_err(bad);
        assert!(error.contains("corrupt-check-time"), "{bad}: {error}");
    }
}

#[test]
fn the_grpc_port_takes_the_members_stream_limits_and_its_own_gateway_settings() {
    let args = ServeArgs {
        max_lease_keepalive_streams: Some(12),
        lease_keepalive_idle_timeout_ms: Some(5000),
        max_snapshot_streams: Some(3),
        max_gateway_streams: Some(7),
        grpc_cors: Some("https://console.example:8443".into()),
        emulated_etcd_version: Some("3.6.16".into()),
        max_concurrent_streams: Some(500),
        max_connections_per_client: Some(9),
        max_watches: Some(2000),
        max_watches_per_stream: Some(1500),
        ..ServeArgs::default()
    };
    let limits = args.grpc_limits().unwrap();
    assert_eq!(limits.etcd_version.to_string(), "3.6.16");
    assert_eq!(limits.connections.max_concurrent_streams, 500);
    assert_eq!(limits.connections.max_connections_per_client, 9);
    assert_eq!(limits.max_watches_per_stream, 1500);
    assert_eq!(
        (limits.max_keepalive_streams, limits.max_snapshot_streams),
        (12, 3)
    );
    assert_eq!(limits.gateway.max_streams, 7);
    assert_eq!(
        limits.gateway.keepalive_idle_timeout,
        Duration::from_secs(5)
    );
    assert_eq!(
        limits.cors,
        revkv_grpc::cors::CorsOrigins::Only(vec!["https://console.example:8443".into()])
    );
    let defaults = ServeArgs::default().grpc_limits().unwrap();
    assert_eq!(defaults.cors, revkv_grpc::cors::CorsOrigins::Any);
    // etcd's: 2^32-1 streams per connection, and no watch limit per stream below the member's.
    assert_eq!(defaults.connections.max_concurrent_streams, u32::MAX);
    assert_eq!(defaults.max_watches_per_stream, 65_536);
    assert_eq!(
        defaults.etcd_version,
        revkv_grpc::etcd_version::EtcdVersion::DEFAULT
    );
    for (bad, flag) in [
        (
            ServeArgs {
                max_gateway_streams: Some(0),
                ..ServeArgs::default()
            },
            "--max-gateway-streams",
        ),
        (
            ServeArgs {
                max_watches: Some(100),
                max_watches_per_stream: Some(101),
                ..ServeArgs::default()
            },
            "--max-watches-per-stream",
        ),
        (
            ServeArgs {
                max_watches_per_stream: Some(0),
                ..ServeArgs::default()
            },
            "--max-watches-per-stream",
        ),
        (
            ServeArgs {
                grpc_cors: Some("console.example".into()),
                ..ServeArgs::default()
            },
            "--grpc-cors",
        ),
        (
            ServeArgs {
                emulated_etcd_version: Some("3.5".into()),
                ..ServeArgs::default()
            },
            "--emulated-etcd-version",
        ),
    ] {
        let error = bad.grpc_limits().unwrap_err();
        assert!(error.contains(flag), "{error}");
    }
}

#[test]
fn pre_vote_is_on_unless_turned_off_by_flag_or_file() {
    use clap::Parser;
    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }
    let default = ServeArgs::default().into_node_config().unwrap();
    assert!(default.member.timing.pre_vote, "on by default, as etcd's");
    let parse = |flags: &[&str]| {
        let mut argv = vec!["serve"];
        argv.extend_from_slice(flags);
        Serve::try_parse_from(argv).unwrap().args
    };
    let off = parse(&["--pre-vote", "false"]).into_node_config().unwrap();
    assert!(!off.member.timing.pre_vote);
    let bare = parse(&["--pre-vote"]).into_node_config().unwrap();
    assert!(bare.member.timing.pre_vote, "a bare flag turns it on");
    let from_file: ServeArgs = toml::from_str("pre-vote = false\n").unwrap();
    assert!(!from_file.into_node_config().unwrap().member.timing.pre_vote);
}
