//! Authentication and authorization for the front-ends (issue 15): password hashes (`password`),
//! the signed tokens `POST /v1/auth/authenticate` hands out (`token`), proving who is asking from
//! a bearer token and the replicated records (`authenticate`), who that is (`caller`), and a
//! backend wrapper that checks every request a handler makes on the caller's behalf
//! (`checked_backend`). What each request needs is decided by the store's access model
//! (`revkv_storage::auth`); this module proves who is asking and enforces it.

pub mod authenticate;
pub mod caller;
pub mod checked_backend;
mod error;
pub mod password;
pub mod token;

pub use authenticate::{authenticate_bearer, AuthOptions};
pub use caller::{AuthenticatedUser, Caller};
pub use checked_backend::CheckedBackend;
pub use error::AuthError;
