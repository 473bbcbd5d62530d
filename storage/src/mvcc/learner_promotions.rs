//! The learners waiting to be promoted once they catch up (`member add --auto-promote`, issue 65,
//! item 4; `docs/design/auto-promote-learners.md`): recorded and forgotten through raft, kept as
//! one record in the state file's meta table (absent: none), like the alarms, so every member
//! holds the same intents and a new leader goes on where the old one stopped.
//!
//! The store only keeps the intents; the leader decides when a learner has caught up and promotes
//! it through a membership change (`raft/src/learner_promotion.rs`).

use std::path::Path;

use redb::ReadableTable;

use crate::codec;
use crate::error::{corrupt, db_error, Rejection, StorageFailure};
use crate::types::{LearnerPromotion, LearnerPromotionChange};

/// The meta table's key of the record.
const PROMOTIONS_KEY: &str = "learner_promotions";

/// Most intents held at once: learners are few, and a cluster adds them one at a time.
pub const MAX_PENDING_PROMOTIONS: usize = 64;

/// The longest peer URL an intent holds (a URL, not a document).
const MAX_PEER_URL_BYTES: usize = 1024;

/// The intents, in member id order; at most one per member.
pub(crate) fn load_promotions(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    file: &Path,
) -> Result<Vec<LearnerPromotion>, StorageFailure> {
    match meta.get(PROMOTIONS_KEY).map_err(db_error(file))? {
        Some(bytes) => codec::decode(bytes.value()).map_err(corrupt(file)),
        None => Ok(Vec::new()),
    }
}

pub(crate) fn save_promotions(
    meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
    file: &Path,
    promotions: &[LearnerPromotion],
) -> Result<(), StorageFailure> {
    if promotions.is_empty() {
        meta.remove(PROMOTIONS_KEY).map_err(db_error(file))?;
        return Ok(());
    }
    let bytes = codec::encode(&promotions.to_vec()).map_err(corrupt(file))?;
    meta.insert(PROMOTIONS_KEY, bytes.as_slice())
        .map_err(db_error(file))?;
    Ok(())
}

/// Checks an intent before it is recorded: a member id, a peer URL and a bound that mean
/// something. The same on every member, so every member refuses the same entries.
pub(crate) fn validate_change(change: &LearnerPromotionChange) -> Result<(), Rejection> {
    let LearnerPromotionChange::Intend(promotion) = change else {
        return Ok(());
    };
    if promotion.member_id == 0 {
        return Err(Rejection::Invalid("a member id must be positive".into()));
    }
    if promotion.peer_url.is_empty() || promotion.peer_url.len() > MAX_PEER_URL_BYTES {
        return Err(Rejection::Invalid(format!(
            "a learner's peer URL must be 1 to {MAX_PEER_URL_BYTES} bytes"
        )));
    }
    if promotion.max_lag_entries == 0 {
        return Err(Rejection::Invalid(
            "the lag a learner is promoted within must be at least one entry".into(),
        ));
    }
    Ok(())
}

/// Records or forgets one intent. Recording one for a member that has one replaces it; forgetting
/// one that does not exist changes nothing. A new one past `MAX_PENDING_PROMOTIONS` is refused and
/// changes nothing.
pub(crate) fn change_promotions(
    promotions: &mut Vec<LearnerPromotion>,
    change: &LearnerPromotionChange,
) -> Result<(), Rejection> {
    validate_change(change)?;
    match change {
        LearnerPromotionChange::Intend(promotion) => {
            match promotions.binary_search_by_key(&promotion.member_id, |held| held.member_id) {
                Ok(position) => promotions[position] = promotion.clone(),
                Err(position) => {
                    if promotions.len() >= MAX_PENDING_PROMOTIONS {
                        return Err(Rejection::Invalid(format!(
                            "{MAX_PENDING_PROMOTIONS} learners wait to be promoted, the limit; \
                             promote or remove some first"
                        )));
                    }
                    promotions.insert(position, promotion.clone());
                }
            }
        }
        LearnerPromotionChange::Forget { member_id } => {
            promotions.retain(|held| held.member_id != *member_id)
        }
    }
    debug_assert!(promotions
        .windows(2)
        .all(|pair| pair[0].member_id < pair[1].member_id));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(member_id: u64, peer_url: &str) -> LearnerPromotionChange {
        LearnerPromotionChange::Intend(LearnerPromotion {
            member_id,
            peer_url: peer_url.into(),
            max_lag_entries: 100,
        })
    }

    #[test]
    fn intents_are_kept_by_member_replaced_and_forgotten() {
        let mut held = Vec::new();
        change_promotions(&mut held, &intent(7, "http://b")).unwrap();
        change_promotions(&mut held, &intent(4, "http://a")).unwrap();
        change_promotions(&mut held, &intent(7, "http://c")).unwrap();
        let ids_and_urls: Vec<_> = held
            .iter()
            .map(|held| (held.member_id, held.peer_url.as_str()))
            .collect();
        assert_eq!(ids_and_urls, [(4, "http://a"), (7, "http://c")]);
        change_promotions(&mut held, &LearnerPromotionChange::Forget { member_id: 4 }).unwrap();
        change_promotions(&mut held, &LearnerPromotionChange::Forget { member_id: 9 }).unwrap();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].member_id, 7);
    }

    #[test]
    fn the_limit_and_bad_intents_are_refused_and_change_nothing() {
        let mut held = Vec::new();
        for id in 1..=MAX_PENDING_PROMOTIONS as u64 {
            change_promotions(&mut held, &intent(id, "http://x")).unwrap();
        }
        let before = held.clone();
        let over = intent(MAX_PENDING_PROMOTIONS as u64 + 1, "http://x");
        assert!(matches!(
            change_promotions(&mut held, &over),
            Err(Rejection::Invalid(_))
        ));
        // Replacing one already held is not a new one.
        change_promotions(&mut held, &intent(1, "http://y")).unwrap();
        assert_eq!(held.len(), before.len());
        for bad in [
            intent(0, "http://x"),
            intent(1, ""),
            LearnerPromotionChange::Intend(LearnerPromotion {
                member_id: 1,
                peer_url: "http://x".into(),
                max_lag_entries: 0,
            }),
        ] {
            let before = held.clone();
            assert!(change_promotions(&mut held, &bad).is_err());
            assert_eq!(held, before);
        }
    }
}
