//! etcd's `clientv3/concurrency` recipes on revkv's leases: [`Session`] (a lease kept alive),
//! [`Mutex`] (a fair lock ordered by create revision) and [`Election`] (campaign, proclaim,
//! resign, observe the leader).

mod session;

pub use session::{Session, DEFAULT_SESSION_TTL_SECONDS};
