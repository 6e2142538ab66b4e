//! The bucket's settings (`S3__*`, or AWS's own variables for credentials),
//! checked as a whole before any request: what each request's address is
//! made of, and what S3 would refuse later (an expiry past 7 days, a dotted
//! bucket as a virtual host over https, credentials that cannot sign).

use std::{fmt, time::Duration};

use super::CredentialSource;
use crate::storage::sigv4;
/// `S3__*`, as upstream names them.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// `S3__ServiceUrl`: the endpoint, e.g. `http://garage:3900`.
    pub service_url: String,
    /// `S3__AccessKey` and `S3__SecretKey` (and `S3__SessionToken`), AWS's
    /// environment variables, or a role's web identity.
    pub credentials: CredentialSource,
    /// `S3__Bucket`.
    pub bucket: String,
    /// `S3__Region` (`us-east-1`).
    pub region: String,
    /// `S3__ForcePathStyle` (true): `https://host/bucket/key` rather than
    /// `https://bucket.host/key`.
    pub force_path_style: bool,
    /// `S3__PresignedUrlExpiry` (15 minutes).
    pub presigned_url_expiry: Duration,
    /// `S3__ObjectRetentionDays` (30): the lifecycle rule expiring `csv-jobs/`;
    /// 0 leaves the bucket's lifecycle alone.
    pub object_retention_days: u32,
    /// `S3__AllowedOrigins__N`: the bucket's CORS rule for browsers; empty
    /// leaves the bucket's CORS alone.
    pub allowed_origins: Vec<String>,
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("service_url", &self.service_url)
            .field("credentials", &self.credentials)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("force_path_style", &self.force_path_style)
            .field("presigned_url_expiry", &self.presigned_url_expiry)
            .field("object_retention_days", &self.object_retention_days)
            .field("allowed_origins", &self.allowed_origins)
            .finish()
    }
}

/// Where a bucket's requests go, from its settings.
pub(super) struct Layout {
    pub(super) scheme: &'static str,
    /// `host[:port]`, the bucket in front with virtual-host addressing.
    pub(super) host: String,
    /// `/<bucket>` path-style, nothing virtual-host.
    pub(super) bucket_path: String,
}

impl S3Config {
    /// Checks every setting as [`S3::new`] does, without making a client, so
    /// configuration can refuse them before the server starts; an error
    /// names the bad setting (never a secret).
    pub fn check(&self) -> Result<(), String> {
        self.layout().map(drop)
    }

    pub(super) fn layout(&self) -> Result<Layout, String> {
        let config = self;
        let shown = &config.service_url;
        let url = reqwest::Url::parse(shown)
            .map_err(|e| format!("S3__ServiceUrl={shown:?} is not a valid URL: {e}"))?;
        if !url.username().is_empty() || url.password().is_some() {
            // Not shown: it holds a credential.
            return Err(
                "S3__ServiceUrl holds credentials; give them as S3__AccessKey and S3__SecretKey"
                    .into(),
            );
        }
        let scheme = match url.scheme() {
            "http" => "http",
            "https" => "https",
            other => {
                return Err(format!(
                    "S3__ServiceUrl={shown:?} is not valid: expected http or https, not {other}"
                ))
            }
        };
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "S3__ServiceUrl={shown:?} is not valid: expected an endpoint without a path or query, e.g. http://garage:3900"
            ));
        }
        let Some(host) = url.host_str() else {
            return Err(format!("S3__ServiceUrl={shown:?} has no host"));
        };
        let endpoint = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let bucket = &config.bucket;
        let dns_name = bucket.len() >= 3
            && bucket.len() <= 63
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if bucket.is_empty() || bucket.contains('/') {
            return Err(format!("S3__Bucket={bucket:?} is not a bucket name"));
        }
        if !config.force_path_style && !dns_name {
            return Err(format!(
                "S3__Bucket={bucket:?} cannot be a host name: set S3__ForcePathStyle=true or name the bucket in lowercase letters, digits, '-' and '.'"
            ));
        }
        if !config.force_path_style && scheme == "https" && bucket.contains('.') {
            // `a.b.host` is not matched by the store's `*.host` certificate
            // (a wildcard covers one label): every request would fail its
            // TLS handshake.
            return Err(format!(
                "S3__Bucket={bucket:?} contains '.', which cannot be a virtual host over https (a wildcard certificate for *.{host} does not match {bucket}.{host}): set S3__ForcePathStyle=true"
            ));
        }
        if config.region.is_empty() {
            return Err("S3__Region is empty".into());
        }
        check_expiry(config.presigned_url_expiry)?;
        check_credentials(&config.credentials)?;
        let (host, bucket_path) = if config.force_path_style {
            (endpoint, format!("/{}", sigv4::encode(bucket)))
        } else {
            (format!("{bucket}.{endpoint}"), String::new())
        };
        Ok(Layout {
            scheme,
            host,
            bucket_path,
        })
    }
}

/// Refuses a presigned-address expiry S3 would not honour.
fn check_expiry(expiry: Duration) -> Result<(), String> {
    if expiry > sigv4::MAX_PRESIGN || expiry.is_zero() {
        return Err(format!(
            "S3__PresignedUrlExpiry={} s is not valid: S3 takes presigned addresses valid from 1 s to 7 days (604800 s)",
            expiry.as_secs()
        ));
    }
    Ok(())
}

/// Refuses credentials that cannot sign anything, naming the setting.
fn check_credentials(source: &CredentialSource) -> Result<(), String> {
    match source {
        CredentialSource::Static(c) => {
            if c.access_key.is_empty() {
                return Err("S3__AccessKey is empty".into());
            }
            if c.secret_key.is_empty() {
                return Err("S3__SecretKey is empty".into());
            }
            if c.session_token.as_deref() == Some("") {
                return Err("S3__SessionToken is empty".into());
            }
        }
        CredentialSource::WebIdentity(w) => {
            if w.role_arn.is_empty() {
                return Err("AWS_ROLE_ARN is empty".into());
            }
            if w.token_file.as_os_str().is_empty() {
                return Err("AWS_WEB_IDENTITY_TOKEN_FILE is empty".into());
            }
            let endpoint = &w.sts_endpoint;
            let url = reqwest::Url::parse(endpoint).map_err(|e| {
                format!("AWS_ENDPOINT_URL_STS={endpoint:?} is not a valid URL: {e}")
            })?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(format!(
                    "AWS_ENDPOINT_URL_STS={endpoint:?} is not valid: expected http or https"
                ));
            }
        }
    }
    Ok(())
}
