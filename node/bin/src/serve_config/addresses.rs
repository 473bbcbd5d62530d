//! The URLs a member is reached at and the members it starts with: advertised client, peer and
//! gRPC URLs (defaulting to the listen addresses), their `http`/`https` schemes, and the parsing of
//! `--initial-cluster`, which `revkv snapshot restore` shares. It takes plain values rather than
//! `ServeArgs`, so that `mod.rs` can re-export from it without the two importing each other.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use revkv_raft::MemberNode;

/// `https` with TLS, `http` without.
pub(super) fn scheme(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

/// The gRPC listener's advertised URL (its scheme is the client listener's, whose TLS it uses);
/// none without a gRPC listener. `listen` and `given` are `--listen-grpc` and `--advertise-grpc`.
pub(super) fn advertised_grpc_url(
    listen: Option<SocketAddr>,
    given: Option<String>,
    client_scheme: &str,
) -> Result<Option<String>, String> {
    match (listen, given) {
        (Some(listen), given) => advertised_url(given, listen, "grpc", client_scheme).map(Some),
        (None, Some(_)) => Err("--advertise-grpc needs --listen-grpc".to_string()),
        (None, None) => Ok(None),
    }
}

/// The advertised URL, or `<scheme>://<listen address>` when the listen address is a specific
/// one. A given URL must use the listener's scheme (`https` exactly when it has TLS).
pub(super) fn advertised_url(
    given: Option<String>,
    listen: SocketAddr,
    which: &str,
    scheme: &str,
) -> Result<String, String> {
    match given {
        Some(url) => {
            check_scheme(&url, scheme, &format!("--advertise-{which}"))?;
            // A member's client URLs are stored space-separated (`MemberNode`).
            if url.contains(char::is_whitespace) {
                return Err(format!("--advertise-{which}: {url:?} holds a space"));
            }
            Ok(url.trim_end_matches('/').to_string())
        }
        None if listen.ip().is_unspecified() => Err(format!(
            "listening for {which} connections on {listen} (all interfaces): give \
             --advertise-{which} too"
        )),
        None => Ok(format!("{scheme}://{listen}")),
    }
}

/// A URL of a listener with (`https`) or without (`http`) TLS must say so: otherwise every call
/// to it fails at the handshake, or would go out in the clear.
fn check_scheme(url: &str, scheme: &str, what: &str) -> Result<(), String> {
    if url.starts_with(&format!("{scheme}://")) {
        return Ok(());
    }
    let why = if scheme == "https" {
        "the listener has TLS"
    } else {
        "the listener has no TLS (give the certificate flags for https)"
    };
    Err(format!(
        "{what}: {url} must start with {scheme}:// because {why}"
    ))
}

/// Parses `1=http://host:port,2=...`. The entry for this member must match its advertised peer URL.
pub(super) fn parse_initial_cluster(
    text: &str,
    own_id: u64,
    own: &MemberNode,
    peer_scheme: &str,
) -> Result<BTreeMap<u64, MemberNode>, String> {
    let members = parse_member_list(text)?;
    for (id, node) in &members {
        check_scheme(&node.peer_url, peer_scheme, "--initial-cluster")?;
        if *id == own_id && node.peer_url != own.peer_url {
            return Err(format!(
                "initial cluster says member {id} is at {}, but it advertises {}",
                node.peer_url, own.peer_url
            ));
        }
    }
    if !members.contains_key(&own_id) {
        return Err(format!(
            "initial cluster does not include this member ({own_id})"
        ));
    }
    Ok(members)
}

/// Parses an initial cluster, `1=http://host:port,2=...`, into members with peer URLs only:
/// every founding member must bootstrap with the same membership, and only peer URLs are known to
/// all of them (each member publishes its client URL after the bootstrap). Shared by `revkv serve`
/// and `revkv snapshot restore`, so a restored cluster names its members exactly as serve does.
pub(crate) fn parse_member_list(text: &str) -> Result<BTreeMap<u64, MemberNode>, String> {
    let mut members = BTreeMap::new();
    for entry in text
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        let (id, peer_url) = entry
            .split_once('=')
            .ok_or_else(|| format!("initial cluster entry {entry:?} is not id=url"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("initial cluster entry {entry:?}: {id:?} is not a member id"))?;
        let peer_url = peer_url.trim().trim_end_matches('/').to_string();
        if !peer_url.starts_with("http://") && !peer_url.starts_with("https://") {
            return Err(format!(
                "initial cluster entry {entry:?}: {peer_url} is not an http:// or https:// URL"
            ));
        }
        let node = MemberNode {
            peer_url,
            client_url: String::new(),
            grpc_url: None,
        };
        if members.insert(id, node).is_some() {
            return Err(format!("initial cluster names member {id} twice"));
        }
    }
    Ok(members)
}
