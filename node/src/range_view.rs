//! How a range answer is shown: etcd's sort order and target and its min/max mod and create
//! revision filters, applied to what the store read. The store reads ranges in key order with a
//! limit; these options are a view over that answer, so they live here, below every front-end,
//! and the gRPC front-end (and any other) only parses them.
//!
//! The rules follow etcd 3.4's `applierV3backend.Range`: with any sort or filter the store is read
//! without the client's limit (up to the store's own `max_range_keys`), the filters drop key-values,
//! the sort orders the rest, and only then is the client's limit applied, setting `more` when it
//! cut something off. `count` stays the store's count of the whole range, filters or not.

use revkv_storage::{KeyValue, RangeResponse};

/// The order of a range answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortOrder {
    /// Key order (the store's own), unless a target other than the key is given.
    #[default]
    None,
    Ascend,
    Descend,
}

/// The field a range answer is sorted by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortTarget {
    #[default]
    Key,
    Version,
    CreateRevision,
    ModRevision,
    Value,
}

/// The view options of one range read. Zero means "no bound" for the four revision filters, as in
/// etcd.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangeView {
    pub sort_order: SortOrder,
    pub sort_target: SortTarget,
    pub min_mod_revision: u64,
    pub max_mod_revision: u64,
    pub min_create_revision: u64,
    pub max_create_revision: u64,
    /// The client's limit; `None` returns everything the store read.
    pub limit: Option<u64>,
}

impl RangeView {
    /// True when the store's own key-ordered, limited read is already the answer.
    pub fn is_plain(&self) -> bool {
        let key_order = match self.effective_order() {
            SortOrder::None => true,
            SortOrder::Ascend => self.sort_target == SortTarget::Key,
            SortOrder::Descend => false,
        };
        key_order && !self.filters()
    }

    /// The limit to read the store with: the client's when the store's answer is final, none
    /// (the store's maximum) when the view must filter or sort before limiting.
    pub fn store_limit(&self) -> Option<u64> {
        if self.is_plain() {
            self.limit
        } else {
            None
        }
    }

    /// Applies the filters, the sort and the limit to the store's answer (read with
    /// `store_limit`).
    pub fn finish(&self, mut response: RangeResponse) -> RangeResponse {
        if self.is_plain() {
            return response;
        }
        response.kvs.retain(|kv| self.keeps(kv));
        self.sort(&mut response.kvs);
        if let Some(limit) = self.limit {
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            if response.kvs.len() > limit {
                response.kvs.truncate(limit);
                response.more = true;
            }
        }
        response
    }

    fn filters(&self) -> bool {
        self.min_mod_revision != 0
            || self.max_mod_revision != 0
            || self.min_create_revision != 0
            || self.max_create_revision != 0
    }

    /// etcd sorts ascending when a target other than the key is named without an order.
    fn effective_order(&self) -> SortOrder {
        match (self.sort_order, self.sort_target) {
            (SortOrder::None, SortTarget::Key) => SortOrder::None,
            (SortOrder::None, _) => SortOrder::Ascend,
            (order, _) => order,
        }
    }

    fn keeps(&self, kv: &KeyValue) -> bool {
        let within = |value: u64, min: u64, max: u64| {
            (min == 0 || value >= min) && (max == 0 || value <= max)
        };
        within(
            kv.mod_revision,
            self.min_mod_revision,
            self.max_mod_revision,
        ) && within(
            kv.create_revision,
            self.min_create_revision,
            self.max_create_revision,
        )
    }

    /// A stable sort, so key-values with equal targets stay in key order.
    fn sort(&self, kvs: &mut [KeyValue]) {
        let descending = match self.effective_order() {
            SortOrder::None => return,
            SortOrder::Ascend => false,
            SortOrder::Descend => true,
        };
        match self.sort_target {
            SortTarget::Key => kvs.sort_by(|a, b| a.key.cmp(&b.key)),
            SortTarget::Version => kvs.sort_by_key(|kv| kv.version),
            SortTarget::CreateRevision => kvs.sort_by_key(|kv| kv.create_revision),
            SortTarget::ModRevision => kvs.sort_by_key(|kv| kv.mod_revision),
            SortTarget::Value => kvs.sort_by(|a, b| a.value.cmp(&b.value)),
        }
        if descending {
            kvs.reverse();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, create_revision: u64, mod_revision: u64, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value.into(),
            create_revision,
            mod_revision,
            version: mod_revision - create_revision + 1,
            lease: 0,
        }
    }

    fn answer() -> RangeResponse {
        RangeResponse {
            kvs: vec![kv("a", 2, 5, "z"), kv("b", 3, 3, "y"), kv("c", 4, 6, "x")],
            count: 3,
            more: false,
            continue_token: None,
        }
    }

    fn keys(response: &RangeResponse) -> Vec<String> {
        let key = |kv: &KeyValue| String::from_utf8(kv.key.clone()).unwrap();
        response.kvs.iter().map(key).collect()
    }

    #[test]
    fn a_plain_view_keeps_the_store_answer_and_its_limit() {
        let view = RangeView {
            limit: Some(2),
            ..RangeView::default()
        };
        assert!(view.is_plain());
        assert_eq!(view.store_limit(), Some(2));
        let view = RangeView {
            sort_order: SortOrder::Ascend,
            ..RangeView::default()
        };
        assert!(view.is_plain());
    }

    #[test]
    fn sorting_descending_by_key_then_limiting_sets_more() {
        let view = RangeView {
            sort_order: SortOrder::Descend,
            limit: Some(2),
            ..RangeView::default()
        };
        assert_eq!(view.store_limit(), None);
        let shown = view.finish(answer());
        assert_eq!(keys(&shown), ["c", "b"]);
        assert!(shown.more);
        assert_eq!(shown.count, 3, "count is the whole range's, as in etcd");
    }

    #[test]
    fn a_target_without_an_order_sorts_ascending() {
        let view = RangeView {
            sort_target: SortTarget::Value,
            ..RangeView::default()
        };
        assert_eq!(keys(&view.finish(answer())), ["c", "b", "a"]);
        let view = RangeView {
            sort_target: SortTarget::ModRevision,
            sort_order: SortOrder::Descend,
            ..RangeView::default()
        };
        assert_eq!(keys(&view.finish(answer())), ["c", "a", "b"]);
    }

    #[test]
    fn revision_filters_drop_key_values_outside_their_bounds() {
        let view = RangeView {
            min_mod_revision: 4,
            max_create_revision: 3,
            ..RangeView::default()
        };
        let shown = view.finish(answer());
        assert_eq!(keys(&shown), ["a"]);
        assert!(!shown.more);
        assert_eq!(shown.count, 3);
    }
}
