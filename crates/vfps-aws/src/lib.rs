//! What vfps's AWS clients share — the jobs' S3 client and the KMS key
//! source: Signature Version 4 ([`sigv4`]), the credential chain
//! ([`credentials`]: static keys, or a role assumed with a web identity
//! through STS, as IRSA gives a pod), the little XML S3 and STS speak
//! ([`xml`]), and how a failed connection is told ([`transport`]).

pub mod credentials;
pub mod sigv4;
pub mod xml;

/// A call to AWS that did not go through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AwsError {
    /// Not answered, or answered "not now" (5xx, throttling, a connection
    /// refused or reset): worth retrying.
    #[error("{0}")]
    Unavailable(String),
    /// Refused, in a way waiting does not mend (credentials, TLS, a request
    /// the service does not take).
    #[error("{0}")]
    Refused(String),
}

/// A failure to reach an AWS endpoint (or an S3-compatible store) or to
/// hear it out. A refused or reset connection, a
/// timeout, an answer cut short may all pass: `Unavailable`. A TLS failure
/// (a certificate that is not trusted or does not name the host, no common
/// protocol) does not pass by waiting: `Refused`, with its cause, so the
/// runner stops at once rather than retrying until its deadline.
pub fn transport(what: &str, e: reqwest::Error) -> AwsError {
    let builder = e.is_builder();
    let reset_in_handshake = handshake_reset(&e);
    // The host names the endpoint (a DNS failure says none); the URL itself
    // is never written: a presigned one carries a signature.
    let host = e.url().and_then(|u| {
        u.host_str()
            .map(|h| u.port().map_or(h.to_owned(), |p| format!("{h}:{p}")))
    });
    let e = e.without_url();
    let mut text = match &host {
        Some(h) => format!("{what} to {h}: {e}"),
        None => format!("{what}: {e}"),
    };
    let mut tls = false;
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        tls |= is_tls(cause);
        source = cause.source();
    }
    if builder || tls {
        return AwsError::Refused(text);
    }
    if reset_in_handshake {
        // Accepted, then cut off before TLS was agreed: what a port that
        // speaks plain HTTP (or something else) does to a TLS handshake.
        text.push_str(&format!(
            " (the connection was reset during the TLS handshake: does {} speak TLS, or is \
             the address http://?)",
            host.as_deref().unwrap_or("the endpoint")
        ));
    }
    AwsError::Unavailable(text)
}

/// Whether `e` is a connection to an `https://` address reset during the
/// TLS handshake (see [`transport`]).
pub fn handshake_reset(e: &reqwest::Error) -> bool {
    let https = e.url().is_some_and(|u| u.scheme() == "https");
    let mut source = std::error::Error::source(e);
    let mut reset = false;
    while let Some(cause) = source {
        reset |= io_reset(cause);
        source = cause.source();
    }
    https && e.is_connect() && reset
}

/// Whether `e` is an I/O error of a reset or cut-off connection, as itself
/// or wrapped in I/O errors (an I/O error's `source` skips what it wraps).
fn io_reset(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut e = e;
    for _ in 0..8 {
        let Some(io) = e.downcast_ref::<std::io::Error>() else {
            return false;
        };
        if matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
        ) {
            return true;
        }
        match io.get_ref() {
            Some(inner) => e = inner,
            None => return false,
        }
    }
    false
}

/// Whether `e` is a TLS failure: rustls's error, as itself or wrapped in I/O
/// errors (the TLS stream wraps it in one, the connector that in another, and
/// an I/O error's `source` skips what it wraps).
fn is_tls(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut e = e;
    for _ in 0..8 {
        if e.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => e = inner,
            None => return false,
        }
    }
    false
}
