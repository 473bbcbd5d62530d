//! etcd's snapshot and member db files, for moving between etcd and revkv with every revision
//! kept. etcd 3.4 and 3.5 keep their state in one bbolt file: the `key` bucket holds every
//! revision not yet compacted, keyed by (revision, sub revision), `meta` the compaction floor,
//! `lease` the leases, and the `auth*` buckets users and roles. `etcdctl snapshot save` streams
//! that file and appends its SHA-256.
//!
//! - `bolt/`: a bbolt reader and bulk writer (the file format itself).
//! - `layout.rs`: etcd's buckets and keys; `messages.rs`: the protobuf messages in them.
//! - `import.rs`: an etcd file into revkv's history frames, checked before anything is written.
//! - `export.rs`: revkv's history frames into an etcd snapshot.
//! - `auth.rs`: etcd's auth buckets and revkv's auth records, both ways.
//!
//! The crate knows etcd's formats and revkv-storage's frame types, and nothing of raft, HTTP or
//! gRPC; `revkv snapshot restore` (in revkv-raft) is its caller.

pub mod auth;
pub mod bolt;
pub mod error;
pub mod export;
pub mod import;
pub mod layout;
pub mod messages;

pub use error::{BoltError, EtcdSnapshotError, Result};
pub use export::{append_trailer, convert_revkv_backup, export_store, EtcdExport, EtcdExporter};
pub use import::{is_bolt_file, EtcdSnapshot};
