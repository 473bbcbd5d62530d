//! Key-value calls: get, range (one page, or every page through [`RangePages`]), put, delete and
//! patch, with their request builders.
//!
//! Keys go into URL paths and query strings percent-encoded byte for byte (`/` kept in paths), so
//! any UTF-8 key round-trips. Reads are idempotent and fail over freely; writes are not (see
//! [`transport`](super::transport)).

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::Method;
use serde_json::json;

use super::error::ClientError;
use super::transport::{Call, CallBody};
use super::types::{DeleteResponse, GetResponse, PatchResponse, PutResponse, RangeResponse};
use super::Client;

/// Bytes kept as they are in a key in a URL path: RFC 3986 unreserved characters and `/`.
const PATH_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// Bytes kept as they are in a query value: unreserved characters only.
const QUERY_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The most pages [`RangePages`] reads of one range before it stops with an error (a member caps
/// each page at 100,000 keys by default).
pub const MOST_PAGES_PER_RANGE: u64 = 100_000;

/// `/v1/kv/{key}` with the key percent-encoded.
pub fn key_path(key: &str) -> String {
    format!("/v1/kv/{}", utf8_percent_encode(key, PATH_KEEP))
}

/// A query value, percent-encoded.
pub fn query_value(value: &str) -> String {
    utf8_percent_encode(value, QUERY_KEEP).to_string()
}

/// How a read is served (`consistency=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Consistency {
    /// Through the leader's read index: sees every write acknowledged before it (the default).
    #[default]
    Linearizable,
    /// From the answering member's state: may be stale, never goes backwards on one member.
    Serializable,
}

impl Consistency {
    fn as_query_value(self) -> &'static str {
        match self {
            Consistency::Linearizable => "linearizable",
            Consistency::Serializable => "serializable",
        }
    }
}

/// Options of a single-key read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    pub consistency: Consistency,
    /// Read the state after this revision (history).
    pub revision: Option<u64>,
    /// Serializable reads: wait until the member has applied this revision.
    pub min_revision: Option<u64>,
}

impl ReadOptions {
    fn query_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = vec![("consistency", self.consistency.as_query_value().to_string())];
        if let Some(revision) = self.revision {
            pairs.push(("revision", revision.to_string()));
        }
        if let Some(min_revision) = self.min_revision {
            pairs.push(("min_revision", min_revision.to_string()));
        }
        pairs
    }
}

/// A range read: every key under a prefix, or the keys in `[key, range_end)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RangeRequest {
    pub prefix: Option<String>,
    pub key: Option<String>,
    pub range_end: Option<String>,
    pub limit: Option<u64>,
    pub keys_only: bool,
    pub count_only: bool,
    pub read: ReadOptions,
    /// The `continue` token of the previous page.
    pub continue_token: Option<String>,
}

impl RangeRequest {
    /// Every key that starts with `prefix` (`""`: every key).
    pub fn prefix(prefix: impl Into<String>) -> Self {
        RangeRequest {
            prefix: Some(prefix.into()),
            ..RangeRequest::default()
        }
    }

    /// The keys from `key` (inclusive) to `range_end` (exclusive).
    pub fn between(key: impl Into<String>, range_end: impl Into<String>) -> Self {
        RangeRequest {
            key: Some(key.into()),
            range_end: Some(range_end.into()),
            ..RangeRequest::default()
        }
    }

    /// At most `limit` keys per page.
    pub fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    pub fn read_options(mut self, read: ReadOptions) -> Self {
        self.read = read;
        self
    }

    pub fn keys_only(mut self) -> Self {
        self.keys_only = true;
        self
    }

    pub fn count_only(mut self) -> Self {
        self.count_only = true;
        self
    }

    fn path_and_query(&self) -> String {
        let mut pairs = Vec::new();
        let texts = [
            ("prefix", &self.prefix),
            ("key", &self.key),
            ("range_end", &self.range_end),
        ];
        for (name, value) in texts {
            if let Some(value) = value {
                pairs.push((name, value.clone()));
            }
        }
        if let Some(limit) = self.limit {
            pairs.push(("limit", limit.to_string()));
        }
        for (name, on) in [
            ("keys_only", self.keys_only),
            ("count_only", self.count_only),
        ] {
            if on {
                pairs.push((name, "true".to_string()));
            }
        }
        pairs.extend(self.read.query_pairs());
        if let Some(token) = &self.continue_token {
            pairs.push(("continue", token.clone()));
        }
        with_query("/v1/kv".to_string(), &pairs)
    }
}

/// What a conditional write requires of the key's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precondition {
    /// Write whatever the key's state (the default).
    #[default]
    None,
    /// `If-Match: "<R>"`: only if the key's mod revision is R.
    ModRevision(u64),
    /// `If-None-Match: *`: only if the key does not exist.
    Absent,
}

impl Precondition {
    pub(crate) fn add_header(self, call: Call) -> Call {
        match self {
            Precondition::None => call,
            Precondition::ModRevision(revision) => {
                call.with_header("If-Match", format!("\"{revision}\""))
            }
            Precondition::Absent => call.with_header("If-None-Match", "*".to_string()),
        }
    }
}

/// A put with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutRequest {
    pub key: String,
    pub value: String,
    pub lease: i64,
    pub prev_kv: bool,
    pub precondition: Precondition,
}

impl PutRequest {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        PutRequest {
            key: key.into(),
            value: value.into(),
            lease: 0,
            prev_kv: false,
            precondition: Precondition::None,
        }
    }

    /// Write only if the key's mod revision is still `revision` (optimistic concurrency).
    pub fn if_mod_revision(mut self, revision: u64) -> Self {
        self.precondition = Precondition::ModRevision(revision);
        self
    }

    /// Write only if the key does not exist (create).
    pub fn if_absent(mut self) -> Self {
        self.precondition = Precondition::Absent;
        self
    }

    /// Answer with the key-value before the put.
    pub fn with_prev_kv(mut self) -> Self {
        self.prev_kv = true;
        self
    }

    pub fn with_lease(mut self, lease: i64) -> Self {
        self.lease = lease;
        self
    }
}

/// A delete of one key, or of every key under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRequest {
    pub key: String,
    pub prefix: bool,
    pub prev_kv: bool,
    pub precondition: Precondition,
}

impl DeleteRequest {
    pub fn key(key: impl Into<String>) -> Self {
        DeleteRequest {
            key: key.into(),
            prefix: false,
            prev_kv: false,
            precondition: Precondition::None,
        }
    }

    /// Every key that starts with `prefix`.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        DeleteRequest {
            prefix: true,
            ..DeleteRequest::key(prefix)
        }
    }

    pub fn if_mod_revision(mut self, revision: u64) -> Self {
        self.precondition = Precondition::ModRevision(revision);
        self
    }

    pub fn with_prev_kv(mut self) -> Self {
        self.prev_kv = true;
        self
    }
}

/// `path?name=value&...` with the values percent-encoded (just `path` with no pairs).
pub fn with_query(path: String, pairs: &[(&str, String)]) -> String {
    if pairs.is_empty() {
        return path;
    }
    let query = pairs
        .iter()
        .map(|(name, value)| format!("{name}={}", query_value(value)))
        .collect::<Vec<_>>()
        .join("&");
    format!("{path}?{query}")
}

impl Client {
    /// The key now (linearizable). [`ClientError::NotFound`] when it does not exist.
    pub async fn get(&self, key: &str) -> Result<GetResponse, ClientError> {
        self.get_with(key, ReadOptions::default()).await
    }

    /// The key, read as `options` say.
    pub async fn get_with(
        &self,
        key: &str,
        options: ReadOptions,
    ) -> Result<GetResponse, ClientError> {
        let path = with_query(key_path(key), &options.query_pairs());
        self.call_json(&Call::read(path)).await
    }

    /// One page of a range read.
    pub async fn range(&self, request: &RangeRequest) -> Result<RangeResponse, ClientError> {
        self.call_json(&Call::read(request.path_and_query())).await
    }

    /// Every page of a range read, one at a time, following `continue`.
    pub fn range_pages(&self, request: RangeRequest) -> RangePages {
        RangePages {
            client: self.clone(),
            request,
            finished: false,
            pages_read: 0,
        }
    }

    /// Writes `value` at `key` unconditionally.
    pub async fn put(&self, key: &str, value: &str) -> Result<PutResponse, ClientError> {
        self.put_with(&PutRequest::new(key, value)).await
    }

    /// A put with options; a failed precondition is [`ClientError::Conflict`].
    pub async fn put_with(&self, request: &PutRequest) -> Result<PutResponse, ClientError> {
        let pairs = flag_pairs(&[("prev_kv", request.prev_kv)]);
        let mut body = json!({ "value": request.value });
        if request.lease != 0 {
            body["lease"] = json!(request.lease);
        }
        let call = Call::write(
            Method::PUT,
            with_query(key_path(&request.key), &pairs),
            Some(body),
        );
        self.call_json(&request.precondition.add_header(call)).await
    }

    /// Deletes one key or a prefix; deleting nothing is a success with `deleted == 0`.
    pub async fn delete(&self, request: &DeleteRequest) -> Result<DeleteResponse, ClientError> {
        let pairs = flag_pairs(&[("prefix", request.prefix), ("prev_kv", request.prev_kv)]);
        let call = Call::write(
            Method::DELETE,
            with_query(key_path(&request.key), &pairs),
            None,
        );
        self.call_json(&request.precondition.add_header(call)).await
    }

    /// Applies a JSON merge patch (RFC 7386) to the JSON value at `key`. Without `if_mod_revision`
    /// the member retries conflicts itself; with it, one attempt (a mismatch is a conflict).
    pub async fn patch(
        &self,
        key: &str,
        merge_patch: &serde_json::Value,
        if_mod_revision: Option<u64>,
    ) -> Result<PatchResponse, ClientError> {
        let mut call = Call::write(Method::PATCH, key_path(key), None);
        call.body = Some(CallBody {
            bytes: serde_json::to_vec(merge_patch).expect("a JSON value always serialises"),
            content_type: "application/merge-patch+json",
        });
        let precondition = if_mod_revision.map_or(Precondition::None, Precondition::ModRevision);
        self.call_json(&precondition.add_header(call)).await
    }
}

fn flag_pairs(flags: &[(&'static str, bool)]) -> Vec<(&'static str, String)> {
    flags
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| (*name, "true".to_string()))
        .collect()
}

/// The pages of one range read, each read at the first page's revision. Call
/// [`RangePages::next_page`] until it returns `None`.
pub struct RangePages {
    client: Client,
    request: RangeRequest,
    finished: bool,
    pages_read: u64,
}

impl RangePages {
    /// The next page, or None after the last one (or after an error).
    pub async fn next_page(&mut self) -> Option<Result<RangeResponse, ClientError>> {
        if self.finished {
            return None;
        }
        if self.pages_read >= MOST_PAGES_PER_RANGE {
            self.finished = true;
            return Some(Err(ClientError::Invalid {
                message: format!("the range has more than {MOST_PAGES_PER_RANGE} pages"),
            }));
        }
        let page = self.client.range(&self.request).await;
        self.pages_read += 1;
        match &page {
            Ok(answer) if answer.more && answer.continue_token.is_some() => {
                self.request.continue_token = answer.continue_token.clone();
            }
            _ => self.finished = true,
        }
        Some(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_percent_encoded_in_paths_keeping_slashes() {
        assert_eq!(key_path("app/config"), "/v1/kv/app/config");
        assert_eq!(key_path("a b?c#d%"), "/v1/kv/a%20b%3Fc%23d%25");
        assert_eq!(key_path("ключ"), "/v1/kv/%D0%BA%D0%BB%D1%8E%D1%87");
    }

    #[test]
    fn range_queries_carry_every_option() {
        let mut request = RangeRequest::prefix("app/").limit(2).keys_only();
        request.read = ReadOptions {
            consistency: Consistency::Serializable,
            revision: Some(7),
            min_revision: Some(5),
        };
        request.continue_token = Some("tok=".into());
        assert_eq!(
            request.path_and_query(),
            "/v1/kv?prefix=app%2F&limit=2&keys_only=true&consistency=serializable\
             &revision=7&min_revision=5&continue=tok%3D"
        );
        assert_eq!(
            RangeRequest::between("a", "b").path_and_query(),
            "/v1/kv?key=a&range_end=b&consistency=linearizable"
        );
    }

    #[test]
    fn preconditions_become_if_match_and_if_none_match() {
        let call = Call::read("/".into());
        let matched = Precondition::ModRevision(4).add_header(call.clone());
        assert_eq!(matched.headers, [("If-Match", "\"4\"".to_string())]);
        let absent = Precondition::Absent.add_header(call.clone());
        assert_eq!(absent.headers, [("If-None-Match", "*".to_string())]);
        assert!(Precondition::None.add_header(call).headers.is_empty());
    }
}
