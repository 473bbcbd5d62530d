//! The desired/observed convention of Kubernetes objects, on revkv's JSON values: a value is
//! `{"metadata": {"generation": G}, "spec": ..., "status": {"observedGeneration": O, ...}}`.
//! Writers of desired state change `spec` and bump `generation`; a controller writes `status` and
//! sets `observedGeneration` to the generation it acted on, never touching `generation`. So "has
//! the controller caught up?" is `observedGeneration >= generation`, without comparing specs, and
//! the mod revision (Kubernetes' resourceVersion) stays what it is for: optimistic concurrency.
//!
//! [`update_spec`] is the desired-state writer's read-modify-write (retried on conflict);
//! [`write_status`] is the controller's status write from the value it read, which either fails
//! on a conflict (the key is requeued) or, opt-in, merges through revkv's three-way merge so that
//! a concurrent spec change does not cost a retry.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::backoff::Backoff;
use super::super::error::ClientError;
use super::super::kv::PutRequest;
use super::super::retry::retry_on_conflict;
use super::super::types::KeyValue;
use super::super::Client;

/// What an object's `metadata` carries; fields this runtime does not know are kept as they are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectMetadata {
    /// Bumped by every spec change; starts at 1.
    #[serde(default)]
    pub generation: u64,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// An object's `status`: the generation it reflects and the controller's own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectStatus<Status> {
    #[serde(rename = "observedGeneration", default)]
    pub observed_generation: u64,
    #[serde(flatten)]
    pub fields: Status,
}

/// One object: desired state in `spec`, observed state in `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Object<Spec, Status> {
    #[serde(default)]
    pub metadata: ObjectMetadata,
    pub spec: Spec,
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub status: Option<ObjectStatus<Status>>,
}

fn none<T>() -> Option<T> {
    None
}

impl<Spec, Status> Object<Spec, Status>
where
    Spec: Serialize + DeserializeOwned,
    Status: Serialize + DeserializeOwned,
{
    /// A new object at generation 1, not yet observed.
    pub fn new(spec: Spec) -> Self {
        Object {
            metadata: ObjectMetadata {
                generation: 1,
                other: Map::new(),
            },
            spec,
            status: None,
        }
    }

    /// Reads an object from a stored value; a value of another shape is [`ClientError::Invalid`].
    pub fn parse(kv: &KeyValue) -> Result<Self, ClientError> {
        serde_json::from_str(&kv.value).map_err(|error| ClientError::Invalid {
            message: format!("{} is not an object of this type: {error}", kv.key),
        })
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("an object of JSON types encodes")
    }

    /// The generation the status reflects (0: never observed).
    pub fn observed_generation(&self) -> u64 {
        self.status.as_ref().map_or(0, |s| s.observed_generation)
    }

    /// Whether the status reflects the current spec.
    pub fn is_converged(&self) -> bool {
        self.observed_generation() >= self.metadata.generation
    }
}

/// The generation and observed generation of any value in this convention; None for a value
/// that does not follow it (the convergence metric ignores those).
pub fn generations_of(value: &str) -> Option<(u64, u64)> {
    let value: Value = serde_json::from_str(value).ok()?;
    let generation = value.pointer("/metadata/generation")?.as_u64()?;
    let observed = (value.pointer("/status/observedGeneration"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some((generation, observed))
}

/// Creates `key` holding a new object with `spec`; a key that exists is a conflict.
pub async fn create_object<Spec: Serialize + DeserializeOwned>(
    client: &Client,
    key: &str,
    spec: Spec,
) -> Result<u64, ClientError> {
    let object: Object<Spec, Value> = Object::new(spec);
    let request = PutRequest::new(key, object.encode()).if_absent();
    Ok(client.put_with(&request).await?.header.revision)
}

/// Reads `key`, lets `change` edit the spec, and writes it back with the generation bumped (only
/// if the spec changed), retrying on conflict as `backoff` allows. Status and unknown metadata are
/// kept. Answers the object as written and the write's revision.
pub async fn update_spec<Spec, Status>(
    client: &Client,
    key: &str,
    backoff: Backoff,
    change: impl Fn(&mut Spec) + Sync,
) -> Result<(Object<Spec, Status>, u64), ClientError>
where
    Spec: Serialize + DeserializeOwned + PartialEq + Clone,
    Status: Serialize + DeserializeOwned,
{
    retry_on_conflict(backoff, || {
        let read = client.get(key);
        let change = &change;
        async move {
            let read = read.await?.kv;
            let mut object: Object<Spec, Status> = Object::parse(&read)?;
            let before = object.spec.clone();
            change(&mut object.spec);
            if object.spec == before {
                return Ok((object, read.mod_revision));
            }
            object.metadata.generation += 1;
            let request = PutRequest::new(key, object.encode()).if_mod_revision(read.mod_revision);
            let revision = client.put_with(&request).await?.header.revision;
            Ok((object, revision))
        }
    })
    .await
}

/// What a status write does when the key changed since it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatusConflict {
    /// Fail with [`ClientError::Conflict`]: the controller requeues the key and reconciles the
    /// newer value (client-go's behaviour).
    #[default]
    Fail,
    /// Merge the status change onto the current value through revkv's three-way merge; only
    /// overlapping changes to the same status fields still conflict.
    Merge,
}

/// Writes `status` as the observed state of the object in `read` (as the controller read it):
/// `observedGeneration` becomes that object's generation, and nothing else changes. Answers the
/// write's revision.
pub async fn write_status<Spec, Status>(
    client: &Client,
    read: &KeyValue,
    status: Status,
    on_conflict: StatusConflict,
) -> Result<u64, ClientError>
where
    Spec: Serialize + DeserializeOwned,
    Status: Serialize + DeserializeOwned,
{
    let mut object: Object<Spec, Status> = Object::parse(read)?;
    object.status = Some(ObjectStatus {
        observed_generation: object.metadata.generation,
        fields: status,
    });
    match on_conflict {
        StatusConflict::Fail => {
            let request =
                PutRequest::new(&read.key, object.encode()).if_mod_revision(read.mod_revision);
            Ok(client.put_with(&request).await?.header.revision)
        }
        StatusConflict::Merge => {
            let value = serde_json::to_value(&object).expect("an object of JSON types encodes");
            let written = client.merge_put(&read.key, &value, read.mod_revision);
            Ok(written.await?.header.revision)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Replicas {
        count: u32,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Ready {
        ready: u32,
    }

    fn stored(value: &str) -> KeyValue {
        KeyValue {
            key: "k".into(),
            value: value.into(),
            create_revision: 2,
            mod_revision: 5,
            version: 3,
            lease: 0,
        }
    }

    #[test]
    fn an_object_round_trips_in_kubernetes_shape_and_keeps_unknown_metadata() {
        let text = r#"{"metadata":{"generation":3,"labels":{"a":"b"}},"spec":{"count":2},
                       "status":{"observedGeneration":2,"ready":1}}"#;
        let object: Object<Replicas, Ready> = Object::parse(&stored(text)).unwrap();
        assert_eq!(object.metadata.generation, 3);
        assert_eq!(object.observed_generation(), 2);
        assert!(!object.is_converged());
        assert_eq!(object.status.as_ref().unwrap().fields, Ready { ready: 1 });
        let again: Value = serde_json::from_str(&object.encode()).unwrap();
        assert_eq!(again, serde_json::from_str::<Value>(text).unwrap());
        assert_eq!(generations_of(text), Some((3, 2)));
    }

    #[test]
    fn a_new_object_is_generation_one_and_unobserved() {
        let object: Object<Replicas, Ready> = Object::new(Replicas { count: 1 });
        assert_eq!(
            object.encode(),
            r#"{"metadata":{"generation":1},"spec":{"count":1}}"#
        );
        assert_eq!(generations_of(&object.encode()), Some((1, 0)));
        assert!(!object.is_converged());
    }

    #[test]
    fn values_outside_the_convention_are_told_apart() {
        assert_eq!(generations_of("plain text"), None);
        assert_eq!(generations_of(r#"{"spec":{}}"#), None);
        let refused = Object::<Replicas, Ready>::parse(&stored(r#"{"spec":{"count":"x"}}"#));
        assert!(matches!(refused, Err(ClientError::Invalid { .. })));
    }
}
