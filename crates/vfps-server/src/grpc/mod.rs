//! The gRPC API (`vfps.api.v1`) on top of [`Service`](crate::service::Service).

use std::time::{Duration, Instant, SystemTime};

use tonic::Status;
use vfps_core::Error;
use vfps_proto::v1 as pb;

use crate::state::AppState;

pub(crate) mod jobs;
pub(crate) mod namespaces;
pub(crate) mod pseudonyms;

pub use jobs::CsvJobApi;
pub use namespaces::NamespaceApi;
pub use pseudonyms::PseudonymApi;

/// Maps the service's error kinds to gRPC status codes.
pub fn status(e: Error) -> Status {
    Status::new(crate::wire::grpc_code(e.kind), e.message)
}

/// Parses a `grpc-timeout` header value (`<digits><unit>`).
pub fn parse_grpc_timeout(raw: &str) -> Option<Duration> {
    let (digits, unit) = raw.split_at(raw.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The instant by which the server must answer: the caller's `grpc-timeout`
/// capped by the configured maximum, less a small margin so an `UNAVAILABLE`
/// reaches the caller before its own deadline fires.
pub fn deadline<T>(state: &AppState, request: &tonic::Request<T>) -> Instant {
    let asked = request
        .metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout);
    state.deadline(asked)
}

/// The `authorization` metadata's value, as sent.
pub(crate) fn authorization(
    metadata: &tonic::metadata::MetadataMap,
) -> crate::auth::AuthHeader<'_> {
    crate::auth::single(
        metadata
            .get_all("authorization")
            .iter()
            .map(|v| v.as_bytes()),
    )
}

pub(crate) fn timestamp(t: SystemTime) -> pbjson_types::Timestamp {
    let micros = vfps_core::to_micros(t);
    pbjson_types::Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1000) as i32,
    }
}

pub(crate) fn meta(created: SystemTime, updated: SystemTime) -> Option<pb::Meta> {
    Some(pb::Meta {
        created_at: Some(timestamp(created)),
        last_updated_at: Some(timestamp(updated)),
    })
}

/// Runs one call with metrics: its latency and status code by method.
pub(crate) async fn observed<T>(
    state: &AppState,
    method: &'static str,
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<tonic::Response<T>, Status> {
    let started = Instant::now();
    let result = call.await;
    state
        .metrics
        .observe_request("grpc", method, started.elapsed(), result.as_ref().err());
    result.map(tonic::Response::new).map_err(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(
            parse_grpc_timeout("100000u"),
            Some(Duration::from_millis(100))
        );
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout("123456789S"), None);
    }

    #[test]
    fn timestamps_keep_microseconds() {
        let t = vfps_core::from_micros(1_700_000_000_123_456);
        let ts = timestamp(t);
        assert_eq!((ts.seconds, ts.nanos), (1_700_000_000, 123_456_000));
    }
}
