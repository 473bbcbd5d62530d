//! The fault-injecting link proxies: one TCP proxy in front of each member's peer listener, so
//! every byte one member sends another passes through a place the harness controls.
//!
//! Members advertise their proxy's address as their peer URL, so all raft traffic (appends, votes,
//! snapshots, forwarded writes, read indexes) goes through a proxy. A proxy knows which member a
//! connection comes from by its source address: each member binds its outgoing peer connections
//! to its own loopback address (`revkv serve --peer-source-address 127.0.0.<10 + id>`), and
//! [`member_of_source`] maps the address back. The rules are per directed link (from, to):
//!
//! - **blocked**: new connections are refused and open ones are cut at once (a partition);
//! - **delay**: every chunk is held this long before it is passed on (a slow link);
//! - **loss**: each chunk cuts its connection with this probability. Raft's RPCs ride on HTTP over
//!   TCP, so a lost message shows up to the sender as a broken call, as it would on a real network
//!   whose TCP connection is reset.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The largest chunk one read moves through a proxy.
const CHUNK_BYTES: usize = 64 * 1024;

/// The most connections one proxy carries at once; more are closed as they arrive.
const MAX_CONNECTIONS: usize = 1_024;

/// How long the proxy waits after a failed accept before accepting again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// How long the proxy waits to connect to the member behind it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The loopback address member `id` sends its peer traffic from.
pub fn source_address_of(member: u64) -> IpAddr {
    assert!(
        (1..=200).contains(&member),
        "member ids map to 127.0.0.11-210"
    );
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + member as u8))
}

/// The member a connection from `address` comes from, if it is a member's source address.
pub fn member_of_source(address: IpAddr) -> Option<u64> {
    match address {
        IpAddr::V4(v4) if v4.octets()[..3] == [127, 0, 0] && v4.octets()[3] > 10 => {
            Some(u64::from(v4.octets()[3] - 10))
        }
        _ => None,
    }
}

/// What happens to the traffic of one directed link.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkRule {
    pub blocked: bool,
    pub delay: Duration,
    /// The probability, per chunk, that the connection is cut.
    pub loss: f64,
}

/// The rules of every link, shared by all proxies. Links without a rule pass traffic untouched.
#[derive(Clone, Default)]
pub struct LinkRules {
    inner: Arc<LinkRulesInner>,
}

#[derive(Default)]
struct LinkRulesInner {
    rules: Mutex<BTreeMap<(u64, u64), LinkRule>>,
    /// Bumped on every change, so open connections re-check their link.
    generation: watch::Sender<u64>,
    counts: [AtomicU64; 4],
}

/// What the proxies did to the traffic, so a report shows the faults took effect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyCounts {
    /// Connections refused because their link was blocked.
    pub refused: u64,
    /// Open connections cut when their link became blocked.
    pub cut: u64,
    /// Connections cut by a lossy link.
    pub lost: u64,
    /// Chunks held back by a slow link.
    pub delayed: u64,
}

#[derive(Clone, Copy)]
enum Counted {
    Refused = 0,
    Cut = 1,
    Lost = 2,
    Delayed = 3,
}

impl LinkRules {
    /// The rule for traffic from `from` to `to`.
    pub fn rule(&self, from: u64, to: u64) -> LinkRule {
        let rules = self.inner.rules.lock().expect("link rules lock");
        rules.get(&(from, to)).copied().unwrap_or_default()
    }

    /// Sets the rule of one directed link.
    pub fn set(&self, from: u64, to: u64, rule: LinkRule) {
        {
            let mut rules = self.inner.rules.lock().expect("link rules lock");
            if rule == LinkRule::default() {
                rules.remove(&(from, to));
            } else {
                rules.insert((from, to), rule);
            }
        }
        self.inner
            .generation
            .send_modify(|generation| *generation += 1);
    }

    /// Sets the same rule on both directions between `member` and each of `others`.
    pub fn set_between(&self, member: u64, others: &[u64], rule: LinkRule) {
        for other in others {
            self.set(member, *other, rule);
            self.set(*other, member, rule);
        }
    }

    /// Removes every rule: the network heals.
    pub fn heal(&self) {
        self.inner.rules.lock().expect("link rules lock").clear();
        self.inner
            .generation
            .send_modify(|generation| *generation += 1);
    }

    /// What the proxies have done so far.
    pub fn counts(&self) -> ProxyCounts {
        let read = |counted: Counted| self.inner.counts[counted as usize].load(Ordering::Relaxed);
        ProxyCounts {
            refused: read(Counted::Refused),
            cut: read(Counted::Cut),
            lost: read(Counted::Lost),
            delayed: read(Counted::Delayed),
        }
    }

    fn count(&self, counted: Counted) {
        self.inner.counts[counted as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.generation.subscribe()
    }
}

/// The proxy in front of one member's peer listener. Dropping it stops accepting and cuts every
/// connection it carries.
pub struct LinkProxy {
    pub address: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LinkProxy {
    /// Listens on a free loopback port (one the harness never handed out, so that it cannot be a
    /// member's port) and forwards to member `to`'s peer listener at `target`.
    pub async fn start(
        to: u64,
        target: SocketAddr,
        rules: LinkRules,
        seed: u64,
    ) -> std::io::Result<LinkProxy> {
        let listener = crate::harness::bind_fresh_loopback_listeners(1)
            .map_err(std::io::Error::other)?
            .remove(0);
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let address = listener.local_addr()?;
        let task = tokio::spawn(accept_loop(listener, to, target, rules, seed));
        Ok(LinkProxy { address, task })
    }
}

async fn accept_loop(
    listener: TcpListener,
    to: u64,
    target: SocketAddr,
    rules: LinkRules,
    seed: u64,
) {
    let mut connections = tokio::task::JoinSet::new();
    let mut connection_number = 0u64;
    loop {
        let (inbound, source) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of file descriptors or similar: wait instead of spinning on the error.
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        // Reap finished connections so the set does not grow for the whole run.
        while connections.try_join_next().is_some() {}
        if connections.len() >= MAX_CONNECTIONS {
            // Members pool their connections, so this many open at once is a leak, not load.
            continue;
        }
        // Traffic from an address that is no member's (a tool, a test) is never faulted.
        let from = member_of_source(source.ip()).unwrap_or(0);
        connection_number += 1;
        let random = fastrand::Rng::with_seed(seed ^ (to << 48) ^ (from << 40) ^ connection_number);
        connections.spawn(carry(inbound, from, to, target, rules.clone(), random));
    }
}

/// Carries one connection until either side closes it or its link's rule cuts it.
async fn carry(
    inbound: TcpStream,
    from: u64,
    to: u64,
    target: SocketAddr,
    rules: LinkRules,
    random: fastrand::Rng,
) {
    if rules.rule(from, to).blocked {
        rules.count(Counted::Refused);
        return;
    }
    let Ok(Ok(outbound)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await
    else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (inbound_read, inbound_write) = inbound.into_split();
    let (outbound_read, outbound_write) = outbound.into_split();
    let link = Link { from, to, rules };
    // Both directions obey the rule of the link the connection was opened on: the answers to a
    // member's calls travel back over the same connection.
    let forward = pump(inbound_read, outbound_write, link.clone(), random.clone());
    let backward = pump(outbound_read, inbound_write, link, random);
    tokio::select! {
        _ = forward => {}
        _ = backward => {}
    }
}

#[derive(Clone)]
struct Link {
    from: u64,
    to: u64,
    rules: LinkRules,
}

/// Moves bytes one way until EOF, an error, or the link's rule cuts the connection.
async fn pump(
    mut reader: tokio::net::tcp::OwnedReadHalf,
    mut writer: tokio::net::tcp::OwnedWriteHalf,
    link: Link,
    mut random: fastrand::Rng,
) {
    let mut changes = link.rules.subscribe();
    let mut buffer = vec![0u8; CHUNK_BYTES];
    loop {
        let read = tokio::select! {
            read = reader.read(&mut buffer) => read,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                if link.rules.rule(link.from, link.to).blocked {
                    link.rules.count(Counted::Cut);
                    return;
                }
                continue;
            }
        };
        let length = match read {
            Ok(0) | Err(_) => return,
            Ok(length) => length,
        };
        let rule = link.rules.rule(link.from, link.to);
        if rule.blocked {
            link.rules.count(Counted::Cut);
            return;
        }
        if rule.loss > 0.0 && random.f64() < rule.loss {
            link.rules.count(Counted::Lost);
            return;
        }
        if !rule.delay.is_zero() {
            link.rules.count(Counted::Delayed);
            tokio::time::sleep(rule.delay).await;
        }
        if writer.write_all(&buffer[..length]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_addresses_map_back_to_their_members() {
        for member in [1, 2, 3, 17, 200] {
            assert_eq!(member_of_source(source_address_of(member)), Some(member));
        }
        assert_eq!(member_of_source("127.0.0.1".parse().unwrap()), None);
        assert_eq!(member_of_source("10.0.0.12".parse().unwrap()), None);
    }

    /// A proxy in front of an echo server passes traffic, refuses it while its link is blocked,
    /// and passes it again once the network heals.
    #[tokio::test]
    async fn a_blocked_link_refuses_and_cuts_connections_until_healed() {
        let echo = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let echo_address = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        let rules = LinkRules::default();
        let proxy = LinkProxy::start(2, echo_address, rules.clone(), 7)
            .await
            .unwrap();
        let from_member_one = |address: SocketAddr| async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket
                .bind(SocketAddr::new(source_address_of(1), 0))
                .unwrap();
            socket.connect(address).await.unwrap()
        };

        let mut open = from_member_one(proxy.address).await;
        assert_eq!(round_trip(&mut open).await, Some(b"ping".to_vec()));

        rules.set(
            1,
            2,
            LinkRule {
                blocked: true,
                ..LinkRule::default()
            },
        );
        assert_eq!(
            round_trip(&mut open).await,
            None,
            "the open connection is cut"
        );
        let mut refused = from_member_one(proxy.address).await;
        assert_eq!(
            round_trip(&mut refused).await,
            None,
            "new connections are refused"
        );
        // The other direction's rule does not touch this link.
        assert_eq!(rules.rule(2, 1), LinkRule::default());

        let counts = rules.counts();
        assert!(counts.cut >= 1 && counts.refused >= 1, "{counts:?}");
        rules.heal();
        let mut healed = from_member_one(proxy.address).await;
        assert_eq!(round_trip(&mut healed).await, Some(b"ping".to_vec()));
    }

    async fn round_trip(stream: &mut TcpStream) -> Option<Vec<u8>> {
        stream.write_all(b"ping").await.ok()?;
        let mut answer = vec![0u8; 4];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut answer));
        match read.await {
            Ok(Ok(_)) => Some(answer),
            _ => None,
        }
    }
}
