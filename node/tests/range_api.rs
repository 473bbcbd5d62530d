//! Range reads through `GET /v1/kv`: prefixes, explicit ranges, paging with continue tokens,
//! keys_only and count_only, historical revisions, compaction and serializable reads.

use crate::support;

use axum::http::StatusCode;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use support::{assert_error, Api};

fn keys_of(answer: &Value) -> Vec<String> {
    answer["kvs"]
        .as_array()
        .expect("kvs")
        .iter()
        .map(|kv| kv["key"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn prefix_pages_follow_continue_tokens_at_the_first_page_revision() {
    let api = Api::new();
    for key in ["p/1", "p/2", "p/3", "p/4", "p/5", "q"] {
        api.put_value(key, "v").await;
    }
    let first = api.get("/v1/kv?prefix=p/&limit=2").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(keys_of(&first.json), ["p/1", "p/2"]);
    assert_eq!(first.json["count"], 5);
    assert_eq!(first.json["more"], true);
    let first_revision = first.revision();

    // A key written between pages is not seen: every page reads at the first page's revision.
    api.put_value("p/6", "late").await;
    let mut seen = keys_of(&first.json);
    let mut token = first.json["continue"].as_str().unwrap().to_owned();
    loop {
        let token_param = utf8_percent_encode(&token, NON_ALPHANUMERIC);
        let page = api
            .get(&format!("/v1/kv?prefix=p/&limit=2&continue={token_param}"))
            .await;
        assert_eq!(page.status, StatusCode::OK, "{:?}", page.json);
        assert_eq!(page.revision(), first_revision);
        seen.extend(keys_of(&page.json));
        match page.json["continue"].as_str() {
            Some(next) => {
                assert_eq!(page.json["more"], true);
                token = next.to_owned();
            }
            None => {
                assert_eq!(page.json["more"], false);
                break;
            }
        }
    }
    assert_eq!(seen, ["p/1", "p/2", "p/3", "p/4", "p/5"]);
}

#[tokio::test]
async fn key_and_range_end_name_half_open_ranges() {
    let api = Api::new();
    for key in ["a", "b", "c", "d"] {
        api.put_value(key, "v").await;
    }
    let between = api.get("/v1/kv?key=b&range_end=d").await;
    assert_eq!(keys_of(&between.json), ["b", "c"]);
    let single = api.get("/v1/kv?key=c").await;
    assert_eq!(keys_of(&single.json), ["c"]);
    assert_eq!(single.json["count"], 1);
    assert!(single.json.get("continue").is_none());
    // etcd's spelling of "every key from here on" is range_end = the zero byte.
    let open = api.get("/v1/kv?key=b&range_end=%00").await;
    assert_eq!(keys_of(&open.json), ["b", "c", "d"]);
    let everything = api.get("/v1/kv?prefix=").await;
    assert_eq!(keys_of(&everything.json), ["a", "b", "c", "d"]);
    let absent = api.get("/v1/kv?key=zz").await;
    assert_eq!(absent.status, StatusCode::OK);
    assert_eq!(absent.json["kvs"], json!([]));
    assert_eq!(absent.json["count"], 0);
}

#[tokio::test]
async fn keys_only_drops_values_and_count_only_drops_key_values() {
    let api = Api::new();
    for key in ["k/1", "k/2", "k/3"] {
        api.put_value(key, "value").await;
    }
    let keys_only = api.get("/v1/kv?prefix=k/&keys_only=true").await;
    assert_eq!(keys_of(&keys_only.json), ["k/1", "k/2", "k/3"]);
    assert!(keys_only.json["kvs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|kv| kv["value"] == ""));
    let count_only = api.get("/v1/kv?prefix=k/&count_only=true").await;
    assert_eq!(count_only.json["kvs"], json!([]));
    assert_eq!(count_only.json["count"], 3);
}

#[tokio::test]
async fn historical_reads_see_past_states_until_compacted() {
    let api = Api::new();
    let first = api.put_value("h", "v1").await;
    let second = api.put_value("h", "v2").await;
    let past = api.get(&format!("/v1/kv/h?revision={first}")).await;
    assert_eq!(past.json["kv"]["value"], "v1");
    assert_eq!(past.header("etag"), Some(format!("\"{first}\"").as_str()));
    let past_range = api.get(&format!("/v1/kv?prefix=h&revision={first}")).await;
    assert_eq!(past_range.json["kvs"][0]["value"], "v1");
    let before_creation = api.get("/v1/kv/h?revision=1").await;
    assert_error(&before_creation, StatusCode::NOT_FOUND, "not_found", &[]);

    let future = api.get("/v1/kv/h?revision=99").await;
    assert_error(&future, StatusCode::BAD_REQUEST, "future_revision", &[]);

    let compacted = api.post("/v1/compact", json!({ "revision": second })).await;
    assert_eq!(compacted.status, StatusCode::OK);
    for uri in [
        format!("/v1/kv/h?revision={first}"),
        format!("/v1/kv?prefix=h&revision={first}"),
    ] {
        let gone = api.get(&uri).await;
        assert_error(&gone, StatusCode::GONE, "compacted", &["compact_revision"]);
        assert_eq!(gone.json["compact_revision"], second);
    }
    let at_compaction = api.get(&format!("/v1/kv/h?revision={second}")).await;
    assert_eq!(at_compaction.json["kv"]["value"], "v2");
}

#[tokio::test]
async fn serializable_reads_with_a_reached_min_revision_answer_at_once() {
    let api = Api::new();
    let revision = api.put_value("s", "v").await;
    let uri = format!("/v1/kv/s?consistency=serializable&min_revision={revision}");
    let read = api.get(&uri).await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.json["kv"]["value"], "v");
    // With linearizable reads min_revision is accepted; there is nothing left to wait for.
    let linearizable = api
        .get("/v1/kv/s?consistency=linearizable&min_revision=999")
        .await;
    assert_eq!(linearizable.status, StatusCode::OK);
}
