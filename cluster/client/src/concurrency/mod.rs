//! etcd's `clientv3/concurrency` recipes on revkv's leases: [`Session`] (a lease kept alive),
//! [`Mutex`] (a fair lock ordered by create revision) and [`Election`] (campaign, proclaim,
//! resign, observe the leader). Both recipes queue contenders by the create revision of their
//! keys and wait on the key just before their own (`waiting`).

mod election;
mod mutex;
mod session;
mod waiting;

pub use election::{Election, LeaderObserver};
pub use mutex::Mutex;
pub use session::{Session, DEFAULT_SESSION_TTL_SECONDS};
