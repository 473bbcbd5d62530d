//! Free loopback ports for members and link proxies, each handed out at most once by this
//! process.

use std::net::{SocketAddr, TcpListener};

/// How many ports one call may bind and set aside because this process handed them out before.
const MAXIMUM_SKIPPED_PORTS: usize = 1024;

/// Every loopback port this process has handed out, so that it never hands one out twice. A port
/// handed out is released for a member to bind later; without this ledger the kernel may give the
/// same port to the next caller in between, and two members (or a member and a link proxy) would
/// be told to listen on one port.
static HANDED_OUT_PORTS: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// `count` free loopback listeners on ports this process has never handed out before, all
/// distinct, each recorded as handed out. Ports the kernel offers that were handed out before are
/// held until the call ends, so that it does not offer them again.
pub fn bind_fresh_loopback_listeners(count: usize) -> Result<Vec<TcpListener>, String> {
    let mut handed_out = HANDED_OUT_PORTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut fresh = Vec::with_capacity(count);
    let mut skipped = Vec::new();
    while fresh.len() < count {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|error| format!("bind a free loopback port: {error}"))?;
        let port = listener
            .local_addr()
            .map_err(|error| error.to_string())?
            .port();
        if handed_out.contains(&port) {
            if skipped.len() >= MAXIMUM_SKIPPED_PORTS {
                return Err(format!(
                    "no fresh loopback port after skipping {MAXIMUM_SKIPPED_PORTS} handed out before"
                ));
            }
            skipped.push(listener);
            continue;
        }
        fresh.push(listener);
    }
    for listener in &fresh {
        let port = listener
            .local_addr()
            .map_err(|error| error.to_string())?
            .port();
        handed_out.insert(port);
    }
    Ok(fresh)
}

/// `count` free loopback addresses, all distinct and never handed out before by this process
/// ([`bind_fresh_loopback_listeners`]), released for the members to bind. (Another process may
/// take one in between; the cluster start retries when a member reports it cannot listen.)
pub fn free_addresses(count: usize) -> Result<Vec<SocketAddr>, String> {
    bind_fresh_loopback_listeners(count)?
        .iter()
        .map(|listener| listener.local_addr().map_err(|error| error.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports handed out one at a time and released at once (as the chaos harness does for each
    /// member) never repeat, although the kernel is free to offer a released port again.
    #[test]
    fn free_addresses_never_hands_out_a_port_twice() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..500 {
            let address = free_addresses(1).expect("a free loopback port")[0];
            assert!(
                seen.insert(address.port()),
                "port {} handed out twice",
                address.port()
            );
        }
        let listener = bind_fresh_loopback_listeners(1)
            .expect("a fresh listener")
            .remove(0);
        let port = listener.local_addr().unwrap().port();
        assert!(
            !seen.contains(&port),
            "a held listener got a port handed out before"
        );
    }
}
