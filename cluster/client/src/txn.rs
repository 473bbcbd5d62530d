//! Transactions: a builder for `POST /v1/txn` (compares, then the `success` or the `failure` ops,
//! atomically at one revision).
//!
//! ```
//! use revkv_client::{Compare, Txn, TxnOp};
//!
//! // Create "lock" only if it does not exist yet; otherwise read who holds it.
//! let txn = Txn::new()
//!     .when(Compare::create_revision("lock").equals(0))
//!     .and_then(TxnOp::put("lock", "me"))
//!     .or_else(TxnOp::get("lock"));
//! assert_eq!(txn.to_json()["compare"][0]["target"], "create_revision");
//! ```
//!
//! A txn is a write: it is never repeated after its outcome became unknown. Failing compares are
//! not an error: the answer says `succeeded: false` and carries the `failure` ops' results.

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::ClientError;
use super::transport::Call;
use super::types::TxnResponse;
use super::Client;

/// The field of a key a compare looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareTarget {
    Value,
    Version,
    CreateRevision,
    ModRevision,
    Lease,
}

/// How a compare relates the field to its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    #[serde(rename = "=")]
    Equal,
    #[serde(rename = "!=")]
    NotEqual,
    #[serde(rename = "<")]
    Less,
    #[serde(rename = ">")]
    Greater,
}

/// One compare: `target(key) op value`. An absent key has version, revisions and lease 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compare {
    pub key: String,
    pub target: CompareTarget,
    pub op: CompareOp,
    /// A string for the `value` target, a number for the others.
    pub value: Value,
}

/// A compare waiting for its operator and value.
#[derive(Debug, Clone)]
pub struct CompareOn {
    key: String,
    target: CompareTarget,
}

impl CompareOn {
    fn with(self, op: CompareOp, value: Value) -> Compare {
        Compare {
            key: self.key,
            target: self.target,
            op,
            value,
        }
    }

    pub fn equals(self, value: impl Into<Value>) -> Compare {
        self.with(CompareOp::Equal, value.into())
    }

    pub fn not_equals(self, value: impl Into<Value>) -> Compare {
        self.with(CompareOp::NotEqual, value.into())
    }

    pub fn less_than(self, value: impl Into<Value>) -> Compare {
        self.with(CompareOp::Less, value.into())
    }

    pub fn greater_than(self, value: impl Into<Value>) -> Compare {
        self.with(CompareOp::Greater, value.into())
    }
}

impl Compare {
    fn on(key: impl Into<String>, target: CompareTarget) -> CompareOn {
        CompareOn {
            key: key.into(),
            target,
        }
    }

    pub fn value(key: impl Into<String>) -> CompareOn {
        Compare::on(key, CompareTarget::Value)
    }

    pub fn version(key: impl Into<String>) -> CompareOn {
        Compare::on(key, CompareTarget::Version)
    }

    pub fn create_revision(key: impl Into<String>) -> CompareOn {
        Compare::on(key, CompareTarget::CreateRevision)
    }

    pub fn mod_revision(key: impl Into<String>) -> CompareOn {
        Compare::on(key, CompareTarget::ModRevision)
    }

    pub fn lease(key: impl Into<String>) -> CompareOn {
        Compare::on(key, CompareTarget::Lease)
    }
}

/// One op of a branch, as the API spells it (`{"put": {...}}` and so on).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TxnOp {
    Put(Value),
    Delete(Value),
    Get(Value),
}

impl TxnOp {
    pub fn put(key: impl Into<String>, value: impl Into<String>) -> TxnOp {
        TxnOp::Put(json!({ "key": key.into(), "value": value.into() }))
    }

    /// A put that attaches the key to `lease` (deleted when the lease ends).
    pub fn put_with_lease(key: impl Into<String>, value: impl Into<String>, lease: i64) -> TxnOp {
        TxnOp::Put(json!({ "key": key.into(), "value": value.into(), "lease": lease }))
    }

    /// A put that answers with the key-value before it.
    pub fn put_with_prev_kv(key: impl Into<String>, value: impl Into<String>) -> TxnOp {
        TxnOp::Put(json!({ "key": key.into(), "value": value.into(), "prev_kv": true }))
    }

    pub fn delete(key: impl Into<String>) -> TxnOp {
        TxnOp::Delete(json!({ "key": key.into() }))
    }

    pub fn delete_prefix(prefix: impl Into<String>) -> TxnOp {
        TxnOp::Delete(json!({ "key": prefix.into(), "prefix": true }))
    }

    pub fn get(key: impl Into<String>) -> TxnOp {
        TxnOp::Get(json!({ "key": key.into() }))
    }

    pub fn get_prefix(prefix: impl Into<String>) -> TxnOp {
        TxnOp::Get(json!({ "key": prefix.into(), "prefix": true }))
    }
}

/// A whole txn: compares, and the ops for each outcome.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Txn {
    #[serde(default)]
    pub compare: Vec<Compare>,
    #[serde(default)]
    pub success: Vec<TxnOp>,
    #[serde(default)]
    pub failure: Vec<TxnOp>,
}

impl Txn {
    pub fn new() -> Txn {
        Txn::default()
    }

    /// Adds a compare; every compare must hold for `success` to run.
    pub fn when(mut self, compare: Compare) -> Txn {
        self.compare.push(compare);
        self
    }

    /// Adds an op run when every compare holds.
    pub fn and_then(mut self, op: TxnOp) -> Txn {
        self.success.push(op);
        self
    }

    /// Adds an op run when a compare fails.
    pub fn or_else(mut self, op: TxnOp) -> Txn {
        self.failure.push(op);
        self
    }

    /// The request body.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("a txn always serialises")
    }
}

impl Client {
    /// Runs `txn`.
    pub async fn txn(&self, txn: &Txn) -> Result<TxnResponse, ClientError> {
        self.txn_json(txn.to_json()).await
    }

    /// Runs a txn given as its JSON body (what `revkv ctl txn` reads from a file).
    pub async fn txn_json(&self, body: Value) -> Result<TxnResponse, ClientError> {
        let call = Call::write(Method::POST, "/v1/txn".to_string(), Some(body));
        self.call_json(&call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_writes_the_api_shape() {
        let txn = Txn::new()
            .when(Compare::mod_revision("k").equals(5))
            .when(Compare::value("k").not_equals("x"))
            .and_then(TxnOp::put_with_prev_kv("k", "v"))
            .or_else(TxnOp::get_prefix("k"))
            .or_else(TxnOp::delete("j"));
        assert_eq!(
            txn.to_json(),
            json!({
                "compare": [
                    {"key": "k", "target": "mod_revision", "op": "=", "value": 5},
                    {"key": "k", "target": "value", "op": "!=", "value": "x"}
                ],
                "success": [{"put": {"key": "k", "value": "v", "prev_kv": true}}],
                "failure": [{"get": {"key": "k", "prefix": true}}, {"delete": {"key": "j"}}]
            })
        );
    }

    #[test]
    fn a_txn_reads_back_from_its_json() {
        let txn = Txn::new()
            .when(Compare::version("a").greater_than(0))
            .and_then(TxnOp::delete_prefix("a/"));
        let parsed: Txn = serde_json::from_value(txn.to_json()).unwrap();
        assert_eq!(parsed, txn);
    }
}
