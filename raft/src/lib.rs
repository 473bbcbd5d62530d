//! revkv's replication layer: the openraft (`=0.10.0-alpha.37`) glue over `revkv-storage`.
//!
//! - [`types`]: the type configuration, the replicated request and its result, log-id conversions.
//! - [`log_storage`]: `RaftLogStorage` over the raft log file (group-committed appends).
//! - [`state_machine`]: `RaftStateMachine` over the MVCC store (whole committed ranges applied in
//!   bounded chunks, one transaction each), snapshots, and the applied-position watch.
//!
//! Only this crate knows openraft. It knows the peer protocol but not the client HTTP API.

mod blocking;
pub mod log_storage;
pub mod state_machine;
pub mod types;

pub use log_storage::LogStorage;
pub use state_machine::{AppliedPosition, StateMachine};
pub use types::{ClientRequest, MemberNode, Rejection, TypeConfig, WriteResult};
