//! Whether a failed sign-in tells that a user exists (issue 63, item 5): the time of a refused
//! `issue_token` for a stored user with a wrong password against that of an unknown name, in a
//! store of bcrypt users (imported from etcd), of argon2 users (written here), and of both. Prints
//! each set's 10th, 50th and 90th percentile and the Kolmogorov-Smirnov distance between the
//! stored and the unknown sets (0: the same distribution, 1: disjoint). A benchmark, not a test:
//! `cargo bench -p revkv-node --bench sign_in`; `REVKV_SIGN_IN_SAMPLES` sets the samples per set
//! (default 60). The numbers go in docs/BENCHMARKS.md.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use revkv_node::auth::authenticate::issue_token;
use revkv_node::auth::password::{hash_password, PasswordHashScheme};
use revkv_node::auth::AuthOptions;
use revkv_storage::auth::{AuthState, User};

fn store(schemes: &[PasswordHashScheme]) -> AuthState {
    let mut records = AuthState {
        enabled: true,
        token_key: vec![7; 32],
        ..AuthState::default()
    };
    for (number, scheme) in schemes.iter().enumerate() {
        let user = User {
            password_hash: hash_password("the right password", *scheme).expect("a hash"),
            roles: BTreeSet::new(),
        };
        records.users.insert(format!("user-{number}"), user);
    }
    records
}

/// The time of one refused sign-in as `name`.
fn refusal(records: &AuthState, name: &str) -> Duration {
    let started = Instant::now();
    let refused = issue_token(
        records,
        name,
        "a wrong password",
        &AuthOptions::default(),
        1,
    );
    let took = started.elapsed();
    assert!(refused.is_err(), "{name} signed in");
    took
}

/// `samples` refusals of stored users and of unknown names, taken in turn so that a drift of the
/// machine's speed falls on both sets alike; each set sorted.
fn refusals(records: &AuthState, samples: usize) -> (Vec<Duration>, Vec<Duration>) {
    let users = records.users.len();
    let (mut stored, mut unknown) = (Vec::new(), Vec::new());
    for sample in 0..samples {
        stored.push(refusal(records, &format!("user-{}", sample % users)));
        unknown.push(refusal(records, &format!("nobody-{sample}")));
    }
    stored.sort();
    unknown.sort();
    (stored, unknown)
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    sorted[index]
}

/// The largest gap between the two empirical distribution functions.
fn ks_distance(left: &[Duration], right: &[Duration]) -> f64 {
    let mut all: Vec<Duration> = left.iter().chain(right).copied().collect();
    all.sort();
    let below = |sorted: &[Duration], at: Duration| {
        sorted.partition_point(|time| *time <= at) as f64 / sorted.len() as f64
    };
    all.iter()
        .map(|at| (below(left, *at) - below(right, *at)).abs())
        .fold(0.0, f64::max)
}

fn show(label: &str, times: &[Duration]) {
    println!(
        "  {label:<28} p10 {:>7.2} ms  p50 {:>7.2} ms  p90 {:>7.2} ms",
        percentile(times, 0.1).as_secs_f64() * 1e3,
        percentile(times, 0.5).as_secs_f64() * 1e3,
        percentile(times, 0.9).as_secs_f64() * 1e3,
    );
}

fn main() {
    let samples: usize = std::env::var("REVKV_SIGN_IN_SAMPLES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(60);
    use PasswordHashScheme::{Argon2id, Bcrypt};
    let stores = [
        ("bcrypt users (from etcd)", vec![Bcrypt; 4]),
        ("argon2 users", vec![Argon2id; 4]),
        ("half and half", vec![Bcrypt, Argon2id, Bcrypt, Argon2id]),
    ];
    println!("sign_in: {samples} refused sign-ins per set");
    for (label, schemes) in stores {
        let records = store(&schemes);
        let (stored, unknown) = refusals(&records, samples);
        println!("{label}:");
        show("stored user, wrong password", &stored);
        show("unknown name", &unknown);
        println!(
            "  Kolmogorov-Smirnov distance {:.2}",
            ks_distance(&stored, &unknown)
        );
    }
}
