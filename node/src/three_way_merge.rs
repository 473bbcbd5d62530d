//! The three-way merge of JSON documents behind `PUT /v1/kv/{key}?merge=three-way`: given the
//! value a client read (`base`), the value now (`current`) and the value the client wants
//! (`desired`), carry the client's changes (base → desired) onto `current`, and refuse only when
//! both sides changed the same field differently.
//!
//! Pure functions on `serde_json::Value`, no HTTP and no storage, so every front-end (HTTP, gRPC)
//! and the client can share them.
//!
//! Semantics, as RFC 7386 (JSON merge patch) defines a change:
//! - Objects are compared field by field, recursively. Anything else (arrays, strings, numbers,
//!   booleans, null, and a change of type) is replaced whole: the change is at that field.
//! - A field that is absent or `null` in the newer document was deleted (if it was there before);
//!   `null` members inside a value that is set are dropped, as applying a merge patch does.
//! - A change is named by its JSON Pointer (RFC 6901); the whole document is the pointer `""`.
//! - Two changes overlap when one's field is the other's or lies inside it. Overlapping changes
//!   conflict unless they are the same change (same field, same new value, or both deletes).

use std::collections::BTreeMap;
use std::ops::Bound;

use serde_json::{Map, Value};

/// A field's path: object member names from the root.
type FieldPath = Vec<String>;

/// One field changed between two documents: its new value, or `None` when it was deleted.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldChange {
    pub path: FieldPath,
    pub new_value: Option<Value>,
}

impl FieldChange {
    /// The field as a JSON Pointer (RFC 6901): `~` and `/` in names are escaped.
    pub fn pointer(&self) -> String {
        json_pointer(&self.path)
    }
}

/// A successful merge: the value to write and the client's changes it carries.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    pub value: Value,
    /// The JSON Pointers of the client's change set, in document order.
    pub merged_fields: Vec<String>,
}

/// A merge refused: the JSON Pointers of the client's changes that overlap a different change
/// made since the base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeConflict {
    pub conflicting_fields: Vec<String>,
}

/// Merges the client's changes (`base` → `desired`) into `current`.
pub fn three_way_merge(
    base: &Value,
    current: &Value,
    desired: &Value,
) -> Result<Merged, MergeConflict> {
    let ours = changes_between(base, desired);
    let theirs = changes_between(base, current);
    let conflicting_fields = conflicting_pointers(&ours, &theirs);
    if !conflicting_fields.is_empty() {
        return Err(MergeConflict { conflicting_fields });
    }
    let mut value = current.clone();
    for change in &ours {
        if apply_change(&mut value, change).is_err() {
            // Only reachable if the change sets missed an overlap; refusing is the safe answer.
            return Err(MergeConflict {
                conflicting_fields: vec![change.pointer()],
            });
        }
    }
    Ok(Merged {
        value,
        merged_fields: ours.iter().map(FieldChange::pointer).collect(),
    })
}

/// Every field that differs from `before` to `after`, in document order.
pub fn changes_between(before: &Value, after: &Value) -> Vec<FieldChange> {
    let mut changes = Vec::new();
    collect_changes(before, after, &mut Vec::new(), &mut changes);
    changes
}

fn collect_changes(
    before: &Value,
    after: &Value,
    path: &mut FieldPath,
    changes: &mut Vec<FieldChange>,
) {
    match (before, after) {
        (Value::Object(before), Value::Object(after)) => {
            collect_member_changes(before, after, path, changes)
        }
        _ if before == after => {}
        _ => changes.push(FieldChange {
            path: path.clone(),
            new_value: Some(without_null_members(after)),
        }),
    }
}

fn collect_member_changes(
    before: &Map<String, Value>,
    after: &Map<String, Value>,
    path: &mut FieldPath,
    changes: &mut Vec<FieldChange>,
) {
    let names: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for name in names {
        path.push(name.clone());
        match (before.get(name), after.get(name)) {
            (Some(old), Some(new)) if !new.is_null() => collect_changes(old, new, path, changes),
            (Some(old), _) if !old.is_null() => changes.push(FieldChange {
                path: path.clone(),
                new_value: None,
            }),
            (_, Some(new)) if !new.is_null() => changes.push(FieldChange {
                path: path.clone(),
                new_value: Some(without_null_members(new)),
            }),
            // Absent or null on both sides: no change.
            _ => {}
        }
        path.pop();
    }
}

/// `value` with `null` object members dropped at every depth, as RFC 7386 applies a patch.
fn without_null_members(value: &Value) -> Value {
    match value {
        Value::Object(_) => {
            let mut cleaned = Value::Null;
            json_patch::merge(&mut cleaned, value);
            cleaned
        }
        other => other.clone(),
    }
}

/// The pointers of our changes that overlap one of theirs and are not the very same change.
fn conflicting_pointers(ours: &[FieldChange], theirs: &[FieldChange]) -> Vec<String> {
    let theirs_by_path: BTreeMap<&FieldPath, &Option<Value>> = theirs
        .iter()
        .map(|change| (&change.path, &change.new_value))
        .collect();
    ours.iter()
        .filter(|change| overlaps_differently(change, &theirs_by_path))
        .map(FieldChange::pointer)
        .collect()
}

fn overlaps_differently(
    ours: &FieldChange,
    theirs_by_path: &BTreeMap<&FieldPath, &Option<Value>>,
) -> bool {
    // Theirs at our field or at a field containing it (a prefix of our path).
    for length in 0..=ours.path.len() {
        let prefix = ours.path[..length].to_vec();
        if let Some(their_value) = theirs_by_path.get(&prefix) {
            let same_change = length == ours.path.len() && **their_value == ours.new_value;
            if !same_change {
                return true;
            }
        }
    }
    // Theirs inside our field: paths that start with ours sort right after it.
    theirs_by_path
        .range::<FieldPath, _>((Bound::Excluded(&ours.path), Bound::Unbounded))
        .next()
        .is_some_and(|(path, _)| path.starts_with(&ours.path))
}

/// Why a change could not be applied: a field on its path is not an object.
#[derive(Debug)]
struct NotAnObject;

/// Sets or deletes one field of `document`, creating missing parent objects.
fn apply_change(document: &mut Value, change: &FieldChange) -> Result<(), NotAnObject> {
    let Some((last, parents)) = change.path.split_last() else {
        *document = change.new_value.clone().unwrap_or(Value::Null);
        return Ok(());
    };
    let mut target = document;
    for name in parents {
        let Value::Object(members) = target else {
            return Err(NotAnObject);
        };
        target = members
            .entry(name.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    let Value::Object(members) = target else {
        return Err(NotAnObject);
    };
    match &change.new_value {
        Some(value) => {
            members.insert(last.clone(), value.clone());
        }
        None => {
            members.remove(last);
        }
    }
    Ok(())
}

/// Applies a change set (as [`changes_between`] makes them) to `document`.
pub fn apply_changes(document: &Value, changes: &[FieldChange]) -> Option<Value> {
    let mut value = document.clone();
    for change in changes {
        apply_change(&mut value, change).ok()?;
    }
    Some(value)
}

/// The JSON Pointer (RFC 6901) of a path: `""` for the root, `/a/b` otherwise, with `~` written
/// `~0` and `/` written `~1`.
pub fn json_pointer(path: &[String]) -> String {
    path.iter()
        .map(|name| format!("/{}", name.replace('~', "~0").replace('/', "~1")))
        .collect()
}

#[cfg(test)]
#[path = "three_way_merge_tests.rs"]
mod tests;
