//! The end-to-end tests' view of the process harness (`revkv_tools::harness`): clusters of this
//! package's `revkv` binary, which only this package's tests know the path of.
// Each test binary uses a different part of the harness.
#![allow(dead_code, unused_imports)]

mod ctl_run;

pub use ctl_run::{ctl, ctl_async, CtlRun};
pub use revkv_tools::harness::{
    wait_until, Answer, ClusterOptions, ClusterTls, MemberClient, ProcessCluster,
    CONVERGENCE_TIMEOUT, STARTUP_TIMEOUT,
};

/// The binary under test.
pub const REVKV_BINARY: &str = env!("CARGO_BIN_EXE_revkv");

/// Options for a cluster of the binary under test, with the harness's defaults.
pub fn cluster_options() -> ClusterOptions {
    ClusterOptions::for_binary(REVKV_BINARY)
}
