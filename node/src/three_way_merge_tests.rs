//! Tests of the three-way merge: a table of cases, then a property over random documents whose
//! two change sets touch disjoint fields.

use proptest::prelude::*;
use serde_json::json;

use super::*;

/// One row of the table: the three documents and what the merge must answer.
struct Case {
    name: &'static str,
    base: Value,
    current: Value,
    desired: Value,
    expected: Result<(Value, &'static [&'static str]), &'static [&'static str]>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "disjoint top-level fields",
            base: json!({"replicas": 1, "image": "a"}),
            current: json!({"replicas": 1, "image": "b"}),
            desired: json!({"replicas": 3, "image": "a"}),
            expected: Ok((json!({"replicas": 3, "image": "b"}), &["/replicas"])),
        },
        Case {
            name: "disjoint nested fields",
            base: json!({"spec": {"a": 1, "b": {"c": 1}}}),
            current: json!({"spec": {"a": 2, "b": {"c": 1}}}),
            desired: json!({"spec": {"a": 1, "b": {"c": 5, "d": true}}}),
            expected: Ok((
                json!({"spec": {"a": 2, "b": {"c": 5, "d": true}}}),
                &["/spec/b/c", "/spec/b/d"],
            )),
        },
        Case {
            name: "the same field changed differently",
            base: json!({"replicas": 1}),
            current: json!({"replicas": 2}),
            desired: json!({"replicas": 3}),
            expected: Err(&["/replicas"]),
        },
        Case {
            name: "the same field changed to the same value",
            base: json!({"replicas": 1, "x": 0}),
            current: json!({"replicas": 3, "x": 1}),
            desired: json!({"replicas": 3, "x": 0}),
            expected: Ok((json!({"replicas": 3, "x": 1}), &["/replicas"])),
        },
        Case {
            name: "a null deletes a field",
            base: json!({"a": 1, "b": 2}),
            current: json!({"a": 1, "b": 2, "c": 3}),
            desired: json!({"a": null, "b": 2}),
            expected: Ok((json!({"b": 2, "c": 3}), &["/a"])),
        },
        Case {
            name: "an absent field is deleted too",
            base: json!({"a": 1, "b": 2}),
            current: json!({"a": 1, "b": 9}),
            desired: json!({"b": 2}),
            expected: Ok((json!({"b": 9}), &["/a"])),
        },
        Case {
            name: "a delete against a change inside the deleted field",
            base: json!({"spec": {"a": 1}}),
            current: json!({"spec": {"a": 2}}),
            desired: json!({}),
            expected: Err(&["/spec"]),
        },
        Case {
            name: "both deleted the same field",
            base: json!({"a": 1, "b": 1}),
            current: json!({"b": 1}),
            desired: json!({"b": 2}),
            expected: Ok((json!({"b": 2}), &["/a", "/b"])),
        },
        Case {
            name: "arrays are replaced whole",
            base: json!({"list": [1, 2], "n": 0}),
            current: json!({"list": [1, 2], "n": 1}),
            desired: json!({"list": [1, 2, 3], "n": 0}),
            expected: Ok((json!({"list": [1, 2, 3], "n": 1}), &["/list"])),
        },
        Case {
            name: "two different changes to one array conflict",
            base: json!({"list": [1]}),
            current: json!({"list": [1, 2]}),
            desired: json!({"list": [0, 1]}),
            expected: Err(&["/list"]),
        },
        Case {
            name: "a type change is a change of the whole field",
            base: json!({"spec": {"a": 1}, "n": 0}),
            current: json!({"spec": {"a": 1}, "n": 1}),
            desired: json!({"spec": "disabled", "n": 0}),
            expected: Ok((json!({"spec": "disabled", "n": 1}), &["/spec"])),
        },
        Case {
            name: "a type change against a nested change conflicts",
            base: json!({"spec": {"a": 1}}),
            current: json!({"spec": {"a": 1, "b": 2}}),
            desired: json!({"spec": [1]}),
            expected: Err(&["/spec"]),
        },
        Case {
            name: "a new object loses its null members",
            base: json!({"n": 0}),
            current: json!({"n": 1}),
            desired: json!({"n": 0, "spec": {"a": 1, "b": null}}),
            expected: Ok((json!({"n": 1, "spec": {"a": 1}}), &["/spec"])),
        },
        Case {
            name: "unicode and pointer-escaped member names",
            base: json!({"ключ": 1, "a/b": 1, "m~n": 1, "名前": "x"}),
            current: json!({"ключ": 2, "a/b": 1, "m~n": 1, "名前": "x"}),
            desired: json!({"ключ": 1, "a/b": 2, "m~n": 3, "名前": "y"}),
            expected: Ok((
                json!({"ключ": 2, "a/b": 2, "m~n": 3, "名前": "y"}),
                &["/a~1b", "/m~0n", "/名前"],
            )),
        },
        Case {
            name: "whole documents that are not objects",
            base: json!([1]),
            current: json!([1]),
            desired: json!("replaced"),
            expected: Ok((json!("replaced"), &[""])),
        },
        Case {
            name: "a whole-document change against any other change conflicts",
            base: json!({"a": 1}),
            current: json!({"a": 2}),
            desired: json!(7),
            expected: Err(&[""]),
        },
        Case {
            name: "no change by the client leaves the current value",
            base: json!({"a": 1}),
            current: json!({"a": 2}),
            desired: json!({"a": 1}),
            expected: Ok((json!({"a": 2}), &[])),
        },
    ]
}

#[test]
fn the_table_of_merges() {
    for case in cases() {
        let answer = three_way_merge(&case.base, &case.current, &case.desired);
        let expected = match case.expected {
            Ok((value, fields)) => Ok(Merged {
                value,
                merged_fields: fields.iter().map(|field| field.to_string()).collect(),
            }),
            Err(fields) => Err(MergeConflict {
                conflicting_fields: fields.iter().map(|field| field.to_string()).collect(),
            }),
        };
        assert_eq!(answer, expected, "case {:?}", case.name);
    }
}

#[test]
fn pointers_escape_tilde_before_slash() {
    assert_eq!(json_pointer(&[]), "");
    assert_eq!(json_pointer(&["~1".into(), "a/b".into()]), "/~01/a~1b");
}

/// Values without null members (a null member means "deleted" in merge semantics).
fn leaf_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i32>().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        "[a-zé]{0,4}".prop_map(Value::from),
        prop::collection::vec(any::<u8>().prop_map(Value::from), 0..3).prop_map(Value::Array),
    ]
}

fn document_value() -> impl Strategy<Value = Value> {
    leaf_value().prop_recursive(2, 12, 4, |inner| {
        prop::collection::btree_map("[a-d]", inner, 0..4)
            .prop_map(|members| Value::Object(members.into_iter().collect()))
    })
}

/// Eight top-level fields `f0..f7`, each absent or holding a value.
fn document() -> impl Strategy<Value = Vec<Option<Value>>> {
    prop::collection::vec(prop::option::of(document_value()), 8)
}

fn as_object(fields: &[Option<Value>]) -> Value {
    let members = fields
        .iter()
        .enumerate()
        .filter_map(|(index, value)| Some((format!("f{index}"), value.clone()?)));
    Value::Object(members.collect())
}

proptest! {
    /// The client changes the fields in `ours`, someone else those in `theirs` (never the same
    /// top-level field), so the merge must succeed and equal both change sets applied in either
    /// order, and each field must come from the side that changed it.
    #[test]
    fn disjoint_changes_merge_like_both_applied_in_either_order(
        base in document(),
        ours in document(),
        theirs in document(),
        owner in prop::collection::vec(any::<bool>(), 8),
    ) {
        let pick = |mine: bool, changed: &[Option<Value>]| -> Vec<Option<Value>> {
            (0..8).map(|index| if owner[index] == mine { changed[index].clone() } else { base[index].clone() }).collect()
        };
        let desired = as_object(&pick(true, &ours));
        let current = as_object(&pick(false, &theirs));
        let base_value = as_object(&base);

        let merged = three_way_merge(&base_value, &current, &desired)
            .expect("disjoint changes never conflict");
        let ours_changes = changes_between(&base_value, &desired);
        let theirs_changes = changes_between(&base_value, &current);
        let ours_first = apply_changes(&apply_changes(&base_value, &ours_changes).unwrap(), &theirs_changes).unwrap();
        let theirs_first = apply_changes(&apply_changes(&base_value, &theirs_changes).unwrap(), &ours_changes).unwrap();
        prop_assert_eq!(&merged.value, &ours_first);
        prop_assert_eq!(&merged.value, &theirs_first);
        let by_owner: Vec<Option<Value>> = (0..8)
            .map(|index| if owner[index] { ours[index].clone() } else { theirs[index].clone() })
            .collect();
        prop_assert_eq!(&merged.value, &as_object(&by_owner));
    }

    /// Whatever the documents, the merge never panics, and a success always carries every change
    /// the client made: the merged value, diffed against the current one, shows nothing the
    /// client did not ask for.
    #[test]
    fn a_merge_only_adds_the_clients_changes(
        base in document_value(),
        current in document_value(),
        desired in document_value(),
    ) {
        if let Ok(merged) = three_way_merge(&base, &current, &desired) {
            let ours = changes_between(&base, &desired);
            for change in changes_between(&current, &merged.value) {
                prop_assert!(
                    ours.iter().any(|mine| change.path.starts_with(&mine.path)),
                    "{} changed without the client asking", change.pointer()
                );
            }
        }
    }
}
