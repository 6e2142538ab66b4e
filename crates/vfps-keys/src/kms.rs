//! `aws-kms:KEY-ARN` — envelope encryption under an AWS KMS key: a
//! namespace's data keys are made by KMS (`GenerateDataKey`, AES-256) and
//! kept wrapped, opened by `Decrypt`; the KMS key never leaves KMS. Each
//! call carries an encryption context binding the wrapped key to its
//! purpose, namespace and version (KMS refuses it anywhere else).
//!
//! Credentials come from AWS's chain, as the jobs' S3 client takes them
//! (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, or a web identity through
//! STS: IRSA). The endpoint is `AWS_ENDPOINT_URL_KMS`, else
//! `AWS_ENDPOINT_URL`, else the key's region's.

use std::time::{Duration, SystemTime};

use base64::Engine;
use serde_json::{json, Value};
use vfps_aws::{
    credentials::{CredentialSource, Provider},
    sigv4::{self, Signer},
    AwsError,
};
use vfps_core::Error;

use crate::{wrap::Wrap, KEY_LEN};

/// A KMS call not answered within this is not answered.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// A KMS that does not accept a connection within this is down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A parsed `aws-kms:` source.
#[derive(Clone, PartialEq, Eq)]
pub struct KmsSettings {
    /// The key's ARN (`arn:aws:kms:<region>:<account>:key/<id>` or an
    /// alias ARN).
    pub key: String,
    pub region: String,
    pub endpoint: String,
    pub credentials: CredentialSource,
}

impl std::fmt::Debug for KmsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KmsSettings")
            .field("key", &self.key)
            .field("endpoint", &self.endpoint)
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// KMS's endpoint in `region` (China's partition has its own domain).
fn endpoint_of(region: &str) -> String {
    let domain = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://kms.{region}.{domain}")
}

impl KmsSettings {
    /// Parses the key ARN after `aws-kms:`, the rest from the environment
    /// `get` reads.
    pub fn parse(arn: &str, get: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let usage = "aws-kms:arn:aws:kms:<region>:<account>:key/<key id>";
        let parts: Vec<&str> = arn.trim().splitn(6, ':').collect();
        let region = match parts.as_slice() {
            ["arn", partition, "kms", region, account, resource]
                if !partition.is_empty()
                    && !region.is_empty()
                    && !account.is_empty()
                    && (resource.starts_with("key/") || resource.starts_with("alias/")) =>
            {
                (*region).to_owned()
            }
            _ => {
                return Err(format!(
                    "VFPS_KEYS=aws-kms:{arn} is not a KMS key ARN ({usage})"
                ))
            }
        };
        let mut errors = Vec::new();
        let credentials = vfps_aws::credentials::from_environment(get, &region, &mut errors);
        if !errors.is_empty() {
            return Err(format!("VFPS_KEYS=aws-kms: {}", errors.join("; ")));
        }
        let credentials = credentials.ok_or_else(|| {
            "VFPS_KEYS=aws-kms: needs AWS credentials: AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY, or AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN"
                .to_owned()
        })?;
        let endpoint = get("AWS_ENDPOINT_URL_KMS")
            .or_else(|| get("AWS_ENDPOINT_URL"))
            .filter(|e| !e.trim().is_empty())
            .map_or_else(
                || endpoint_of(&region),
                |e| e.trim().trim_end_matches('/').to_owned(),
            );
        Ok(Self {
            key: arn.trim().to_owned(),
            region,
            endpoint,
            credentials,
        })
    }

    /// The source opened (no call made yet: the keyring's check is the
    /// first, and says why it fails).
    pub fn open(&self) -> Result<Kms, Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| Error::internal(format!("the KMS client: {e}")))?;
        let url = reqwest::Url::parse(&self.endpoint).map_err(|e| {
            Error::failed_precondition(format!("the KMS endpoint {}: {e}", self.endpoint))
        })?;
        let host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            (None, _) => {
                return Err(Error::failed_precondition(format!(
                    "the KMS endpoint {} names no host",
                    self.endpoint
                )))
            }
        };
        Ok(Kms {
            provider: Provider::new(self.credentials.clone(), http.clone(), Duration::ZERO)
                .for_service("KMS"),
            signer: Signer::for_service(&self.region, "kms"),
            http,
            host,
            settings: self.clone(),
        })
    }
}

/// An AWS KMS key, through its API.
pub struct Kms {
    settings: KmsSettings,
    signer: Signer,
    provider: Provider,
    http: reqwest::Client,
    host: String,
}

/// KMS error types that say "not now".
const TRANSIENT: &[&str] = &[
    "ThrottlingException",
    "KMSInternalException",
    "DependencyTimeoutException",
    "LimitExceededException",
];

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

impl Kms {
    /// One call of KMS's JSON API (`TrentService.<action>`), signed.
    async fn call(&self, action: &str, body: Value) -> Result<Value, Error> {
        let what = format!("KMS {action}");
        let credentials = self.provider.current().await.map_err(|e| aws(&what, e))?;
        let body = body.to_string().into_bytes();
        let target = format!("TrentService.{action}");
        let headers = [
            ("content-type", "application/x-amz-json-1.1".to_owned()),
            ("x-amz-target", target.clone()),
        ];
        let signed = self.signer.sign(
            &credentials,
            &sigv4::Request {
                method: "POST",
                host: &self.host,
                path: "/",
                query: &[],
                headers: &headers,
            },
            &sigv4::payload_hash(&body),
            SystemTime::now(),
        );
        let mut request = self
            .http
            .post(format!("{}/", self.settings.endpoint))
            .timeout(CALL_TIMEOUT)
            .body(body);
        for (name, value) in headers.iter().map(|(n, v)| (*n, v.clone())).chain(signed) {
            request = request.header(name, value);
        }
        let response = request
            .send()
            .await
            .map_err(|e| aws(&what, vfps_aws::transport(&what, e)))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| aws(&what, vfps_aws::transport(&what, e)))?;
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(answer);
        }
        // `__type` is `[namespace#]ExceptionName`.
        let kind = answer["__type"]
            .as_str()
            .map(|t| t.rsplit('#').next().unwrap_or(t).to_owned())
            .unwrap_or_default();
        let message = answer["message"]
            .as_str()
            .or_else(|| answer["Message"].as_str())
            .unwrap_or_default();
        let mut said = format!("{what} answered {status}");
        if !kind.is_empty() {
            said.push_str(&format!(": {kind}"));
        }
        if !message.is_empty() && !credentials.revealed_in(message) {
            said.push_str(&format!(" ({message})"));
        }
        said.push_str(&format!(" for key {}", self.settings.key));
        Err(
            if status.is_server_error() || TRANSIENT.contains(&kind.as_str()) {
                Error::unavailable(said)
            } else {
                Error::failed_precondition(said)
            },
        )
    }

    /// The encryption context of a wrapped key (KMS binds the ciphertext to
    /// it): its purpose, namespace and version, as `key_context` made them.
    fn context(context: &[u8]) -> Value {
        json!({"vfps-key": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(context)})
    }

    fn key_of(&self, answer: &Value, field: &str) -> Result<[u8; KEY_LEN], Error> {
        answer[field]
            .as_str()
            .and_then(|p| b64().decode(p).ok())
            .and_then(|p| <[u8; KEY_LEN]>::try_from(p).ok())
            .ok_or_else(|| {
                Error::internal(format!(
                    "KMS answered no {KEY_LEN}-byte {field} for key {}",
                    self.settings.key
                ))
            })
    }

    fn blob_of(&self, answer: &Value) -> Result<Vec<u8>, Error> {
        answer["CiphertextBlob"]
            .as_str()
            .and_then(|c| b64().decode(c).ok())
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                Error::internal(format!(
                    "KMS answered no CiphertextBlob for key {}",
                    self.settings.key
                ))
            })
    }
}

fn aws(what: &str, e: AwsError) -> Error {
    match e {
        AwsError::Unavailable(text) => Error::unavailable(text),
        AwsError::Refused(text) => Error::failed_precondition(format!("{what}: {text}")),
    }
}

#[async_trait::async_trait]
impl Wrap for Kms {
    fn key_id(&self) -> String {
        self.settings.key.clone()
    }

    async fn generate(&self, context: &[u8]) -> Result<([u8; KEY_LEN], Vec<u8>), Error> {
        let answer = self
            .call(
                "GenerateDataKey",
                json!({"KeyId": self.settings.key, "KeySpec": "AES_256",
                       "EncryptionContext": Self::context(context)}),
            )
            .await?;
        Ok((self.key_of(&answer, "Plaintext")?, self.blob_of(&answer)?))
    }

    async fn wrap(&self, key: &[u8; KEY_LEN], context: &[u8]) -> Result<Vec<u8>, Error> {
        let answer = self
            .call(
                "Encrypt",
                json!({"KeyId": self.settings.key, "Plaintext": b64().encode(key),
                       "EncryptionContext": Self::context(context)}),
            )
            .await?;
        self.blob_of(&answer)
    }

    async fn unwrap(&self, wrapped: &[u8], context: &[u8]) -> Result<[u8; KEY_LEN], Error> {
        let answer = self
            .call(
                "Decrypt",
                json!({"KeyId": self.settings.key, "CiphertextBlob": b64().encode(wrapped),
                       "EncryptionContext": Self::context(context)}),
            )
            .await
            .map_err(|e| match e.kind {
                vfps_core::ErrorKind::Unavailable => e,
                _ => Error::failed_precondition(format!(
                    "a data key does not unwrap under KMS key {} (altered, or wrapped for \
                     another namespace): {}",
                    self.settings.key, e.message
                )),
            })?;
        self.key_of(&answer, "Plaintext")
    }

    fn describe(&self) -> String {
        format!(
            "AWS KMS key {} at {}",
            self.settings.key, self.settings.endpoint
        )
    }
}
