//! `revkv ctl` runs for the end-to-end tests: the binary under test with `REVKV_ENDPOINTS`, its
//! exit code and output.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::REVKV_BINARY;

/// What one `revkv ctl` run printed and how it exited.
#[derive(Debug)]
pub struct CtlRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CtlRun {
    pub fn expect_success(self) -> CtlRun {
        assert_eq!(
            self.code, 0,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.stdout))
    }
}

/// Runs `revkv ctl ARGS` with `REVKV_ENDPOINTS=endpoints` and optional standard input.
pub fn ctl(endpoints: &str, args: &[&str], stdin: Option<&str>) -> CtlRun {
    let mut child = Command::new(REVKV_BINARY)
        .arg("ctl")
        .args(args)
        .env("REVKV_ENDPOINTS", endpoints)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start revkv ctl");
    let mut input = child.stdin.take().expect("piped stdin");
    input
        .write_all(stdin.unwrap_or("").as_bytes())
        .expect("write stdin");
    drop(input);
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("revkv ctl ends");
    CtlRun {
        code: status.code().expect("an exit code, not a signal"),
        stdout: String::from_utf8(stdout).expect("UTF-8 output"),
        stderr: String::from_utf8(stderr).expect("UTF-8 errors"),
    }
}

/// Runs `ctl` off the async runtime's threads.
pub async fn ctl_async(endpoints: &str, args: &[&str], stdin: Option<&str>) -> CtlRun {
    let endpoints = endpoints.to_string();
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    let stdin = stdin.map(str::to_string);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ctl(&endpoints, &args, stdin.as_deref())
    })
    .await
    .expect("the ctl run did not panic")
}
