//! The checker passes a correct history and catches each kind of planted fault.

use std::time::Duration;

use super::*;
use crate::history::{Observed, Operation, Outcome, Record, Version};

fn at(milliseconds: u64) -> Duration {
    Duration::from_millis(milliseconds)
}

fn put(client: u64, key: &str, value: &str, span: (u64, u64), outcome: Outcome) -> Record {
    Record {
        client,
        member: 1,
        operation: Operation::Put {
            key: key.into(),
            value: value.into(),
        },
        invoked_at: at(span.0),
        answered_at: Some(at(span.1)),
        outcome,
    }
}

fn get(
    client: u64,
    key: &str,
    span: (u64, u64),
    revision: u64,
    value: Option<(&str, u64)>,
) -> Record {
    Record {
        client,
        member: 1,
        operation: Operation::Get { key: key.into() },
        invoked_at: at(span.0),
        answered_at: Some(at(span.1)),
        outcome: Outcome::Observed {
            revision,
            value: value.map(|(value, mod_revision)| Observed {
                value: value.into(),
                mod_revision,
            }),
        },
    }
}

fn cas(client: u64, expected: u64, value: &str, span: (u64, u64), outcome: Outcome) -> Record {
    Record {
        client,
        member: 1,
        operation: Operation::CompareAndSwap {
            key: "k".into(),
            expected_mod_revision: expected,
            value: value.into(),
        },
        invoked_at: at(span.0),
        answered_at: Some(at(span.1)),
        outcome,
    }
}

fn changed(revision: u64) -> Outcome {
    Outcome::Changed { revision }
}

fn history(versions: &[(u64, Option<&str>)]) -> Histories {
    let versions = versions
        .iter()
        .map(|(revision, value)| Version {
            revision: *revision,
            value: value.map(str::to_owned),
        })
        .collect();
    Histories::from([("k".to_owned(), versions)])
}

/// Two writers, a reader, a compare-and-swap that wins and one that loses, and a put whose
/// outcome the client never learned but which took effect: all consistent.
fn correct_records() -> Vec<Record> {
    vec![
        put(1, "k", "a", (0, 10), changed(2)),
        put(2, "k", "b", (5, 20), changed(3)),
        get(3, "k", (21, 30), 3, Some(("b", 3))),
        cas(1, 3, "c", (31, 40), changed(4)),
        cas(
            2,
            3,
            "d",
            (35, 45),
            Outcome::Observed {
                revision: 4,
                value: Some(Observed {
                    value: "c".into(),
                    mod_revision: 4,
                }),
            },
        ),
        Record {
            answered_at: Some(at(60)),
            ..put(3, "k", "e", (50, 60), Outcome::Unknown)
        },
        get(1, "k", (100, 110), 5, Some(("e", 5))),
    ]
}

fn correct_history() -> Histories {
    history(&[
        (2, Some("a")),
        (3, Some("b")),
        (4, Some("c")),
        (5, Some("e")),
    ])
}

fn kinds(violations: &[Violation]) -> Vec<&'static str> {
    violations.iter().map(|violation| violation.kind).collect()
}

#[test]
fn a_correct_history_passes() {
    assert_eq!(check(&correct_records(), &correct_history(), 5), vec![]);
}

#[test]
fn a_read_older_than_a_write_answered_before_it_began_is_caught() {
    let mut records = correct_records();
    // Invoked after "b" (revision 3) was acknowledged, but reads revision 2.
    records[2] = get(3, "k", (21, 30), 2, Some(("a", 2)));
    assert_eq!(
        kinds(&check(&records, &correct_history(), 5)),
        vec!["real-time order"]
    );
}

#[test]
fn a_read_that_does_not_match_the_history_at_its_revision_is_caught() {
    let mut records = correct_records();
    records[2] = get(3, "k", (21, 30), 3, Some(("a", 2)));
    assert_eq!(
        kinds(&check(&records, &correct_history(), 5)),
        vec!["stale or wrong read"]
    );
}

#[test]
fn an_acknowledged_write_missing_from_the_history_is_caught() {
    let history = history(&[(2, Some("a")), (4, Some("c")), (5, Some("e"))]);
    let violations = check(&correct_records(), &history, 5);
    assert!(kinds(&violations).contains(&"lost write"), "{violations:?}");
}

#[test]
fn writes_ordered_against_real_time_are_caught() {
    let records = vec![
        put(1, "k", "a", (0, 10), changed(3)),
        put(2, "k", "b", (11, 20), changed(2)),
    ];
    let history = history(&[(2, Some("b")), (3, Some("a"))]);
    assert_eq!(
        kinds(&check(&records, &history, 3)),
        vec!["real-time order"]
    );
}

#[test]
fn a_compare_and_swap_that_won_against_a_newer_revision_is_caught() {
    let records = vec![
        put(1, "k", "a", (0, 10), changed(2)),
        put(1, "k", "b", (11, 20), changed(3)),
        cas(2, 2, "c", (21, 30), changed(4)),
    ];
    let history = history(&[(2, Some("a")), (3, Some("b")), (4, Some("c"))]);
    assert_eq!(
        kinds(&check(&records, &history, 4)),
        vec!["compare-and-swap succeeded though it did not hold"]
    );
}

#[test]
fn a_compare_and_swap_that_failed_though_it_held_is_caught() {
    let records = vec![
        put(1, "k", "a", (0, 10), changed(2)),
        cas(
            2,
            2,
            "c",
            (21, 30),
            Outcome::Observed {
                revision: 2,
                value: Some(Observed {
                    value: "a".into(),
                    mod_revision: 2,
                }),
            },
        ),
    ];
    let history = history(&[(2, Some("a"))]);
    assert_eq!(
        kinds(&check(&records, &history, 2)),
        vec!["compare-and-swap failed though it held"]
    );
}

#[test]
fn a_value_nobody_wrote_and_a_value_written_twice_are_caught() {
    let records = vec![put(1, "k", "a", (0, 10), changed(2))];
    let history = history(&[(2, Some("a")), (3, Some("z")), (4, Some("a"))]);
    let violations = kinds(&check(&records, &history, 4));
    assert!(violations.contains(&"phantom change"), "{violations:?}");
    assert!(violations.contains(&"duplicated write"), "{violations:?}");
}

#[test]
fn a_read_at_a_revision_the_store_never_reached_is_caught() {
    let records = vec![
        put(1, "k", "a", (0, 10), changed(2)),
        get(2, "k", (11, 20), 9, Some(("a", 2))),
    ];
    let history = history(&[(2, Some("a"))]);
    assert_eq!(
        kinds(&check(&records, &history, 2)),
        vec!["answer from the future"]
    );
}

#[test]
fn a_change_with_unknown_outcome_may_land_after_its_error() {
    // The put timed out at 10 ms and took effect later; a read at 15 ms that missed it is fine.
    let records = vec![
        Record {
            answered_at: Some(at(10)),
            ..put(1, "k", "a", (0, 10), Outcome::Unknown)
        },
        get(2, "k", (15, 20), 1, None),
        get(2, "k", (25, 30), 2, Some(("a", 2))),
    ];
    let history = history(&[(2, Some("a"))]);
    assert_eq!(check(&records, &history, 2), vec![]);
}

fn serializable_get(
    member: u64,
    span: (u64, u64),
    revision: u64,
    value: Option<(&str, u64)>,
) -> Record {
    Record {
        member,
        operation: Operation::SerializableGet { key: "k".into() },
        ..get(9, "k", span, revision, value)
    }
}

#[test]
fn a_stale_serializable_read_passes_but_one_that_goes_back_on_its_member_is_caught() {
    // Revision 2 read after "b" (revision 3) was acknowledged: stale, which serializable allows.
    let mut records = correct_records();
    records.push(serializable_get(2, (21, 22), 2, Some(("a", 2))));
    records.push(serializable_get(2, (23, 24), 3, Some(("b", 3))));
    assert_eq!(check(&records, &correct_history(), 5), vec![]);
    // The same member then answering revision 2 again goes back.
    records.push(serializable_get(2, (25, 26), 2, Some(("a", 2))));
    assert_eq!(
        kinds(&check(&records, &correct_history(), 5)),
        vec!["serializable read went back"]
    );
    // A serializable read must still match the history at its revision.
    let mut records = correct_records();
    records.push(serializable_get(3, (21, 22), 3, Some(("a", 2))));
    assert_eq!(
        kinds(&check(&records, &correct_history(), 5)),
        vec!["stale or wrong read"]
    );
}
