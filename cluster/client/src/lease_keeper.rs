//! [`LeaseKeeper`]: one background task that keeps many leases alive over one streaming
//! keep-alive (`POST /v1/leases/keepalive`), and tells each lease's owner when it is lost.
//!
//! Rules:
//! - Each lease is renewed a third of its TTL after its last renewal (etcd's client does the
//!   same), all due leases in one chunk of lines on the open stream.
//! - A lease's deadline is when its last acknowledged renewal (or its grant) was *sent* plus the
//!   TTL the member answered. A member renews from a moment after it received the request, so the
//!   keeper's deadline is never later than the cluster's: an owner learns of the loss no later than
//!   the cluster expires the lease (up to the TTL earlier if renewals keep failing).
//! - A lease is lost when a renewal answers `not_found` ([`LeaseLoss::NotFound`]), or when its
//!   deadline passes without an acknowledged renewal ([`LeaseLoss::DeadlinePassed`]); its owner
//!   sees [`LeaseState::Lost`] on the watch channel and the keeper stops renewing it.
//! - A broken stream (connection lost, member stopped, `unavailable` answers) is reopened on the
//!   next member (the client's failover), after a growing, jittered delay; renewals in flight are
//!   sent again there. An idle stream the member ended is reopened when a renewal is next due.
//! - Bounds: leases per keeper ([`LeaseKeeperSettings::max_leases`]), the command queue, the
//!   request body's queue, and the delays between reopens.
//! - Dropping every handle of a [`KeptLease`] stops its renewals (the lease then expires after its
//!   TTL unless revoked). When every [`LeaseKeeper`] clone is dropped, the task ends and every
//!   lease still kept is [`LeaseLoss::KeeperStopped`].

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep_until, Instant};

use super::backoff::Backoff;
use super::error::ClientError;
use super::keepalive_stream::{KeepAliveAnswer, KeepAliveStream, SendOutcome};
use super::Client;

/// Bounds and delays of a [`LeaseKeeper`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseKeeperSettings {
    /// Leases one keeper holds at most; one more is refused with [`ClientError::Invalid`].
    pub max_leases: usize,
    /// Commands (new leases to keep) queued for the task.
    pub command_buffer: usize,
    /// Chunks of renewal lines queued on the request body.
    pub stream_buffer_chunks: usize,
    /// Delays before reopening a broken stream, and before renewing again after a failed renewal.
    pub retry_backoff: Backoff,
    /// How long a full request-body queue is left to drain before sending again.
    pub full_queue_pause: Duration,
}

impl Default for LeaseKeeperSettings {
    fn default() -> Self {
        LeaseKeeperSettings {
            max_leases: 10_000,
            command_buffer: 64,
            stream_buffer_chunks: 16,
            retry_backoff: Backoff {
                duration: Duration::from_millis(50),
                factor: 2.0,
                jitter: 0.5,
                steps: 16,
                cap: Duration::from_secs(1),
            },
            full_queue_pause: Duration::from_millis(20),
        }
    }
}

/// What the owner of a kept lease sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Renewed; the cluster keeps it at least until `expires_by` (the keeper's conservative
    /// deadline).
    Alive {
        ttl_seconds: i64,
        expires_by: Instant,
    },
    /// Lost for good; the keeper no longer renews it.
    Lost(LeaseLoss),
}

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseLoss {
    /// A renewal answered `not_found`: revoked or expired in the cluster.
    NotFound,
    /// The deadline passed without an acknowledged renewal (cluster unreachable, no leader).
    DeadlinePassed,
    /// The keeper ended (every [`LeaseKeeper`] handle was dropped).
    KeeperStopped,
}

/// A lease a [`LeaseKeeper`] keeps alive. Clones share the state channel; the keeper stops
/// renewing once every clone (and every receiver from [`KeptLease::watch`]) is dropped.
#[derive(Debug, Clone)]
pub struct KeptLease {
    id: i64,
    state: watch::Receiver<LeaseState>,
}

impl KeptLease {
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The state now.
    pub fn state(&self) -> LeaseState {
        *self.state.borrow()
    }

    pub fn is_lost(&self) -> bool {
        matches!(self.state(), LeaseState::Lost(_))
    }

    /// Waits until the lease is lost, and says why.
    pub async fn lost(&self) -> LeaseLoss {
        let mut state = self.state.clone();
        loop {
            if let LeaseState::Lost(loss) = *state.borrow_and_update() {
                return loss;
            }
            if state.changed().await.is_err() {
                return LeaseLoss::KeeperStopped;
            }
        }
    }

    /// A receiver of every state change.
    pub fn watch(&self) -> watch::Receiver<LeaseState> {
        self.state.clone()
    }
}

/// A handle on the keeper task; clones share it. See the module comment.
#[derive(Clone)]
pub struct LeaseKeeper {
    client: Client,
    commands: mpsc::Sender<Command>,
}

/// A lease to keep, with when it is next due and when it expires unless renewed.
struct Command {
    id: i64,
    ttl: Duration,
    next_renewal: Instant,
    deadline: Instant,
    reply: oneshot::Sender<Result<watch::Receiver<LeaseState>, ClientError>>,
}

impl LeaseKeeper {
    /// Starts a keeper with the default settings on the current tokio runtime.
    pub fn start(client: &Client) -> LeaseKeeper {
        LeaseKeeper::start_with(client, LeaseKeeperSettings::default())
    }

    pub fn start_with(client: &Client, settings: LeaseKeeperSettings) -> LeaseKeeper {
        let (commands, receiver) = mpsc::channel(settings.command_buffer.max(1));
        let task = KeeperTask {
            client: client.clone(),
            settings,
            commands: receiver,
            leases: HashMap::new(),
            stream: None,
            reconnect_at: Instant::now(),
            send_paused_until: Instant::now(),
            backoff: settings.retry_backoff,
        };
        tokio::spawn(task.run());
        LeaseKeeper {
            client: client.clone(),
            commands,
        }
    }

    /// The client the keeper renews through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Grants a lease of at least `ttl_seconds` and keeps it alive.
    pub async fn grant(&self, ttl_seconds: i64) -> Result<KeptLease, ClientError> {
        let sent_at = Instant::now();
        let granted = self.client.lease_grant(ttl_seconds, None).await?;
        let ttl = seconds(granted.ttl);
        self.register(
            granted.id,
            ttl,
            sent_at + ttl / 3,
            deadline_after(sent_at, ttl),
        )
        .await
    }

    /// Keeps an existing lease of `ttl_seconds` alive, renewing it at once (its age is unknown,
    /// so the first deadline assumes it was renewed just now; a lease already gone is reported
    /// lost as soon as that renewal answers).
    pub async fn keep(&self, id: i64, ttl_seconds: i64) -> Result<KeptLease, ClientError> {
        let now = Instant::now();
        let ttl = seconds(ttl_seconds);
        self.register(id, ttl, now, deadline_after(now, ttl)).await
    }

    async fn register(
        &self,
        id: i64,
        ttl: Duration,
        next_renewal: Instant,
        deadline: Instant,
    ) -> Result<KeptLease, ClientError> {
        let stopped = || ClientError::Invalid {
            message: "the lease keeper has stopped".into(),
        };
        let (reply, answer) = oneshot::channel();
        let command = Command {
            id,
            ttl,
            next_renewal,
            deadline,
            reply,
        };
        self.commands.send(command).await.map_err(|_| stopped())?;
        let state = answer.await.map_err(|_| stopped())??;
        Ok(KeptLease { id, state })
    }
}

fn seconds(ttl_seconds: i64) -> Duration {
    Duration::from_secs(ttl_seconds.max(1).unsigned_abs())
}

/// `from + ttl`, or a year on for TTLs too long to add (etcd's maximum is 9e9 s).
fn deadline_after(from: Instant, ttl: Duration) -> Instant {
    from.checked_add(ttl)
        .unwrap_or_else(|| from + Duration::from_secs(365 * 24 * 3600))
}

/// One kept lease inside the task.
struct Kept {
    ttl: Duration,
    next_renewal: Instant,
    deadline: Instant,
    /// When the renewal awaiting its answer was sent.
    sent_at: Option<Instant>,
    state: watch::Sender<LeaseState>,
}

struct KeeperTask {
    client: Client,
    settings: LeaseKeeperSettings,
    commands: mpsc::Receiver<Command>,
    leases: HashMap<i64, Kept>,
    stream: Option<KeepAliveStream>,
    /// No stream is opened before this (after a failure).
    reconnect_at: Instant,
    /// No renewal is queued before this (the request body's queue was full).
    send_paused_until: Instant,
    backoff: Backoff,
}

/// What woke the task.
enum Wake {
    Command(Option<Command>),
    Answer(Result<KeepAliveAnswer, String>),
    Timer,
}

impl KeeperTask {
    async fn run(mut self) {
        loop {
            self.forget_lost_and_abandoned(Instant::now());
            if self.renewal_due(Instant::now()) {
                self.ensure_stream().await;
                self.send_due(Instant::now());
            }
            let wake_at = self.next_wake();
            let wake = tokio::select! {
                command = self.commands.recv() => Wake::Command(command),
                answer = next_answer(&mut self.stream) => Wake::Answer(answer),
                () = sleep_until(wake_at) => Wake::Timer,
            };
            match wake {
                Wake::Command(None) => return self.stop(),
                Wake::Command(Some(command)) => self.accept(command),
                Wake::Answer(Ok(answer)) => self.handle_answer(answer),
                Wake::Answer(Err(_reason)) => self.break_stream(),
                Wake::Timer => {}
            }
        }
    }

    fn accept(&mut self, command: Command) {
        if self.leases.len() >= self.settings.max_leases && !self.leases.contains_key(&command.id) {
            let refused = ClientError::Invalid {
                message: format!(
                    "this keeper already keeps {} leases",
                    self.settings.max_leases
                ),
            };
            let _ = command.reply.send(Err(refused));
            return;
        }
        let alive = LeaseState::Alive {
            ttl_seconds: command.ttl.as_secs() as i64,
            expires_by: command.deadline,
        };
        let (state, receiver) = watch::channel(alive);
        let kept = Kept {
            ttl: command.ttl,
            next_renewal: command.next_renewal,
            deadline: command.deadline,
            sent_at: None,
            state,
        };
        self.leases.insert(command.id, kept);
        let _ = command.reply.send(Ok(receiver));
    }

    /// Reports leases past their deadline as lost, and forgets leases nobody watches any more.
    fn forget_lost_and_abandoned(&mut self, now: Instant) {
        self.leases.retain(|_, kept| {
            if kept.state.is_closed() {
                return false;
            }
            if now >= kept.deadline {
                kept.state
                    .send_replace(LeaseState::Lost(LeaseLoss::DeadlinePassed));
                return false;
            }
            true
        });
        if self.leases.is_empty() {
            // Nothing to renew: let the member free the stream rather than wait for its idle end.
            self.stream = None;
        }
    }

    fn renewal_due(&self, now: Instant) -> bool {
        self.leases
            .values()
            .any(|kept| kept.sent_at.is_none() && kept.next_renewal <= now)
    }

    /// Opens a stream if none is open and the delay after the last failure has passed.
    async fn ensure_stream(&mut self) {
        if self.stream.is_some() || Instant::now() < self.reconnect_at {
            return;
        }
        let timeout = self.open_timeout();
        let buffered = self.settings.stream_buffer_chunks;
        match KeepAliveStream::open(&self.client, buffered, timeout).await {
            Ok(stream) => self.stream = Some(stream),
            Err(_) => self.reconnect_at = Instant::now() + self.backoff.step(),
        }
    }

    /// The client's timeout, but no later than the first deadline, so a slow open cannot hide a
    /// lost lease from its owner.
    fn open_timeout(&self) -> Duration {
        let now = Instant::now();
        let first_deadline = self.leases.values().map(|kept| kept.deadline).min();
        let until_deadline = first_deadline.map_or(self.client.timeout(), |deadline| {
            deadline.saturating_duration_since(now)
        });
        self.client
            .timeout()
            .min(until_deadline)
            .max(Duration::from_millis(100))
    }

    /// Queues a renewal line for every due lease on the open stream.
    fn send_due(&mut self, now: Instant) {
        let Some(stream) = &self.stream else {
            return;
        };
        if now < self.send_paused_until {
            return;
        }
        let due: Vec<i64> = self
            .leases
            .iter()
            .filter(|(_, kept)| kept.sent_at.is_none() && kept.next_renewal <= now)
            .map(|(id, _)| *id)
            .collect();
        if due.is_empty() {
            return;
        }
        match stream.try_send(&due) {
            SendOutcome::Sent => {
                for id in due {
                    if let Some(kept) = self.leases.get_mut(&id) {
                        kept.sent_at = Some(now);
                    }
                }
            }
            SendOutcome::Full => self.send_paused_until = now + self.settings.full_queue_pause,
            SendOutcome::Closed => self.break_stream(),
        }
    }

    fn handle_answer(&mut self, answer: KeepAliveAnswer) {
        let now = Instant::now();
        match answer {
            KeepAliveAnswer::Renewed { id, ttl_seconds } => {
                self.backoff = self.settings.retry_backoff;
                let Some(kept) = self.leases.get_mut(&id) else {
                    return;
                };
                let ttl = seconds(ttl_seconds);
                kept.ttl = ttl;
                kept.deadline = deadline_after(kept.sent_at.take().unwrap_or(now), ttl);
                kept.next_renewal = now + ttl / 3;
                kept.state.send_replace(LeaseState::Alive {
                    ttl_seconds,
                    expires_by: kept.deadline,
                });
            }
            KeepAliveAnswer::Failed { id, code, .. } if code == "not_found" => {
                if let Some(kept) = self.leases.remove(&id) {
                    kept.state
                        .send_replace(LeaseState::Lost(LeaseLoss::NotFound));
                }
            }
            KeepAliveAnswer::Failed { id, code, .. } => {
                let retry_at = now + self.backoff.step();
                if let Some(kept) = self.leases.get_mut(&id) {
                    kept.sent_at = None;
                    kept.next_renewal = retry_at;
                }
                // A member without a leader answers every renewal so; another may have one.
                if code == "unavailable" {
                    self.break_stream();
                }
            }
            // An idle stream ends normally: open another when a renewal is next due.
            KeepAliveAnswer::Ended { code, .. } if code == "timeout" => {
                self.stream = None;
                self.resend_in_flight();
            }
            KeepAliveAnswer::Ended { .. } => self.break_stream(),
        }
    }

    /// Drops the stream, steers the next one to another member after a delay, and sends the
    /// renewals still awaiting answers again there.
    fn break_stream(&mut self) {
        if let Some(stream) = self.stream.take() {
            self.client.transport.avoid(stream.endpoint());
        }
        self.reconnect_at = Instant::now() + self.backoff.step();
        self.resend_in_flight();
    }

    fn resend_in_flight(&mut self) {
        for kept in self.leases.values_mut() {
            if kept.sent_at.take().is_some() {
                kept.next_renewal = Instant::now();
            }
        }
    }

    /// The earliest moment something is due: a renewal (not before a reopen or a send pause is
    /// allowed) or a deadline.
    fn next_wake(&self) -> Instant {
        let not_before = match self.stream {
            Some(_) => self.send_paused_until,
            None => self.reconnect_at,
        };
        let renewals = self
            .leases
            .values()
            .filter(|kept| kept.sent_at.is_none())
            .map(|kept| kept.next_renewal.max(not_before));
        let deadlines = self.leases.values().map(|kept| kept.deadline);
        renewals
            .chain(deadlines)
            .min()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))
    }

    fn stop(self) {
        for kept in self.leases.values() {
            kept.state
                .send_replace(LeaseState::Lost(LeaseLoss::KeeperStopped));
        }
    }
}

/// The next answer of the open stream; never ready without one.
async fn next_answer(stream: &mut Option<KeepAliveStream>) -> Result<KeepAliveAnswer, String> {
    match stream {
        Some(stream) => stream.next_answer().await,
        None => std::future::pending().await,
    }
}
