//! Where the auth records live: one value in the state file's meta table (absent: no users, no
//! roles, auth disabled), so a file written before auth existed needs no upgrade. The records are
//! bounded (`revkv_storage::auth::MAX_USERS` and friends), so one value stays small; a batch
//! reads and writes it only when it holds an auth change.

use std::path::Path;

use redb::ReadableTable;

use crate::auth::{AuthRequest, AuthState, MAX_AUTH_RECORD_BYTES};
use crate::codec;
use crate::error::{corrupt, db_error, Rejection, StorageFailure};
use crate::limits::Limits;
use crate::types::{ApplyEntry, EntryPayload, Request};

/// The meta table's key of the auth record.
const AUTH_KEY: &str = "auth";

pub(crate) fn load_auth(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    file: &Path,
) -> Result<AuthState, StorageFailure> {
    match meta.get(AUTH_KEY).map_err(db_error(file))? {
        Some(bytes) => codec::decode(bytes.value()).map_err(corrupt(file)),
        None => Ok(AuthState::default()),
    }
}

pub(crate) fn save_auth(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    file: &Path,
    auth: &AuthState,
) -> Result<(), StorageFailure> {
    if *auth == AuthState::default() {
        meta.remove(AUTH_KEY).map_err(db_error(file))?;
        return Ok(());
    }
    let bytes = codec::encode(auth).map_err(corrupt(file))?;
    meta.insert(AUTH_KEY, bytes.as_slice())
        .map_err(db_error(file))?;
    Ok(())
}

/// Applies an auth change to the batch's records, or refuses it and changes nothing: first the
/// records' own rules (`AuthState::apply`), then the bound on their encoded size, measured here
/// because the store is what encodes them (the auth model knows no codec).
pub(crate) fn apply_change(
    records: &mut AuthState,
    change: &AuthRequest,
    limits: &Limits,
) -> Result<(), Rejection> {
    let mut changed = records.clone();
    changed.apply(change, limits)?;
    // The records are plain data, which bincode always encodes into a vector: a failure here is
    // a bug, never a client's doing.
    let encoded_bytes = codec::encode(&changed)
        .expect("the auth records are plain data and always encode")
        .len();
    if encoded_bytes > MAX_AUTH_RECORD_BYTES {
        return Err(Rejection::TooLarge(format!(
            "the auth records would take {encoded_bytes} bytes; the limit is \
             {MAX_AUTH_RECORD_BYTES}"
        )));
    }
    *records = changed;
    Ok(())
}

/// True when `entry` changes the auth records.
pub(crate) fn is_auth_change(entry: &ApplyEntry) -> bool {
    matches!(entry.payload, EntryPayload::Request(Request::Auth(_)))
}
