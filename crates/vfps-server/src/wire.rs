//! What every protocol adapter writes the same way: the gRPC code of an error
//! kind (gRPC's status, and the `code` of REST's JSON error bodies, as
//! upstream's transcoding writes them) and percent-encoding for URLs (the
//! UI's links and forms, OAuth's client credentials). Kept here so that no
//! adapter borrows another's helpers.

use tonic::Code;
use vfps_core::ErrorKind;

/// The gRPC status code of a service error kind.
pub fn grpc_code(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::InvalidArgument => Code::InvalidArgument,
        ErrorKind::OutOfRange => Code::OutOfRange,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::DeadlineExceeded => Code::DeadlineExceeded,
        ErrorKind::ResourceExhausted => Code::ResourceExhausted,
        ErrorKind::Internal => Code::Internal,
        ErrorKind::Unauthenticated => Code::Unauthenticated,
        ErrorKind::PermissionDenied => Code::PermissionDenied,
        ErrorKind::FailedPrecondition => Code::FailedPrecondition,
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_precondition_and_unavailable_keep_their_codes() {
        assert_eq!(grpc_code(ErrorKind::FailedPrecondition) as i32, 9);
        assert_eq!(grpc_code(ErrorKind::Unavailable) as i32, 14);
        assert_eq!(grpc_code(ErrorKind::NotFound) as i32, 5);
    }

    #[test]
    fn only_unreserved_characters_stay_as_they_are() {
        assert_eq!(url_encode("a-Z_0.~"), "a-Z_0.~");
        assert_eq!(url_encode("a b/ä?&="), "a%20b%2F%C3%A4%3F%26%3D");
    }
}
