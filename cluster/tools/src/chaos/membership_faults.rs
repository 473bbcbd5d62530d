//! The nemesis's membership faults: replacing a member (the leader too), growing the cluster to
//! five members and shrinking it back to three, each through the members' own HTTP API, as an
//! operator would; half the new members promote themselves once caught up (`auto_promote`). Every change is one raft membership change at a time, retried while another is
//! in flight, and the harness's view of the members follows what the cluster committed.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::nemesis::{Nemesis, Sent};
use super::schedule::Target;

/// How long one membership request may be retried.
const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait between two tries of a membership request.
const MEMBERSHIP_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// The cluster the nemesis grows to.
pub const LARGEST_CLUSTER: usize = 5;
/// The cluster the nemesis shrinks back to: the size every run starts with.
pub const SMALLEST_CLUSTER: usize = 3;

impl Nemesis<'_> {
    /// Removes the target, then adds a new empty member in its place. `Err` only if the new
    /// member never becomes ready.
    pub(super) async fn replace(&mut self, target: Target) -> Result<String, String> {
        let old = match self.resolve(target).await {
            Ok(id) => id,
            Err(skipped) => return Ok(skipped),
        };
        if let Err(failed) = self.remove_member(old).await {
            return Ok(format!("{failed}; nothing replaced"));
        }
        let added = self.add_new_member().await?;
        Ok(format!("member {old} removed; {added}"))
    }

    /// Adds new members until there are five. `Err` only if a new member never becomes ready.
    pub(super) async fn grow_to_five(&mut self) -> Result<String, String> {
        if self.members.ids().len() >= LARGEST_CLUSTER {
            return Ok(format!("skipped: already {LARGEST_CLUSTER} members"));
        }
        let mut added = Vec::new();
        while self.members.ids().len() < LARGEST_CLUSTER {
            added.push(self.add_new_member().await?);
        }
        Ok(added.join("; "))
    }

    /// Removes members until there are three, the target first and then followers. Stops at
    /// the first removal that fails (the next shrink tries again).
    pub(super) async fn shrink_to_three(&mut self, target: Target) -> String {
        if self.members.ids().len() <= SMALLEST_CLUSTER {
            return format!("skipped: only {SMALLEST_CLUSTER} members");
        }
        let mut removed = Vec::new();
        let mut next = target;
        while self.members.ids().len() > SMALLEST_CLUSTER {
            let old = match self.resolve_once_led(next).await {
                Ok(id) => id,
                Err(skipped) => {
                    removed.push(skipped);
                    break;
                }
            };
            match self.remove_member(old).await {
                Ok(text) => removed.push(text),
                Err(failed) => {
                    removed.push(failed);
                    break;
                }
            }
            next = Target::Follower(0);
        }
        removed.join("; ")
    }

    /// The member `target` names, waiting up to `MEMBERSHIP_TIMEOUT` for a leader to be known
    /// (there is none for a moment after the leader was removed).
    async fn resolve_once_led(&self, target: Target) -> Result<u64, String> {
        let deadline = Instant::now() + MEMBERSHIP_TIMEOUT;
        loop {
            let resolved = self.resolve(target).await;
            if resolved.is_ok() || Instant::now() >= deadline {
                return resolved;
            }
            tokio::time::sleep(MEMBERSHIP_RETRY_PAUSE).await;
        }
    }

    /// Removes member `old` from the cluster and stops its process. A removal that answered no
    /// success is tried again until a member says `old` is gone (404: an earlier try committed)
    /// or `MEMBERSHIP_TIMEOUT` passes; `Err` then, with `old` still a member.
    async fn remove_member(&mut self, old: u64) -> Result<String, String> {
        let path = format!("/v1/members/{old}");
        let already_gone = |status: StatusCode| status == StatusCode::NOT_FOUND;
        let removed = self
            .retry_until_done(Method::DELETE, &path, None, already_gone)
            .await;
        if !removed.succeeded {
            return Err(format!("removing member {old} failed ({})", removed.text));
        }
        self.members.forget(old);
        Ok(format!("member {old} removed ({})", removed.text))
    }

    /// Starts a new, empty member, adds it as a learner, has it promoted once it has caught up
    /// and waits until it is ready; then the workload and watchers may use it. A member with an
    /// odd id is promoted by hand (`POST /v1/members/{id}/promote`); one with an even id is added
    /// with `auto_promote` and the leader must promote it by itself, so every run that adds two
    /// members does both. `Err` if it never becomes ready, or never becomes a voter by itself.
    async fn add_new_member(&mut self) -> Result<String, String> {
        let new = self.members.next_id();
        self.members.start_joining(new).await?;
        let promotes_itself = new.is_multiple_of(2);
        let learner = json!({
            "id": new,
            "peer_url": format!("http://{}", self.members.proxy_address(new)),
            "client_url": self.members.client_url(new),
            "auto_promote": promotes_itself,
        });
        let promoted = if promotes_itself {
            // A try that timed out may have added it, and the leader may have promoted it since,
            // after which an add is refused (4xx): the membership, read next, is the verdict.
            let refused = |status: StatusCode| status.is_client_error();
            let added = self
                .retry_until_done(Method::POST, "/v1/members", Some(&learner), refused)
                .await;
            self.wait_until_voter(new).await?;
            format!("added ({}) and promoted by the leader", added.text)
        } else {
            let never_done = |_: StatusCode| false;
            let added = self
                .retry_until_done(Method::POST, "/v1/members", Some(&learner), never_done)
                .await;
            let promote = format!("/v1/members/{new}/promote");
            let promoted = self
                .retry_until_done(Method::POST, &promote, Some(&json!({})), never_done)
                .await;
            format!("added ({}) and promoted ({})", added.text, promoted.text)
        };
        self.members.wait_until_ready(new).await?;
        self.members.publish_endpoints();
        Ok(format!("member {new} {promoted}"))
    }

    /// Waits until a member lists `id` as a voter, for at most `MEMBERSHIP_TIMEOUT`.
    async fn wait_until_voter(&self, id: u64) -> Result<(), String> {
        let deadline = Instant::now() + MEMBERSHIP_TIMEOUT;
        loop {
            let listed = self.listed_as_learner(id).await;
            if listed == Some(false) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let seen = match listed {
                    Some(_) => "still a learner",
                    None => "not listed by any member that answered",
                };
                return Err(format!(
                    "member {id}, added to promote itself once caught up, is {seen} after \
                     {MEMBERSHIP_TIMEOUT:?}"
                ));
            }
            tokio::time::sleep(MEMBERSHIP_RETRY_PAUSE).await;
        }
    }

    /// Whether the first serving member that answers `GET /v1/members` lists `id` as a learner
    /// (`Some(true)`) or a voter (`Some(false)`); `None` if it does not list it or none answered.
    async fn listed_as_learner(&self, id: u64) -> Option<bool> {
        for (member, url) in self.members.client_urls() {
            if !self.members.is_serving(member) {
                continue;
            }
            let Ok(answer) = self.http.get(format!("{url}/v1/members")).send().await else {
                continue;
            };
            let Ok(body) = answer.json::<serde_json::Value>().await else {
                continue;
            };
            let members = body["members"].as_array()?;
            let listed = members
                .iter()
                .find(|listed| listed["id"].as_u64() == Some(id))?;
            return listed["is_learner"].as_bool();
        }
        None
    }

    /// Sends until a member answers 200 (a membership change is refused while another is in
    /// progress, and a promotion while the learner lags) or a status for which `already_done`
    /// holds, for at most `MEMBERSHIP_TIMEOUT`. An answer that `already_done` accepts counts as
    /// success.
    async fn retry_until_done(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        already_done: impl Fn(StatusCode) -> bool,
    ) -> Sent {
        let deadline = Instant::now() + MEMBERSHIP_TIMEOUT;
        loop {
            let mut sent = self.send_to_any(method.clone(), path, body).await;
            if sent.status.is_some_and(&already_done) {
                sent.succeeded = true;
            }
            if sent.succeeded || Instant::now() >= deadline {
                return sent;
            }
            tokio::time::sleep(MEMBERSHIP_RETRY_PAUSE).await;
        }
    }
}
