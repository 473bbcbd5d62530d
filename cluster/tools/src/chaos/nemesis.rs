//! The nemesis: plays the fault schedule against the running cluster, one fault at a time, and
//! undoes each fault before the next (a killed member restarts on its data, a paused one resumes,
//! cut or degraded links heal), so the cluster always has a chance to recover.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use super::members::Members;
use super::proxy::LinkRule;
use super::schedule::{fault_length, Fault, Step, Target};

/// How long adding or promoting a member may be retried.
const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(30);

/// How one administrative request went.
struct Sent {
    succeeded: bool,
    text: String,
}

/// One fault as it was injected, for the report.
#[derive(Clone, Debug)]
pub struct InjectedFault {
    /// When it started, since the run began.
    pub at: Duration,
    pub name: &'static str,
    /// The member it hit, and anything else worth knowing (or why it was skipped).
    pub detail: String,
}

/// What the nemesis needs besides the cluster.
pub struct Nemesis<'a> {
    pub members: &'a mut Members,
    pub started: Instant,
    pub deadline: Instant,
    pub http: reqwest::Client,
    /// The highest revision it is safe to compact at: every watcher has seen it.
    pub compactable: Box<dyn Fn() -> u64 + Send + 'a>,
    pub injected: Vec<InjectedFault>,
}

impl Nemesis<'_> {
    /// Plays `steps` until the deadline; `Err` if a member does not come back.
    pub async fn run(&mut self, steps: &[Step]) -> Result<(), String> {
        for step in steps {
            let start = Instant::now() + step.after;
            if start + fault_length(&step.fault) >= self.deadline {
                break;
            }
            tokio::time::sleep_until(start.into()).await;
            self.inject(step.fault).await?;
        }
        Ok(())
    }

    async fn inject(&mut self, fault: Fault) -> Result<(), String> {
        let at = self.started.elapsed();
        let detail = match fault {
            Fault::Kill { target, down } => self.kill(target, down).await?,
            Fault::Pause { target, paused } => self.pause(target, paused).await,
            Fault::Partition {
                target,
                cut,
                one_way: true,
            } => self.cut_outgoing_links(target, cut).await,
            Fault::Partition { target, cut, .. } => {
                let rule = LinkRule {
                    blocked: true,
                    ..LinkRule::default()
                };
                self.degrade_links(target, rule, cut).await
            }
            Fault::SlowLinks {
                target,
                delay,
                slow,
            } => {
                let rule = LinkRule {
                    delay,
                    ..LinkRule::default()
                };
                self.degrade_links(target, rule, slow).await
            }
            Fault::LossyLinks {
                target,
                loss,
                lossy,
            } => {
                let rule = LinkRule {
                    loss,
                    ..LinkRule::default()
                };
                self.degrade_links(target, rule, lossy).await
            }
            Fault::TransferLeader => self.transfer_leader().await,
            Fault::Compact => self.compact().await,
            Fault::ReplaceFollower { choice } => self.replace_follower(choice).await?,
        };
        self.injected.push(InjectedFault {
            at,
            name: fault.name(),
            detail,
        });
        Ok(())
    }

    /// The member `target` names now, or why there is none.
    async fn resolve(&self, target: Target) -> Result<u64, String> {
        let leader = self
            .members
            .leader()
            .await
            .ok_or("skipped: no leader known")?;
        match target {
            Target::Leader => Ok(leader),
            Target::Follower(choice) => {
                let others: Vec<u64> = self
                    .members
                    .ids()
                    .into_iter()
                    .filter(|id| *id != leader)
                    .collect();
                Ok(others[(choice as usize) % others.len()])
            }
        }
    }

    async fn kill(&mut self, target: Target, down: Duration) -> Result<String, String> {
        let id = match self.resolve(target).await {
            Ok(id) => id,
            Err(skipped) => return Ok(skipped),
        };
        self.members.kill(id);
        tokio::time::sleep(down).await;
        self.members.restart(id).await?;
        Ok(format!("member {id} down for {down:?}"))
    }

    async fn pause(&mut self, target: Target, paused: Duration) -> String {
        let id = match self.resolve(target).await {
            Ok(id) => id,
            Err(skipped) => return skipped,
        };
        self.members.pause(id);
        tokio::time::sleep(paused).await;
        self.members.resume(id);
        format!("member {id} paused for {paused:?}")
    }

    async fn degrade_links(&mut self, target: Target, rule: LinkRule, length: Duration) -> String {
        let id = match self.resolve(target).await {
            Ok(id) => id,
            Err(skipped) => return skipped,
        };
        let others: Vec<u64> = self
            .members
            .ids()
            .into_iter()
            .filter(|other| *other != id)
            .collect();
        self.members.link_rules().set_between(id, &others, rule);
        tokio::time::sleep(length).await;
        self.members.link_rules().heal();
        format!("member {id}'s links {rule:?} for {length:?}")
    }

    /// Blocks only the links from the target to the others, for `length`.
    async fn cut_outgoing_links(&mut self, target: Target, length: Duration) -> String {
        let id = match self.resolve(target).await {
            Ok(id) => id,
            Err(skipped) => return skipped,
        };
        let blocked = LinkRule {
            blocked: true,
            ..LinkRule::default()
        };
        for other in self.members.ids().into_iter().filter(|other| *other != id) {
            self.members.link_rules().set(id, other, blocked);
        }
        tokio::time::sleep(length).await;
        self.members.link_rules().heal();
        format!("member {id}'s outgoing links cut for {length:?}")
    }

    async fn transfer_leader(&mut self) -> String {
        let Ok(to) = self.resolve(Target::Follower(0)).await else {
            return "skipped: no leader known".into();
        };
        let body = json!({ "to": to });
        let answer = self.post_to_any("/v1/leader/transfer", &body).await;
        format!("to member {to}: {answer}")
    }

    async fn compact(&mut self) -> String {
        let revision = (self.compactable)();
        if revision < 2 {
            return "skipped: nothing every watcher has seen".into();
        }
        let answer = self
            .post_to_any("/v1/compact", &json!({ "revision": revision }))
            .await;
        format!("at revision {revision}: {answer}")
    }

    /// Removes a follower, then adds a new empty member as a learner and promotes it once it has
    /// caught up. `Err` only if the new member never becomes ready.
    async fn replace_follower(&mut self, choice: u64) -> Result<String, String> {
        let old = match self.resolve(Target::Follower(choice)).await {
            Ok(id) => id,
            Err(skipped) => return Ok(skipped),
        };
        let path = format!("/v1/members/{old}");
        let removed = self.send_to_any(Method::DELETE, &path, None).await;
        if !removed.succeeded {
            return Ok(format!(
                "removing member {old} failed ({}); nothing replaced",
                removed.text
            ));
        }
        self.members.forget(old);
        let new = self.members.next_id();
        self.members.start_joining(new).await?;
        let learner = json!({
            "id": new,
            "peer_url": format!("http://{}", self.members.proxy_address(new)),
            "client_url": self.members.client_url(new),
        });
        let added = self
            .retry_until_done(Method::POST, "/v1/members", Some(&learner))
            .await;
        let promote = format!("/v1/members/{new}/promote");
        let promoted = self
            .retry_until_done(Method::POST, &promote, Some(&json!({})))
            .await;
        self.members.wait_until_ready(new).await?;
        self.members.publish_endpoints();
        Ok(format!(
            "member {old} removed; member {new} added ({}) and promoted ({})",
            added.text, promoted.text
        ))
    }

    /// Sends until a member answers 200 (a membership change is refused while another is in
    /// progress, and a promotion while the learner lags), for at most `MEMBERSHIP_TIMEOUT`.
    async fn retry_until_done(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Sent {
        let deadline = Instant::now() + MEMBERSHIP_TIMEOUT;
        loop {
            let sent = self.send_to_any(method.clone(), path, body).await;
            if sent.succeeded || Instant::now() >= deadline {
                return sent;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// POSTs to the first serving member that answers; the answer's status, for the report.
    async fn post_to_any(&self, path: &str, body: &serde_json::Value) -> String {
        self.send_to_any(Method::POST, path, Some(body)).await.text
    }

    /// Sends to the first serving member that answers.
    async fn send_to_any(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Sent {
        for (id, url) in self.members.client_urls() {
            if !self.members.is_serving(id) {
                continue;
            }
            let mut request = self.http.request(method.clone(), format!("{url}{path}"));
            if let Some(body) = body {
                request = request.json(body);
            }
            if let Ok(answer) = request.send().await {
                return Sent {
                    succeeded: answer.status().is_success(),
                    text: format!("member {id} answered {}", answer.status()),
                };
            }
        }
        Sent {
            succeeded: false,
            text: "no member answered".into(),
        }
    }

    /// Undoes whatever is still in effect: links heal, paused members resume, killed ones
    /// restart; then every member must become ready.
    pub async fn heal_everything(&mut self) -> Result<(), String> {
        self.members.link_rules().heal();
        for id in self.members.ids() {
            self.members.resume(id);
            self.members.restart(id).await?;
        }
        Ok(())
    }
}
