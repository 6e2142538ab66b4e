//! The S3 object store against what only AWS does (a recording double on
//! loopback, `vfps_testkit::aws_s3`, answering as AWS documents it): empty
//! bodies with their length, session tokens and role credentials from STS,
//! 403 for a missing key without s3:ListBucket, a misspelt bucket, SSE-KMS's
//! ETags at completion, and the 10,000-part limit. What Garage shows too is
//! in `tests/s3.rs`.

#![allow(clippy::unwrap_used)]

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use vfps_jobs::{
    checkpoint::{Checkpoint, PartRecord},
    output::{self, Output},
    retry::Persist,
    storage::{
        output_key,
        s3::{CredentialSource, Credentials, S3Config, WebIdentity, S3},
        ObjectStore, StorageError, Transfer,
    },
};
use vfps_testkit::aws_s3::{AwsS3, Behaviour, Session};

fn config(double: &AwsS3, credentials: CredentialSource) -> S3Config {
    S3Config {
        service_url: double.url(),
        credentials,
        bucket: double.bucket().to_owned(),
        region: "eu-central-1".into(),
        force_path_style: true,
        presigned_url_expiry: Duration::from_secs(900),
        object_retention_days: 30,
        allowed_origins: Vec::new(),
    }
}

fn key_pair() -> CredentialSource {
    CredentialSource::Static(Credentials {
        access_key: "AKIAIOSFODNN7EXAMPLE".into(),
        secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
        session_token: None,
    })
}

async fn double(behaviour: Behaviour) -> (AwsS3, S3) {
    let double = AwsS3::start(behaviour).await;
    let s3 = S3::new(config(&double, key_pair())).unwrap();
    (double, s3)
}

async fn read_all(store: &dyn ObjectStore, key: &str) -> Vec<u8> {
    let mut stream = store.read(key, 0).await.unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

#[tokio::test]
async fn empty_bodies_are_sent_with_a_content_length_as_aws_requires() {
    let (double, s3) = double(Behaviour::new()).await;
    // A 0-byte input, an empty output's only part, and the bodiless
    // `POST ?uploads` starting it: AWS answers each 411 without a length.
    s3.put("csv-jobs/a/input.csv", Bytes::new()).await.unwrap();
    let key = output_key("a");
    let id = s3.start_multipart(&key).await.unwrap();
    let tag = s3.put_part(&key, &id, 1, Bytes::new()).await.unwrap();
    s3.complete_multipart(&key, &id, &[(1, tag)]).await.unwrap();
    s3.put_stream(
        "csv-jobs/a/through-vfps.csv",
        Box::pin(futures::stream::empty()),
        1 << 20,
    )
    .await
    .unwrap();
    assert_eq!(double.object(&key), Some(Vec::new()));
    assert_eq!(s3.size("csv-jobs/a/input.csv").await.unwrap(), Some(0));
    for r in double.requests() {
        if r.method == "PUT" || r.method == "POST" {
            assert!(
                r.header("content-length").is_some(),
                "{} {}?{} went without Content-Length",
                r.method,
                r.path,
                r.query
            );
        }
        assert!(r.status < 400, "{r:?}");
    }
}

#[tokio::test]
async fn a_session_token_is_signed_into_every_request_and_every_presigned_address() {
    let behaviour = Behaviour {
        session: Session::Fixed {
            access_key: "ASIAEXAMPLE".into(),
            token: "FwoGZXIvYXdzE/token+x=".into(),
        },
        ..Behaviour::new()
    };
    let double = AwsS3::start(behaviour).await;
    let temporary = CredentialSource::Static(Credentials {
        access_key: "ASIAEXAMPLE".into(),
        secret_key: "secret".into(),
        session_token: Some("FwoGZXIvYXdzE/token+x=".into()),
    });
    let s3 = S3::new(config(&double, temporary)).unwrap();
    s3.put("csv-jobs/b/x", Bytes::from_static(b"abc"))
        .await
        .unwrap();
    assert_eq!(s3.size("csv-jobs/b/x").await.unwrap(), Some(3));
    assert_eq!(read_all(&s3, "csv-jobs/b/x").await, b"abc");
    let url = s3
        .presign(
            Transfer::Download,
            "csv-jobs/b/x",
            Duration::from_secs(60),
            None,
        )
        .await
        .unwrap()
        .unwrap();
    assert!(
        url.contains("&X-Amz-Security-Token=FwoGZXIvYXdzE%2Ftoken%2Bx%3D&"),
        "{url}"
    );
    let got = reqwest::get(&url).await.unwrap();
    assert!(got.status().is_success(), "{}", got.status());
    assert_eq!(got.bytes().await.unwrap(), "abc");
    // The same key pair without its token is refused, as AWS refuses it.
    let bare = S3::new(config(&double, {
        CredentialSource::Static(Credentials {
            access_key: "ASIAEXAMPLE".into(),
            secret_key: "secret".into(),
            session_token: None,
        })
    }))
    .unwrap();
    let refused = bare.size("csv-jobs/b/x").await.unwrap_err();
    assert!(matches!(refused, StorageError::Refused(_)), "{refused}");
    let shown = format!("{s3:?} {refused}");
    assert!(!shown.contains("token+x"), "{shown}");
}

/// A projected service-account token, as the kubelet writes it.
fn token_file(token: &str) -> PathBuf {
    let dir = vfps_testkit::scratch_dir("web-identity");
    let file = dir.join("token");
    std::fs::write(&file, token).unwrap();
    file
}

fn web_identity(double: &AwsS3, file: PathBuf) -> CredentialSource {
    CredentialSource::WebIdentity(WebIdentity {
        role_arn: "arn:aws:iam::123456789012:role/vfps".into(),
        token_file: file,
        session_name: "vfps".into(),
        sts_endpoint: double.url(),
    })
}

#[tokio::test]
async fn a_role_s_web_identity_gives_credentials_renewed_before_they_expire() {
    let behaviour = Behaviour {
        session: Session::Sts {
            role_arn: "arn:aws:iam::123456789012:role/vfps".into(),
            web_token: "eyJhbGciOiJSUzI1NiJ9.pod".into(),
            lifetime: Duration::from_secs(4),
        },
        ..Behaviour::new()
    };
    let double = AwsS3::start(behaviour).await;
    let file = token_file("eyJhbGciOiJSUzI1NiJ9.pod\n");
    let s3 = S3::new(S3Config {
        // Shorter than the credentials' life, so renewal is by their
        // half-life here.
        presigned_url_expiry: Duration::from_secs(1),
        ..config(&double, web_identity(&double, file))
    })
    .unwrap();
    s3.put("csv-jobs/c/x", Bytes::from_static(b"abc"))
        .await
        .unwrap();
    assert_eq!(double.sts_calls(), 1);
    // Calls go on through two renewals; none is refused as expired.
    let deadline = Instant::now() + Duration::from_secs(20);
    while double.sts_calls() < 3 {
        assert_eq!(s3.size("csv-jobs/c/x").await.unwrap(), Some(3));
        assert!(Instant::now() < deadline, "no renewal within 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let requests = double.requests();
    assert!(requests.iter().all(|r| r.status < 400), "{requests:?}");
    let tokens: std::collections::BTreeSet<_> = requests
        .iter()
        .filter_map(|r| r.header("x-amz-security-token"))
        .collect();
    assert!(tokens.len() >= 2, "{tokens:?}");
    // Presigned with the current credentials, their token included.
    let url = s3
        .presign(
            Transfer::Download,
            "csv-jobs/c/x",
            Duration::from_secs(1),
            None,
        )
        .await
        .unwrap()
        .unwrap();
    assert!(
        url.contains("&X-Amz-Security-Token=session-token-"),
        "{url}"
    );
}

#[tokio::test]
async fn a_web_identity_sts_refuses_is_refused_for_good_naming_the_role() {
    let behaviour = Behaviour {
        session: Session::Sts {
            role_arn: "arn:aws:iam::123456789012:role/vfps".into(),
            web_token: "the-right-token".into(),
            lifetime: Duration::from_secs(3600),
        },
        ..Behaviour::new()
    };
    let double = AwsS3::start(behaviour).await;
    let s3 = S3::new(config(
        &double,
        web_identity(&double, token_file("another-token")),
    ))
    .unwrap();
    let error = s3.size("csv-jobs/d/x").await.unwrap_err();
    assert!(matches!(error, StorageError::Refused(_)), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("InvalidIdentityToken") && text.contains("role/vfps"),
        "{text}"
    );
    assert!(!text.contains("another-token"), "{text}");
    // A token file that is not there says which.
    let gone = S3::new(config(
        &double,
        web_identity(&double, PathBuf::from("/nonexistent/token")),
    ))
    .unwrap();
    let error = gone.size("csv-jobs/d/x").await.unwrap_err();
    assert!(error.to_string().contains("/nonexistent/token"), "{error}");
}

#[tokio::test]
async fn a_missing_key_without_list_bucket_is_a_refusal_that_names_the_permission() {
    let (_double, s3) = double(Behaviour {
        list_bucket: false,
        ..Behaviour::new()
    })
    .await;
    let error = s3.size("csv-jobs/e/input.csv").await.unwrap_err();
    assert!(matches!(error, StorageError::Refused(_)), "{error}");
    assert!(error.to_string().contains("s3:ListBucket"), "{error}");
    // Said at start-up already: a 403 to HeadBucket names every cause AWS
    // answers so, not a missing permission alone.
    let configure = s3.configure().await.unwrap_err();
    let text = configure.to_string();
    for cause in [
        "access denied",
        "wrong key",
        "expired session token",
        "clock",
        "s3:ListBucket",
    ] {
        assert!(text.contains(cause), "{cause} not named: {text}");
    }
}

#[tokio::test]
async fn a_misspelt_bucket_is_an_error_and_never_a_missing_object() {
    let double = AwsS3::start(Behaviour::new()).await;
    let s3 = S3::new(S3Config {
        bucket: "vfps-misspelt".into(),
        ..config(&double, key_pair())
    })
    .unwrap();
    // Said at start-up, with no rule to apply.
    let configure = S3::new(S3Config {
        bucket: "vfps-misspelt".into(),
        object_retention_days: 0,
        ..config(&double, key_pair())
    })
    .unwrap()
    .configure()
    .await
    .unwrap_err();
    assert!(configure.to_string().contains("S3__Bucket"), "{configure}");
    let size = s3.size("csv-jobs/f/x").await.unwrap_err();
    assert!(size.to_string().contains("does not exist"), "{size}");
    let delete = s3.delete("csv-jobs/f/x").await.unwrap_err();
    assert!(delete.to_string().contains("NoSuchBucket"), "{delete}");
    let abort = s3.abort_multipart("csv-jobs/f/x", "upload-1").await;
    assert!(matches!(abort, Err(StorageError::Refused(_))), "{abort:?}");
    let complete = s3
        .complete_multipart("csv-jobs/f/x", "upload-1", &[(1, "\"t\"".into())])
        .await
        .unwrap_err();
    assert!(matches!(complete, StorageError::Refused(_)), "{complete}");
}

fn checkpoint(upload_id: &str, parts: Vec<PartRecord>) -> Checkpoint {
    Checkpoint {
        upload_id: Some(upload_id.to_owned()),
        output_bytes: parts.iter().map(|p| p.bytes).sum(),
        parts,
        done: true,
        ..Checkpoint::default()
    }
}

#[tokio::test]
async fn with_sse_kms_a_part_uploaded_again_by_a_fenced_runner_still_completes() {
    let (double, s3) = double(Behaviour {
        kms: true,
        ..Behaviour::new()
    })
    .await;
    let persist = Persist::new(CancellationToken::new());
    let key = output_key("g");
    let id = s3.start_multipart(&key).await.unwrap();
    let one = Bytes::from_static(b"id,pseudonym\r\n1,a\r\n");
    let two = Bytes::from_static(b"2,b\r\n");
    let tag_one = s3.put_part(&key, &id, 1, one.clone()).await.unwrap();
    let tag_two = s3.put_part(&key, &id, 2, two.clone()).await.unwrap();
    // A fenced runner's late upload of the same bytes: another tag.
    let late = s3.put_part(&key, &id, 1, one.clone()).await.unwrap();
    assert_ne!(late, tag_one, "the double's KMS tags each upload anew");
    let recorded = checkpoint(
        &id,
        vec![
            PartRecord {
                number: 1,
                etag: tag_one,
                bytes: one.len() as u64,
            },
            PartRecord {
                number: 2,
                etag: tag_two,
                bytes: two.len() as u64,
            },
        ],
    );
    output::complete(&s3, &persist, "g", &recorded)
        .await
        .unwrap();
    let mut expected = one.to_vec();
    expected.extend_from_slice(&two);
    assert_eq!(double.object(&key), Some(expected));
}

#[tokio::test]
async fn a_listed_part_of_another_size_than_recorded_is_refused_at_completion() {
    let (double, s3) = double(Behaviour {
        kms: true,
        ..Behaviour::new()
    })
    .await;
    let persist = Persist::new(CancellationToken::new());
    let key = output_key("h");
    let id = s3.start_multipart(&key).await.unwrap();
    let tag = s3
        .put_part(&key, &id, 1, Bytes::from_static(b"abc"))
        .await
        .unwrap();
    // Cut elsewhere by a runner with other settings: not this job's part.
    s3.put_part(&key, &id, 1, Bytes::from_static(b"abcd"))
        .await
        .unwrap();
    let recorded = checkpoint(
        &id,
        vec![PartRecord {
            number: 1,
            etag: tag,
            bytes: 3,
        }],
    );
    let error = output::complete(&s3, &persist, "h", &recorded)
        .await
        .unwrap_err();
    assert!(matches!(error, StorageError::Refused(_)), "{error}");
    assert!(error.to_string().contains("holds 4 bytes"), "{error}");
    assert_eq!(double.object(&key), None);
}

#[tokio::test]
async fn an_output_that_needs_part_10001_fails_before_sending_it() {
    let (double, s3) = double(Behaviour::new()).await;
    let store: Arc<dyn ObjectStore> = Arc::new(s3);
    let persist = Persist::new(CancellationToken::new());
    let key = output_key("i");
    let id = store.start_multipart(&key).await.unwrap();
    // 9,999 parts uploaded already (as a checkpoint records them).
    let parts: Vec<PartRecord> = (1..=9_999)
        .map(|number| PartRecord {
            number,
            etag: format!("\"{number}\""),
            bytes: 4,
        })
        .collect();
    let resumed = Checkpoint {
        done: false,
        ..checkpoint(&id, parts)
    };
    let mut output = Output::resume(store.clone(), &persist, "i", 1, &resumed, 4)
        .await
        .unwrap();
    // Two more whole parts: part 10,000 is S3's last.
    output.write(|out, row_end| {
        for _ in 0..2 {
            out.extend_from_slice(b"abc\n");
            row_end(out);
        }
    });
    let error = output.upload_parts(&persist).await.unwrap_err();
    assert!(matches!(error, StorageError::Refused(_)), "{error}");
    assert!(
        error.to_string().contains("CsvProcessing__OutputPartSize"),
        "{error}"
    );
    let parts_sent = double
        .requests()
        .iter()
        .filter(|r| r.query.contains("partNumber="))
        .count();
    assert_eq!(parts_sent, 0, "no part went out past the limit");
}

/// `openssl s_server` on loopback with a self-signed certificate no client
/// trusts; killed when dropped.
struct UntrustedTls {
    child: std::process::Child,
    port: u16,
}

impl UntrustedTls {
    fn start() -> Self {
        let dir = vfps_testkit::scratch_dir("untrusted-tls");
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let made = std::process::Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=127.0.0.1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(made.success(), "openssl req");
        let port = vfps_testkit::free_port().unwrap();
        let child = std::process::Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let server = UntrustedTls { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "openssl s_server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }
}

impl Drop for UntrustedTls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused_at_once_with_its_cause() {
    let tls = UntrustedTls::start();
    let s3 = S3::new(S3Config {
        service_url: format!("https://127.0.0.1:{}", tls.port),
        credentials: key_pair(),
        bucket: "vfps".into(),
        region: "eu-central-1".into(),
        force_path_style: true,
        presigned_url_expiry: Duration::from_secs(900),
        object_retention_days: 30,
        allowed_origins: Vec::new(),
    })
    .unwrap();
    let started = Instant::now();
    let error = s3.size("csv-jobs/j/x").await.unwrap_err();
    // Not retried until a deadline: waiting does not make it trusted.
    assert!(!error.is_transient(), "{error}");
    assert!(
        error.to_string().to_lowercase().contains("certificate"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}
