//! etcd's KV service (Range, RangeStream, Put, DeleteRange, Txn, Compact) over `KvBackend`. Each method parses
//! (convert.rs), calls the backend or revkv-node's shared write seam, and renders the answer;
//! errors go through `error::status`. A txn whose branches only get is read, not written
//! (`KvBackend::read_txn`), as etcd serves it: no log entry, linearizable unless every get of
//! both branches is serializable.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;

use revkv_metrics::{ConflictResolution, KvOp, Metrics};
use revkv_node::writes::{put_keeping_current, unexpected_response, KeepCurrent};
use revkv_node::{KvBackend, ReadConsistency};
use revkv_storage::{Request, Response};
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

use crate::auth;
use crate::convert::{self, to_i64};
use crate::error::status;
use crate::proto::etcdserverpb as pb;
use crate::range_stream;

pub struct KvService<B> {
    pub backend: Arc<B>,
    pub metrics: Option<Arc<Metrics>>,
    /// The size a RangeStream chunk aims at (the port's largest request, as etcd's).
    pub target_chunk_bytes: usize,
}

type Answer<T> = Result<GrpcResponse<T>, Status>;

#[tonic::async_trait]
impl<B: KvBackend> pb::kv_server::Kv for KvService<B> {
    async fn range(&self, request: GrpcRequest<pb::RangeRequest>) -> Answer<pb::RangeResponse> {
        let backend = auth::acting_for(&self.backend, &request)?;
        let request = request.into_inner();
        let consistency = if request.serializable {
            ReadConsistency::Serializable { min_revision: None }
        } else {
            ReadConsistency::Linearizable
        };
        let (read, view) = convert::range(request)?;
        let past = read.revision.is_some();
        let answer = backend.read(read, consistency).await.map_err(status)?;
        let mut header = answer.header;
        if past {
            // etcd's header carries the store's current revision even for a read at a past one
            // (revkv's read answers the revision it read at).
            let now = self.backend.header().map_err(status)?;
            header.revision = header.revision.max(now.revision);
        }
        let header = convert::header(header, self.backend.cluster_id());
        Ok(GrpcResponse::new(convert::range_response(
            answer.response,
            &view,
            header,
        )))
    }

    type RangeStreamStream =
        Pin<Box<dyn Stream<Item = Result<pb::RangeStreamResponse, Status>> + Send>>;

    /// etcd 3.7's streamed range (`range_stream.rs`).
    async fn range_stream(
        &self,
        request: GrpcRequest<pb::RangeRequest>,
    ) -> Answer<Self::RangeStreamStream> {
        let backend = auth::acting_for(&self.backend, &request)?;
        let request = request.into_inner();
        range_stream::check(&request)?;
        let chunks = range_stream::chunks(
            backend,
            self.backend.cluster_id(),
            self.target_chunk_bytes,
            request,
        )?;
        Ok(GrpcResponse::new(Box::pin(chunks)))
    }

    async fn put(&self, request: GrpcRequest<pb::PutRequest>) -> Answer<pb::PutResponse> {
        let backend = auth::acting_for(&self.backend, &request)?;
        let request = request.into_inner();
        let put = convert::put(&request)?;
        let (header, response) = if request.ignore_value || request.ignore_lease {
            let keep = KeepCurrent {
                value: request.ignore_value,
                lease: request.ignore_lease,
            };
            put_keeping_current(&backend, put, keep)
                .await
                .map_err(status)?
        } else {
            let written = backend.write(Request::Put(put)).await.map_err(status)?;
            let Response::Put(response) = written.response else {
                return Err(status(unexpected_response("put")));
            };
            (written.header, response)
        };
        Ok(GrpcResponse::new(pb::PutResponse {
            header: convert::header(header, self.backend.cluster_id()),
            prev_kv: response.prev_kv.map(convert::key_value),
        }))
    }

    async fn delete_range(
        &self,
        request: GrpcRequest<pb::DeleteRangeRequest>,
    ) -> Answer<pb::DeleteRangeResponse> {
        let backend = auth::acting_for(&self.backend, &request)?;
        let delete = convert::delete_range(request.into_inner())?;
        let written = backend
            .write(Request::DeleteRange(delete))
            .await
            .map_err(status)?;
        let Response::DeleteRange(response) = written.response else {
            return Err(status(unexpected_response("delete range")));
        };
        Ok(GrpcResponse::new(pb::DeleteRangeResponse {
            header: convert::header(written.header, self.backend.cluster_id()),
            deleted: to_i64(response.deleted),
            prev_kvs: response
                .prev_kvs
                .into_iter()
                .map(convert::key_value)
                .collect(),
        }))
    }

    async fn txn(&self, request: GrpcRequest<pb::TxnRequest>) -> Answer<pb::TxnResponse> {
        let backend = auth::acting_for(&self.backend, &request)?;
        let request = request.into_inner();
        let consistency = read_only_txn_consistency(&request);
        let convert::ConvertedTxn {
            txn,
            success_views,
            failure_views,
        } = convert::txn(request)?;
        let first_compare_key = txn.compare.first().map(|compare| compare.key.clone());
        let (answer_header, response) = match consistency {
            // A txn that only reads changes nothing: answered from the store, as etcd does.
            Some(consistency) => {
                let answer = backend.read_txn(txn, consistency).await.map_err(status)?;
                (answer.header, answer.response)
            }
            None => {
                let written = backend.write(Request::Txn(txn)).await.map_err(status)?;
                let Response::Txn(response) = written.response else {
                    return Err(status(unexpected_response("txn")));
                };
                (written.header, response)
            }
        };
        self.count_if_conflict(response.succeeded, first_compare_key.as_deref());
        let views = if response.succeeded {
            success_views
        } else {
            failure_views
        };
        let header = convert::header(answer_header, self.backend.cluster_id());
        // etcd's answers inside a txn carry only the revision in their headers.
        let inner_header = Some(pb::ResponseHeader {
            revision: to_i64(answer_header.revision),
            ..pb::ResponseHeader::default()
        });
        let responses = convert::txn_op_responses(response.responses, &views, inner_header);
        Ok(GrpcResponse::new(pb::TxnResponse {
            header,
            succeeded: response.succeeded,
            responses,
        }))
    }

    async fn compact(
        &self,
        request: GrpcRequest<pb::CompactionRequest>,
    ) -> Answer<pb::CompactionResponse> {
        // `physical` (wait until the history is gone) needs nothing more: the compact revision
        // holds once the entry is applied, and no read can tell the versions the background
        // cleaner has not removed yet from removed ones. Root only (the auth gate).
        let revision = u64::try_from(request.into_inner().revision).unwrap_or(0);
        let written = self
            .backend
            .write(Request::Compact { revision })
            .await
            .map_err(status)?;
        Ok(GrpcResponse::new(pb::CompactionResponse {
            header: convert::header(written.header, self.backend.cluster_id()),
        }))
    }
}

impl<B> KvService<B> {
    /// A txn whose compares failed is a conflict, counted under its first compare's key as the
    /// HTTP API counts its txns (`revkv_conflicts_total{op="txn"}`).
    fn count_if_conflict(&self, succeeded: bool, first_compare_key: Option<&[u8]>) {
        if let (false, Some(key), Some(metrics)) = (succeeded, first_compare_key, &self.metrics) {
            metrics
                .kv
                .record_conflict(KvOp::Txn, ConflictResolution::Rejected, key);
        }
    }
}

/// How a txn that only reads is answered, as etcd decides it (`isTxnReadonly` and
/// `isTxnSerializable` in its `v3_server.go`): None when an op of either branch is not a range
/// (it goes through the log); without a read barrier when every range of both branches is
/// serializable (a txn with no ops at all too); otherwise linearizable.
fn read_only_txn_consistency(txn: &pb::TxnRequest) -> Option<ReadConsistency> {
    let mut every_range_serializable = true;
    for op in txn.success.iter().chain(&txn.failure) {
        let Some(pb::request_op::Request::RequestRange(range)) = &op.request else {
            return None;
        };
        every_range_serializable &= range.serializable;
    }
    Some(match every_range_serializable {
        true => ReadConsistency::Serializable { min_revision: None },
        false => ReadConsistency::Linearizable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(serializable: bool) -> pb::RequestOp {
        let range = pb::RangeRequest {
            key: b"k".to_vec(),
            serializable,
            ..Default::default()
        };
        pb::RequestOp {
            request: Some(pb::request_op::Request::RequestRange(range)),
        }
    }

    fn put() -> pb::RequestOp {
        let put = pb::PutRequest {
            key: b"k".to_vec(),
            ..Default::default()
        };
        pb::RequestOp {
            request: Some(pb::request_op::Request::RequestPut(put)),
        }
    }

    fn txn(success: Vec<pb::RequestOp>, failure: Vec<pb::RequestOp>) -> pb::TxnRequest {
        pb::TxnRequest {
            compare: Vec::new(),
            success,
            failure,
        }
    }

    #[test]
    fn a_txn_is_read_as_etcd_decides_it() {
        let serializable = Some(ReadConsistency::Serializable { min_revision: None });
        let linearizable = Some(ReadConsistency::Linearizable);
        let decided = |request: pb::TxnRequest| read_only_txn_consistency(&request);
        assert_eq!(decided(txn(vec![], vec![])), serializable);
        assert_eq!(decided(txn(vec![get(true)], vec![get(true)])), serializable);
        assert_eq!(
            decided(txn(vec![get(true)], vec![get(false)])),
            linearizable
        );
        assert_eq!(decided(txn(vec![get(false)], vec![])), linearizable);
        assert_eq!(decided(txn(vec![get(true)], vec![put()])), None);
        assert_eq!(decided(txn(vec![put()], vec![])), None);
        let empty_op = pb::RequestOp { request: None };
        assert_eq!(decided(txn(vec![empty_op], vec![])), None);
    }
}
