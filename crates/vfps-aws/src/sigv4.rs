//! AWS Signature Version 4 as S3 takes it: a request signed in its headers,
//! or presigned in its query string for a client to use.
//!
//! S3 differs from the other AWS services in one point that matters here: a
//! path is encoded once (each segment, `/` kept), never twice. The tests are
//! AWS's published S3 examples.

use std::{
    fmt,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest, Sha256};

/// What SigV4 leaves unencoded: letters, digits and `-_.~`.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The payload hash of a body that is not hashed (streamed, or a presigned
/// client's).
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// The longest a presigned address may be valid (SigV4's limit).
pub const MAX_PRESIGN: Duration = Duration::from_secs(7 * 24 * 3600);

/// A query name or value, or one path segment, encoded.
pub fn encode(s: &str) -> String {
    utf8_percent_encode(s, UNRESERVED).to_string()
}

/// An object key encoded for a path: each segment, `/` kept.
pub fn encode_key(key: &str) -> String {
    key.split('/').map(encode).collect::<Vec<_>>().join("/")
}

/// The hex SHA-256 of a payload.
pub fn payload_hash(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

/// What a signature covers.
pub struct Request<'a> {
    pub method: &'a str,
    /// `host` or `host:port`, as sent in the `Host` header.
    pub host: &'a str,
    /// Already encoded (see [`encode_key`]).
    pub path: &'a str,
    /// Names and values as they are, not encoded.
    pub query: &'a [(String, String)],
    /// Other headers to sign (lowercase names), e.g. `range`, `content-md5`.
    pub headers: &'a [(&'a str, String)],
}

/// A key pair, and the session token that comes with temporary credentials
/// (STS, a role's web identity): signed as `x-amz-security-token`.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    /// Never logged.
    pub secret_key: String,
    /// Never logged.
    pub session_token: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Whether `text` holds the secret key or the session token (so they can
    /// be kept out of errors).
    pub fn revealed_in(&self, text: &str) -> bool {
        let holds = |s: &str| !s.is_empty() && text.contains(s);
        holds(&self.secret_key) || self.session_token.as_deref().is_some_and(holds)
    }
}

/// Signs in one region, with the credentials each call is given (temporary
/// ones change while the signer lives).
#[derive(Debug, Clone)]
pub struct Signer {
    region: String,
    /// The service signed for: `s3`, `kms`.
    service: &'static str,
}

impl Signer {
    /// A signer for S3 in `region`.
    pub fn new(region: &str) -> Self {
        Self::for_service(region, "s3")
    }

    /// A signer for `service` (`kms`, …) in `region`.
    pub fn for_service(region: &str, service: &'static str) -> Self {
        Self {
            region: region.to_owned(),
            service,
        }
    }

    /// The headers to add to `req` so it is signed at `at`, its body hashing
    /// to `payload_hash` (or [`UNSIGNED_PAYLOAD`]).
    pub fn sign(
        &self,
        creds: &Credentials,
        req: &Request<'_>,
        payload_hash: &str,
        at: SystemTime,
    ) -> Vec<(&'static str, String)> {
        let (date, time) = timestamp(at);
        let mut headers: Vec<(&str, String)> = req.headers.to_vec();
        headers.push(("host", req.host.to_owned()));
        headers.push(("x-amz-content-sha256", payload_hash.to_owned()));
        headers.push(("x-amz-date", time.clone()));
        if let Some(token) = &creds.session_token {
            headers.push(("x-amz-security-token", token.clone()));
        }
        headers.sort_by(|a, b| a.0.cmp(b.0));
        let canonical_headers: String = headers
            .iter()
            .map(|(name, value)| format!("{name}:{}\n", header_value(value)))
            .collect();
        let signed_headers = headers
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(";");
        let canonical = format!(
            "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{payload_hash}",
            req.method,
            req.path,
            canonical_query(req.query),
        );
        let scope = self.scope(&date);
        let signature = self.signature(creds, &date, &time, &scope, &canonical);
        let mut signed = vec![
            ("x-amz-date", time),
            ("x-amz-content-sha256", payload_hash.to_owned()),
            (
                "authorization",
                format!(
                    "{ALGORITHM} Credential={}/{scope},SignedHeaders={signed_headers},Signature={signature}",
                    creds.access_key
                ),
            ),
        ];
        if let Some(token) = &creds.session_token {
            signed.push(("x-amz-security-token", token.clone()));
        }
        signed
    }

    /// The query string (without `?`) that presigns `req` at `at` for
    /// `expires`; only `host` is signed, so a client may send any other
    /// header. A session token goes in the query, signed, as S3 takes it.
    ///
    /// `expires` past [`MAX_PRESIGN`] is refused, not cut: a caller that
    /// announces a longer validity than the address has would mislead its
    /// client (S3 answers 403 to such an address from its first use).
    pub fn presign(
        &self,
        creds: &Credentials,
        req: &Request<'_>,
        expires: Duration,
        at: SystemTime,
    ) -> Result<String, PresignTooLong> {
        if expires > MAX_PRESIGN {
            return Err(PresignTooLong(expires));
        }
        let (date, time) = timestamp(at);
        let scope = self.scope(&date);
        let expires = expires.as_secs().max(1);
        let mut query = req.query.to_vec();
        query.extend([
            ("X-Amz-Algorithm".to_owned(), ALGORITHM.to_owned()),
            (
                "X-Amz-Credential".to_owned(),
                format!("{}/{scope}", creds.access_key),
            ),
            ("X-Amz-Date".to_owned(), time.clone()),
            ("X-Amz-Expires".to_owned(), expires.to_string()),
            ("X-Amz-SignedHeaders".to_owned(), "host".to_owned()),
        ]);
        if let Some(token) = &creds.session_token {
            query.push(("X-Amz-Security-Token".to_owned(), token.clone()));
        }
        let query = canonical_query(&query);
        let canonical = format!(
            "{}\n{}\n{query}\nhost:{}\n\nhost\n{UNSIGNED_PAYLOAD}",
            req.method, req.path, req.host
        );
        let signature = self.signature(creds, &date, &time, &scope, &canonical);
        Ok(format!("{query}&X-Amz-Signature={signature}"))
    }

    fn scope(&self, date: &str) -> String {
        format!("{date}/{}/{}/aws4_request", self.region, self.service)
    }

    fn signature(
        &self,
        creds: &Credentials,
        date: &str,
        time: &str,
        scope: &str,
        canonical: &str,
    ) -> String {
        let string_to_sign = format!(
            "{ALGORITHM}\n{time}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let key = signing_key(&creds.secret_key, date, &self.region, self.service);
        hex::encode(hmac(&key, string_to_sign.as_bytes()))
    }
}

/// The key a day's signatures of one region and service are made with.
fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> Vec<u8> {
    [date, region, service, "aws4_request"]
        .iter()
        .fold(format!("AWS4{secret}").into_bytes(), |key, part| {
            hmac(&key, part.as_bytes())
        })
}

/// A presigned address asked to live longer than SigV4 allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a presigned address is valid for at most 7 days (604800 s), not {} s", .0.as_secs())]
pub struct PresignTooLong(pub Duration);

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    ring::hmac::sign(&key, data).as_ref().to_vec()
}

/// Names and values encoded, sorted by name then value.
fn canonical_query(query: &[(String, String)]) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .map(|(name, value)| (encode(name), encode(value)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// A header's value trimmed, inner runs of spaces made one.
fn header_value(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `(yyyymmdd, yyyymmddThhmmssZ)` of `at`, in UTC.
fn timestamp(at: SystemTime) -> (String, String) {
    let seconds = at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let (days, second_of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    let date = format!("{year:04}{month:02}{day:02}");
    let time = format!(
        "{date}T{:02}{:02}{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    );
    (date, time)
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    // AWS's examples: this key pair, bucket `examplebucket` in us-east-1,
    // signed at 2013-05-24T00:00:00Z.
    const HOST: &str = "examplebucket.s3.amazonaws.com";
    const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn signer() -> Signer {
        Signer::new("us-east-1")
    }

    fn creds() -> Credentials {
        Credentials {
            access_key: "AKIAIOSFODNN7EXAMPLE".to_owned(),
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_owned(),
            session_token: None,
        }
    }

    /// The same key pair as temporary credentials, with a token that needs
    /// encoding in a query.
    fn session() -> Credentials {
        Credentials {
            session_token: Some("IQoJb3JpZ2luX2VjEXAMPLE/token+with=chars".to_owned()),
            ..creds()
        }
    }

    /// AWS's example of the signing key's derivation, for another service
    /// than S3 (IAM): what a KMS signature's key is derived as too.
    #[test]
    fn the_signing_key_follows_the_service() {
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20120215",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex::encode(key),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
        let kms = Signer::for_service("eu-central-1", "kms");
        let signed = kms.sign(
            &creds(),
            &Request {
                method: "POST",
                host: "kms.eu-central-1.amazonaws.com",
                path: "/",
                query: &[],
                headers: &[],
            },
            EMPTY_SHA256,
            at(),
        );
        let auth = &signed
            .iter()
            .find(|(n, _)| *n == "authorization")
            .unwrap()
            .1;
        assert!(
            auth.contains("/20130524/eu-central-1/kms/aws4_request,"),
            "{auth}"
        );
    }

    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_369_353_600)
    }

    fn authorization(headers: &[(&str, String)]) -> String {
        headers
            .iter()
            .find(|(name, _)| *name == "authorization")
            .map(|(_, value)| value.clone())
            .unwrap()
    }

    #[test]
    fn the_example_date_is_formatted_as_aws_does() {
        assert_eq!(
            timestamp(at()),
            ("20130524".to_owned(), "20130524T000000Z".to_owned())
        );
        let leap = UNIX_EPOCH + Duration::from_secs(951_827_696);
        assert_eq!(timestamp(leap).1, "20000229T123456Z");
        assert_eq!(timestamp(UNIX_EPOCH).1, "19700101T000000Z");
    }

    #[test]
    fn a_ranged_get_is_signed_as_in_aws_s_example() {
        let range = [("range", "bytes=0-9".to_owned())];
        let req = Request {
            method: "GET",
            host: HOST,
            path: "/test.txt",
            query: &[],
            headers: &range,
        };
        let headers = signer().sign(&creds(), &req, EMPTY_SHA256, at());
        assert_eq!(
            authorization(&headers),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,\
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
        assert!(headers.contains(&("x-amz-date", "20130524T000000Z".to_owned())));
        assert!(headers.contains(&("x-amz-content-sha256", EMPTY_SHA256.to_owned())));
    }

    #[test]
    fn a_put_with_an_encoded_key_is_signed_as_in_aws_s_example() {
        let body = b"Welcome to Amazon S3.";
        let extra = [
            ("date", "Fri, 24 May 2013 00:00:00 GMT".to_owned()),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY".to_owned()),
        ];
        let req = Request {
            method: "PUT",
            host: HOST,
            path: &format!("/{}", encode_key("test$file.text")),
            query: &[],
            headers: &extra,
        };
        assert_eq!(req.path, "/test%24file.text");
        let headers = signer().sign(&creds(), &req, &payload_hash(body), at());
        assert!(authorization(&headers).ends_with(
            "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,\
             Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
        ));
    }

    #[test]
    fn a_bucket_subresource_and_a_listing_are_signed_as_in_aws_s_examples() {
        let lifecycle = [("lifecycle".to_owned(), String::new())];
        let req = Request {
            method: "GET",
            host: HOST,
            path: "/",
            query: &lifecycle,
            headers: &[],
        };
        assert!(
            authorization(&signer().sign(&creds(), &req, EMPTY_SHA256, at())).ends_with(
                "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
            )
        );
        let listing = [
            ("prefix".to_owned(), "J".to_owned()),
            ("max-keys".to_owned(), "2".to_owned()),
        ];
        let req = Request {
            query: &listing,
            ..req
        };
        assert!(
            authorization(&signer().sign(&creds(), &req, EMPTY_SHA256, at())).ends_with(
                "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
            )
        );
    }

    #[test]
    fn a_presigned_get_is_the_url_of_aws_s_example() {
        let req = Request {
            method: "GET",
            host: HOST,
            path: "/test.txt",
            query: &[],
            headers: &[],
        };
        let query = signer()
            .presign(&creds(), &req, Duration::from_secs(86_400), at())
            .unwrap();
        assert_eq!(
            query,
            "X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
             &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
             &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );
    }

    #[test]
    fn keys_keep_their_slashes_and_encode_everything_else_reserved() {
        assert_eq!(
            encode_key("csv-jobs/a b/ü+&=~_.x"),
            "csv-jobs/a%20b/%C3%BC%2B%26%3D~_.x"
        );
        assert_eq!(encode("a/b"), "a%2Fb");
    }

    #[test]
    fn the_secret_is_not_in_the_signer_s_debug_output() {
        let shown = format!("{:?} {:?}", signer(), session());
        assert!(!shown.contains("EXAMPLEKEY"), "{shown}");
        assert!(!shown.contains("token+with"), "{shown}");
        assert!(creds().revealed_in("x wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY y"));
        assert!(session().revealed_in("x IQoJb3JpZ2luX2VjEXAMPLE/token+with=chars"));
        assert!(!creds().revealed_in("AKIAIOSFODNN7EXAMPLE"));
    }

    // The two below were computed independently with botocore 1.43
    // (`S3SigV4Auth`, `S3SigV4QueryAuth`) for the same key pair, time and
    // requests, with the session token of `session()`.
    #[test]
    fn a_session_token_is_signed_as_a_header_as_botocore_signs_it() {
        let range = [("range", "bytes=0-9".to_owned())];
        let req = Request {
            method: "GET",
            host: HOST,
            path: "/test.txt",
            query: &[],
            headers: &range,
        };
        let headers = signer().sign(&session(), &req, EMPTY_SHA256, at());
        assert_eq!(
            authorization(&headers),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date;x-amz-security-token,\
             Signature=5f370ee38fe1169e4b7fc291a4271536089444ec1d25acb5790dae3779dd1464"
        );
        assert!(headers.contains(&(
            "x-amz-security-token",
            "IQoJb3JpZ2luX2VjEXAMPLE/token+with=chars".to_owned()
        )));
    }

    #[test]
    fn a_session_token_is_in_the_presigned_query_as_botocore_puts_it() {
        let req = Request {
            method: "GET",
            host: HOST,
            path: "/test.txt",
            query: &[],
            headers: &[],
        };
        let query = signer()
            .presign(&session(), &req, Duration::from_secs(86_400), at())
            .unwrap();
        assert!(
            query.contains("&X-Amz-Security-Token=IQoJb3JpZ2luX2VjEXAMPLE%2Ftoken%2Bwith%3Dchars&"),
            "{query}"
        );
        assert!(
            query.ends_with(
                "&X-Amz-Signature=c10045c3010a40e1e78af6834666402d46cf9c7f0ce554db5216a4eb5a1c2d7b"
            ),
            "{query}"
        );
    }

    #[test]
    fn a_presigned_address_longer_than_seven_days_is_refused_not_cut() {
        let req = Request {
            method: "GET",
            host: HOST,
            path: "/test.txt",
            query: &[],
            headers: &[],
        };
        assert!(signer().presign(&creds(), &req, MAX_PRESIGN, at()).is_ok());
        let eight_days = Duration::from_secs(8 * 86_400);
        let refused = signer()
            .presign(&creds(), &req, eight_days, at())
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "a presigned address is valid for at most 7 days (604800 s), not 691200 s"
        );
    }
}
