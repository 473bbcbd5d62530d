//! Space maintenance calls: the alarms raised (`GET /v1/alarms`), clearing them
//! (`DELETE /v1/alarms`) and defragmenting one member's state file (`POST /v1/defragment`).
//!
//! Listing is a read; clearing and defragmenting are writes, never repeated once their outcome is
//! unknown. A defragmentation is per member: make a client of the member to defragment
//! ([`Client::for_member`]).

use reqwest::Method;
use serde::{Deserialize, Serialize};

use super::error::ClientError;
use super::kv::with_query;
use super::transport::Call;
use super::types::ResponseHeader;
use super::Client;

/// One raised alarm: the member it names and its kind (`NOSPACE` or `CORRUPT`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlarmMember {
    pub member_id: u64,
    pub alarm: String,
}

/// `GET /v1/alarms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlarmsResponse {
    pub header: ResponseHeader,
    pub alarms: Vec<AlarmMember>,
}

/// `DELETE /v1/alarms`: what was cleared, and what is still raised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisarmResponse {
    pub header: ResponseHeader,
    pub disarmed: Vec<AlarmMember>,
    pub alarms: Vec<AlarmMember>,
}

/// `POST /v1/defragment`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefragmentResponse {
    pub header: ResponseHeader,
    pub file_bytes_before: u64,
    pub file_bytes_after: u64,
    pub elapsed_ms: u64,
}

impl Client {
    /// The alarms raised in the cluster.
    pub async fn alarms(&self) -> Result<AlarmsResponse, ClientError> {
        self.call_json(&Call::read("/v1/alarms".to_string())).await
    }

    /// Clears every raised alarm, or only those of `member_id`.
    pub async fn disarm_alarms(
        &self,
        member_id: Option<u64>,
    ) -> Result<DisarmResponse, ClientError> {
        let pairs: Vec<(&str, String)> = member_id
            .map(|id| vec![("member_id", id.to_string())])
            .unwrap_or_default();
        let path = with_query("/v1/alarms".to_string(), &pairs);
        self.call_json(&Call::write(Method::DELETE, path, None))
            .await
    }

    /// Defragments the state file of the member that takes the call.
    pub async fn defragment(&self) -> Result<DefragmentResponse, ClientError> {
        let call = Call::write(Method::POST, "/v1/defragment".to_string(), None);
        self.call_json(&call).await
    }
}
