//! Asking one replica during verification: its ways in, an HTTP call
//! retried while unanswered or 503, and an answer read as what was seen.

use std::time::Duration;

use vfps_client::Client;

use super::{fhir, fhir::Reply};
use crate::history::verified::Seen;

/// One replica's ways in.
pub struct Replica {
    pub grpc: Client,
    /// `http://host:port`, the replica's HTTP address.
    pub http: String,
}

/// An HTTP GET or POST tried a few times while it is not answered or
/// answered 503 (the verification's own retries).
pub(crate) async fn http(
    http: &reqwest::Client,
    bearer: Option<&str>,
    url: &str,
    body: Option<&serde_json::Value>,
) -> Reply {
    let mut last = Reply::NotSent("not tried".into());
    for attempt in 0..6u32 {
        last = match body {
            Some(b) => fhir::post(http, url, bearer, b, Duration::from_secs(20)).await,
            None => {
                let mut r = http.get(url).timeout(Duration::from_secs(20));
                if let Some(a) = bearer {
                    r = r.header("authorization", a);
                }
                match r.send().await {
                    Ok(resp) => {
                        let s = resp.status().as_u16();
                        Reply::Status(s, resp.json().await.unwrap_or_default())
                    }
                    Err(e) => Reply::Lost(if e.is_timeout() { "timeout" } else { "error" }.into()),
                }
            }
        };
        match &last {
            Reply::Status(s, _) if *s != 503 => return last,
            _ => tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt + 1))).await,
        }
    }
    last
}

pub(crate) fn from_reply(
    reply: Reply,
    value: impl FnOnce(&serde_json::Value) -> Option<String>,
) -> Seen {
    match reply {
        Reply::Status(200 | 201, body) => match value(&body) {
            Some(v) => Seen::Value(v),
            None => Seen::Error("200 without a value".into()),
        },
        Reply::Status(404, _) => Seen::NotFound,
        Reply::Status(s, _) => Seen::Error(format!("HTTP {s}")),
        Reply::Lost(why) | Reply::NotSent(why) => Seen::Error(why),
    }
}
