//! Where AWS credentials come from: a key pair given in the settings (with a
//! session token when it is temporary), or a role assumed with the pod's web
//! identity through STS `AssumeRoleWithWebIdentity` — what IAM roles for
//! service accounts (EKS) give a pod — replaced before they expire.
//!
//! Temporary credentials are replaced early enough that an address presigned
//! with them is valid for its whole announced expiry: S3 refuses a presigned
//! address once the credentials that signed it have expired.

use std::{
    fmt,
    path::PathBuf,
    sync::{Mutex, RwLock},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use reqwest::StatusCode;

use crate::{sigv4::Credentials, transport, xml, AwsError};

/// How long STS has to answer.
const STS_TIMEOUT: Duration = Duration::from_secs(10);

/// How the bucket's credentials are had.
#[derive(Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// `S3__AccessKey`, `S3__SecretKey` and `S3__SessionToken`, or AWS's
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`.
    Static(Credentials),
    /// `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`.
    WebIdentity(WebIdentity),
}

impl fmt::Debug for CredentialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Static(c) => f.debug_tuple("Static").field(c).finish(),
            Self::WebIdentity(w) => f.debug_tuple("WebIdentity").field(w).finish(),
        }
    }
}

/// A role assumed with a web identity token (no secret of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebIdentity {
    /// `AWS_ROLE_ARN`.
    pub role_arn: String,
    /// `AWS_WEB_IDENTITY_TOKEN_FILE`: read at each renewal, since the kubelet
    /// rotates the projected token.
    pub token_file: PathBuf,
    /// `AWS_ROLE_SESSION_NAME` (`vfps`): names the session in CloudTrail.
    pub session_name: String,
    /// STS's endpoint: `AWS_ENDPOINT_URL_STS`, else the region's.
    pub sts_endpoint: String,
}

/// The STS endpoint of `region` (AWS's regional endpoints; China's partition
/// has its own domain).
pub fn sts_endpoint(region: &str) -> String {
    let domain = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://sts.{region}.{domain}")
}

/// AWS's own environment variables, in AWS's order: `AWS_ACCESS_KEY_ID` and
/// `AWS_SECRET_ACCESS_KEY` (with `AWS_SESSION_TOKEN`), else a role's web
/// identity (`AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`, what an EKS
/// pod with IAM roles for service accounts is given; STS at
/// `AWS_ENDPOINT_URL_STS`, else that of `AWS_REGION`, `AWS_DEFAULT_REGION`
/// or `region`). `None` when neither is given; every half-given one is
/// pushed to `errors`, named.
pub fn from_environment(
    get: &dyn Fn(&str) -> Option<String>,
    region: &str,
    errors: &mut Vec<String>,
) -> Option<CredentialSource> {
    let text = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let (key, secret) = (text("AWS_ACCESS_KEY_ID"), text("AWS_SECRET_ACCESS_KEY"));
    if key.is_some() || secret.is_some() {
        for (name, value) in [
            ("AWS_ACCESS_KEY_ID", &key),
            ("AWS_SECRET_ACCESS_KEY", &secret),
        ] {
            if value.is_none() {
                errors.push(format!(
                    "{name} is required with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (one is set)"
                ));
            }
        }
        return Some(CredentialSource::Static(Credentials {
            access_key: key.unwrap_or_default(),
            secret_key: secret.unwrap_or_default(),
            session_token: text("AWS_SESSION_TOKEN"),
        }));
    }
    let (file, role) = (text("AWS_WEB_IDENTITY_TOKEN_FILE"), text("AWS_ROLE_ARN"));
    if file.is_none() && role.is_none() {
        return None;
    }
    let file = file.unwrap_or_else(|| {
        errors.push("AWS_WEB_IDENTITY_TOKEN_FILE is required with AWS_ROLE_ARN".into());
        String::new()
    });
    if !file.is_empty() {
        if let Err(e) = std::fs::metadata(&file) {
            errors.push(format!(
                "AWS_WEB_IDENTITY_TOKEN_FILE={file:?} cannot be read: {e}"
            ));
        }
    }
    let sts_region = text("AWS_REGION")
        .or_else(|| text("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| region.to_owned());
    Some(CredentialSource::WebIdentity(WebIdentity {
        role_arn: role.unwrap_or_else(|| {
            errors.push("AWS_ROLE_ARN is required with AWS_WEB_IDENTITY_TOKEN_FILE".into());
            String::new()
        }),
        token_file: PathBuf::from(file),
        session_name: text("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| "vfps".into()),
        sts_endpoint: text("AWS_ENDPOINT_URL_STS").unwrap_or_else(|| sts_endpoint(&sts_region)),
    }))
}

/// Temporary credentials are replaced at least this long before they expire.
const MIN_REFRESH_AHEAD: Duration = Duration::from_secs(60);
/// After a failed renewal, the held credentials (still valid) are used for
/// this long before STS is asked again.
const RETRY_RENEWAL_AFTER: Duration = Duration::from_secs(10);

/// Credentials held with when they expire.
#[derive(Clone)]
struct Held {
    credentials: Credentials,
    expires: SystemTime,
    /// When they were had: with `expires`, their lifetime.
    fetched: SystemTime,
}

/// Hands out the current credentials, renewing temporary ones. Cheap to share.
pub struct Provider {
    source: CredentialSource,
    http: reqwest::Client,
    /// How long presigned addresses are valid: temporary credentials are
    /// replaced at least this long before they expire (when their lifetime
    /// allows; see [`Provider::refresh_ahead`]).
    presign_expiry: Duration,
    /// Whose credentials these are, in logs (`S3`, `KMS`).
    service: &'static str,
    /// The last credentials STS gave. A plain lock, never held across an
    /// await.
    held: RwLock<Option<Held>>,
    /// One renewal at a time; the others wait for it and take its result.
    renewing: tokio::sync::Mutex<()>,
    /// No renewal before this, after a failed one (held credentials still
    /// valid meanwhile).
    not_before: Mutex<Option<Instant>>,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Provider {
    pub fn new(source: CredentialSource, http: reqwest::Client, presign_expiry: Duration) -> Self {
        Self {
            source,
            http,
            presign_expiry,
            service: "S3",
            held: RwLock::new(None),
            renewing: tokio::sync::Mutex::new(()),
            not_before: Mutex::new(None),
        }
    }

    /// These credentials, named in logs as `service`'s.
    pub fn for_service(self, service: &'static str) -> Self {
        Self { service, ..self }
    }

    /// The credentials to sign with now.
    pub async fn current(&self) -> Result<Credentials, AwsError> {
        let identity = match &self.source {
            CredentialSource::Static(c) => return Ok(c.clone()),
            CredentialSource::WebIdentity(w) => w,
        };
        if let Some(fresh) = self.fresh(SystemTime::now()) {
            return Ok(fresh);
        }
        // Dropped at any await, the guard is released and another caller
        // renews: nothing is left half done.
        let _one = self.renewing.lock().await;
        let now = SystemTime::now();
        if let Some(fresh) = self.fresh(now) {
            return Ok(fresh);
        }
        let usable = self.usable(now);
        let waiting = self
            .not_before
            .lock()
            .map(|t| t.is_some_and(|t| Instant::now() < t))
            .unwrap_or(false);
        if let (Some(usable), true) = (&usable, waiting) {
            return Ok(usable.clone());
        }
        match assume_role(&self.http, identity).await {
            Ok(held) => {
                let credentials = held.credentials.clone();
                let lifetime = held
                    .expires
                    .duration_since(held.fetched)
                    .unwrap_or_default();
                tracing::info!(
                    role = %identity.role_arn,
                    valid_for_s = lifetime.as_secs(),
                    service = self.service,
                    "credentials had from STS (web identity)"
                );
                if lifetime / 2 < self.presign_expiry {
                    // S3 refuses a presigned URL once its credentials expired.
                    tracing::warn!(
                        role = %identity.role_arn,
                        credentials_valid_for_s = lifetime.as_secs(),
                        presigned_url_expiry_s = self.presign_expiry.as_secs(),
                        "the role's credentials live less than twice S3__PresignedUrlExpiry: a presigned URL may stop working before its announced expiry (lower S3__PresignedUrlExpiry or raise the role's session duration)"
                    );
                }
                if let Ok(mut slot) = self.held.write() {
                    *slot = Some(held);
                }
                Ok(credentials)
            }
            Err(e) => match usable {
                Some(usable) => {
                    tracing::warn!(error = %e, service = self.service, "cannot renew the credentials yet; the held ones are still valid");
                    if let Ok(mut t) = self.not_before.lock() {
                        *t = Some(Instant::now() + RETRY_RENEWAL_AFTER);
                    }
                    Ok(usable)
                }
                None => Err(e),
            },
        }
    }

    /// Whether `text` holds the secret or the session token of any
    /// credentials in use.
    pub fn revealed_in(&self, text: &str) -> bool {
        match &self.source {
            CredentialSource::Static(c) => c.revealed_in(text),
            CredentialSource::WebIdentity(_) => self
                .held
                .read()
                .ok()
                .and_then(|h| h.as_ref().map(|h| h.credentials.revealed_in(text)))
                .unwrap_or(false),
        }
    }

    /// How long before their expiry credentials are replaced: long enough
    /// for a presigned address to live its whole expiry, but never more than
    /// half their lifetime (else they would be renewed at every call).
    fn refresh_ahead(&self, held: &Held) -> Duration {
        let lifetime = held
            .expires
            .duration_since(held.fetched)
            .unwrap_or_default();
        (self.presign_expiry + MIN_REFRESH_AHEAD).min(lifetime / 2)
    }

    /// Held credentials not yet due for renewal.
    fn fresh(&self, now: SystemTime) -> Option<Credentials> {
        let held = self.held.read().ok()?;
        let held = held.as_ref()?;
        (now + self.refresh_ahead(held) < held.expires).then(|| held.credentials.clone())
    }

    /// Held credentials due for renewal but still valid a little while.
    fn usable(&self, now: SystemTime) -> Option<Credentials> {
        let held = self.held.read().ok()?;
        let held = held.as_ref()?;
        (now + Duration::from_secs(5) < held.expires).then(|| held.credentials.clone())
    }
}

/// STS error codes that say "not now".
const STS_TRANSIENT: &[&str] = &["IDPCommunicationError", "Throttling", "ServiceUnavailable"];

/// `AssumeRoleWithWebIdentity`: the role's temporary credentials for the
/// token in the file (no signature: the token is the proof).
async fn assume_role(http: &reqwest::Client, identity: &WebIdentity) -> Result<Held, AwsError> {
    let what = "STS AssumeRoleWithWebIdentity";
    let file = identity.token_file.display();
    // Any failure to read it may pass (the kubelet writes it at start and
    // rotates it); a file that never appears is named in every error.
    let token = tokio::fs::read_to_string(&identity.token_file)
        .await
        .map_err(|e| {
            AwsError::Unavailable(format!(
                "{what}: cannot read AWS_WEB_IDENTITY_TOKEN_FILE={file:?}: {e}"
            ))
        })?;
    let token = token.trim();
    if token.is_empty() {
        return Err(AwsError::Unavailable(format!(
            "{what}: AWS_WEB_IDENTITY_TOKEN_FILE={file:?} is empty"
        )));
    }
    let form = [
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", identity.role_arn.as_str()),
        ("RoleSessionName", identity.session_name.as_str()),
        ("WebIdentityToken", token),
    ];
    let body: String = form
        .iter()
        .map(|(k, v)| format!("{k}={}", crate::sigv4::encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let response = http
        .post(&identity.sts_endpoint)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/xml")
        .body(body)
        .timeout(STS_TIMEOUT)
        .send()
        .await
        .map_err(|e| transport(what, e))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| transport(what, e))?;
    if !status.is_success() {
        let code = xml::text(&text, "Code").unwrap_or_default();
        let mut said = format!("{what} answered {status}");
        if !code.is_empty() {
            said.push_str(&format!(": {code}"));
        }
        if let Some(message) = xml::text(&text, "Message").filter(|m| !m.is_empty()) {
            if !message.contains(token) {
                said.push_str(&format!(" ({message})"));
            }
        }
        said.push_str(&format!(" for AWS_ROLE_ARN={:?}", identity.role_arn));
        let transient = status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
            || STS_TRANSIENT.contains(&code.as_str());
        return Err(if transient {
            AwsError::Unavailable(said)
        } else {
            AwsError::Refused(said)
        });
    }
    let field = |name: &str| {
        xml::text(&text, name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| AwsError::Refused(format!("{what} answered no {name}")))
    };
    let credentials = Credentials {
        access_key: field("AccessKeyId")?,
        secret_key: field("SecretAccessKey")?,
        session_token: Some(field("SessionToken")?),
    };
    let expiration = field("Expiration")?;
    let expires = parse_timestamp(&expiration).ok_or_else(|| {
        AwsError::Refused(format!(
            "{what} answered an Expiration that is not a UTC time: {expiration:?}"
        ))
    })?;
    Ok(Held {
        credentials,
        expires,
        fetched: SystemTime::now(),
    })
}

/// `yyyy-mm-ddThh:mm:ss[.fff]Z`, as STS writes an expiry.
fn parse_timestamp(s: &str) -> Option<SystemTime> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let time = time.split_once('.').map_or(time, |(whole, _)| whole);
    let numbers = |s: &str, n: usize| -> Option<Vec<u64>> {
        let parts: Vec<u64> = s
            .split(['-', ':'])
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        (parts.len() == n).then_some(parts)
    };
    let (d, t) = (numbers(date, 3)?, numbers(time, 3)?);
    if !(1..=12).contains(&d[1]) || !(1..=31).contains(&d[2]) || t[0] > 23 || t[1] > 59 || t[2] > 60
    {
        return None;
    }
    let days = days_from_civil(d[0] as i64, d[1] as u32, d[2] as u32);
    let seconds = days.checked_mul(86_400)? + (t[0] * 3600 + t[1] * 60 + t[2]) as i64;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sts_expiry_times_are_read_as_utc() {
        let at = |s| {
            parse_timestamp(s)
                .unwrap()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        assert_eq!(at("1970-01-01T00:00:00Z"), 0);
        assert_eq!(at("2013-05-24T00:00:00Z"), 1_369_353_600);
        assert_eq!(at("2000-02-29T12:34:56Z"), 951_827_696);
        assert_eq!(at("2019-11-09T13:34:41.000Z"), 1_573_306_481);
        for bad in [
            "2019-11-09 13:34:41Z",
            "2019-13-09T13:34:41Z",
            "2019-11-09T13:34:41",
            "",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn sts_endpoints_follow_the_region() {
        assert_eq!(
            sts_endpoint("eu-central-1"),
            "https://sts.eu-central-1.amazonaws.com"
        );
        assert_eq!(
            sts_endpoint("cn-north-1"),
            "https://sts.cn-north-1.amazonaws.com.cn"
        );
    }

    #[test]
    fn credentials_are_renewed_ahead_by_the_presign_expiry_within_half_their_life() {
        let provider = |presign| {
            Provider::new(
                CredentialSource::WebIdentity(WebIdentity {
                    role_arn: "arn:aws:iam::1:role/vfps".into(),
                    token_file: "/nonexistent".into(),
                    session_name: "vfps".into(),
                    sts_endpoint: "http://127.0.0.1:9".into(),
                }),
                reqwest::Client::new(),
                presign,
            )
        };
        let now = SystemTime::now();
        let held = |lifetime| Held {
            credentials: Credentials {
                access_key: "ASIA".into(),
                secret_key: "s".into(),
                session_token: Some("t".into()),
            },
            fetched: now,
            expires: now + lifetime,
        };
        let hour = Duration::from_secs(3600);
        let p = provider(Duration::from_secs(900));
        assert_eq!(p.refresh_ahead(&held(hour)), Duration::from_secs(960));
        assert_eq!(
            p.refresh_ahead(&held(Duration::from_secs(4))),
            Duration::from_secs(2)
        );
        let p = provider(7 * 24 * hour);
        assert_eq!(p.refresh_ahead(&held(hour)), hour / 2);
    }
}
