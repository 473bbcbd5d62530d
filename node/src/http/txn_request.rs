//! The JSON request of `POST /v1/txn` and its translation into a storage `TxnRequest`:
//!
//! ```json
//! {"compare": [{"key": "k", "target": "mod_revision", "op": "=", "value": 5}],
//!  "success": [{"put": {"key": "k", "value": "v", "lease": 0, "prev_kv": true}}],
//!  "failure": [{"get": {"key": "k", "prefix": false, "limit": 10}}]}
//! ```
//!
//! A compare's `value` is a string for the `value` target (base64 with `encoding=base64`) and a
//! number for every other target. Unknown fields are refused. Errors name the place in the body,
//! such as `success[2].key`, so a client can find the culprit in a large txn.

use revkv_storage::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, PutRequest, RangeRequest, TxnOp,
    TxnRequest,
};
use serde::Deserialize;
use serde_json::Value;

use super::keys::{key_range, TextEncoding};
use crate::error::NodeError;

/// The whole request body.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TxnBody {
    #[serde(default)]
    compare: Vec<CompareJson>,
    #[serde(default)]
    success: Vec<OpJson>,
    #[serde(default)]
    failure: Vec<OpJson>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CompareJson {
    key: String,
    target: TargetJson,
    op: OpSymbol,
    /// A number for the revision, version and lease targets; a string for `value`.
    value: Value,
}

#[derive(Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
enum TargetJson {
    Value,
    Version,
    CreateRevision,
    ModRevision,
    Lease,
}

#[derive(Clone, Copy, Deserialize, utoipa::ToSchema)]
enum OpSymbol {
    #[serde(rename = "=")]
    Equal,
    #[serde(rename = "!=")]
    NotEqual,
    #[serde(rename = "<")]
    Less,
    #[serde(rename = ">")]
    Greater,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
enum OpJson {
    Put(PutOpJson),
    Delete(DeleteOpJson),
    Get(GetOpJson),
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct PutOpJson {
    key: String,
    value: String,
    #[serde(default)]
    lease: i64,
    #[serde(default)]
    prev_kv: bool,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct DeleteOpJson {
    key: String,
    range_end: Option<String>,
    #[serde(default)]
    prefix: bool,
    #[serde(default)]
    prev_kv: bool,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct GetOpJson {
    key: String,
    range_end: Option<String>,
    #[serde(default)]
    prefix: bool,
    limit: Option<u64>,
    #[serde(default)]
    keys_only: bool,
    #[serde(default)]
    count_only: bool,
}

impl TxnBody {
    /// The storage txn this body asks for; limits and duplicate keys are left to the store.
    pub fn into_request(self, encoding: TextEncoding) -> Result<TxnRequest, NodeError> {
        let decoder = Decoder { encoding };
        Ok(TxnRequest {
            compare: (self.compare.into_iter().enumerate())
                .map(|(index, compare)| decoder.compare(&format!("compare[{index}]"), compare))
                .collect::<Result<_, _>>()?,
            success: decoder.branch("success", self.success)?,
            failure: decoder.branch("failure", self.failure)?,
        })
    }
}

/// Turns the JSON text of keys and values into bytes, naming the place of any error.
struct Decoder {
    encoding: TextEncoding,
}

impl Decoder {
    fn bytes(&self, place: &str, field: &str, text: &str) -> Result<Vec<u8>, NodeError> {
        self.encoding
            .decode(&format!("{place}.{field}"), text.as_bytes())
    }

    fn compare(&self, place: &str, compare: CompareJson) -> Result<Compare, NodeError> {
        Ok(Compare {
            key: self.bytes(place, "key", &compare.key)?,
            range_end: revkv_storage::RangeEnd::Single,
            target: self.compare_target(place, compare.target, &compare.value)?,
            op: match compare.op {
                OpSymbol::Equal => CompareOp::Equal,
                OpSymbol::NotEqual => CompareOp::NotEqual,
                OpSymbol::Less => CompareOp::Less,
                OpSymbol::Greater => CompareOp::Greater,
            },
        })
    }

    fn compare_target(
        &self,
        place: &str,
        target: TargetJson,
        value: &Value,
    ) -> Result<CompareTarget, NodeError> {
        let whole_number = || {
            value.as_u64().ok_or_else(|| {
                NodeError::Invalid(format!(
                    "{place}.value must be a non-negative whole number for this target, not {value}"
                ))
            })
        };
        Ok(match target {
            TargetJson::Value => {
                let text = value.as_str().ok_or_else(|| {
                    NodeError::Invalid(format!(
                        "{place}.value must be a string for target value, not {value}"
                    ))
                })?;
                CompareTarget::Value(self.bytes(place, "value", text)?)
            }
            TargetJson::Version => CompareTarget::Version(whole_number()?),
            TargetJson::CreateRevision => CompareTarget::CreateRevision(whole_number()?),
            TargetJson::ModRevision => CompareTarget::ModRevision(whole_number()?),
            TargetJson::Lease => CompareTarget::Lease(value.as_i64().ok_or_else(|| {
                NodeError::Invalid(format!(
                    "{place}.value must be a whole number for target lease, not {value}"
                ))
            })?),
        })
    }

    fn branch(&self, name: &str, ops: Vec<OpJson>) -> Result<Vec<TxnOp>, NodeError> {
        (ops.into_iter().enumerate())
            .map(|(index, op)| self.op(&format!("{name}[{index}]"), op))
            .collect()
    }

    fn op(&self, place: &str, op: OpJson) -> Result<TxnOp, NodeError> {
        Ok(match op {
            OpJson::Put(put) => TxnOp::Put(PutRequest {
                key: self.bytes(place, "key", &put.key)?,
                value: self.bytes(place, "value", &put.value)?,
                lease: put.lease,
                prev_kv: put.prev_kv,
            }),
            OpJson::Delete(delete) => TxnOp::DeleteRange(DeleteRangeRequest {
                range: self.range(place, &delete.key, delete.range_end, delete.prefix)?,
                prev_kv: delete.prev_kv,
            }),
            OpJson::Get(get) => TxnOp::Get(RangeRequest {
                range: Some(self.range(place, &get.key, get.range_end, get.prefix)?),
                limit: get.limit,
                keys_only: get.keys_only,
                count_only: get.count_only,
                ..RangeRequest::default()
            }),
        })
    }

    fn range(
        &self,
        place: &str,
        key: &str,
        range_end: Option<String>,
        prefix: bool,
    ) -> Result<revkv_storage::KeyRange, NodeError> {
        let key = self.bytes(place, "key", key)?;
        let range_end = range_end
            .map(|end| self.bytes(place, "range_end", &end))
            .transpose()?;
        key_range(key, range_end, prefix)
            .map_err(|error| NodeError::Invalid(format!("{place}: {error}")))
    }
}
