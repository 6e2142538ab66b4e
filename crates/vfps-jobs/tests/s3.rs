//! The S3 object store against a real S3 server (one Garage node per test):
//! objects, ranged reads, multipart uploads as the runner uses them, prefix
//! deletion across listing pages, presigned transfers by a plain client, the
//! bucket's rules, and the errors a runner must tell apart.

#![allow(clippy::unwrap_used)]

use std::{
    process::Command,
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::StreamExt;
use vfps_jobs::storage::{
    s3::{CredentialSource, Credentials, S3Config, REQUEST_TIMEOUT, S3},
    ByteStream, ListedPart, ObjectStore, StorageError, Transfer,
};
use vfps_testkit::garage::Garage;

const ORIGIN: &str = "https://vfps.example.org";

fn config(garage: &Garage) -> S3Config {
    S3Config {
        service_url: garage.s3_url(),
        credentials: CredentialSource::Static(Credentials {
            access_key: garage.access_key().to_owned(),
            secret_key: garage.secret_key().to_owned(),
            session_token: None,
        }),
        bucket: garage.bucket().to_owned(),
        region: garage.region().to_owned(),
        force_path_style: true,
        presigned_url_expiry: Duration::from_secs(900),
        object_retention_days: 30,
        allowed_origins: vec![ORIGIN.to_owned()],
    }
}

async fn bucket() -> (Garage, S3) {
    let garage = Garage::start().await;
    let s3 = S3::new(config(&garage)).unwrap();
    (garage, s3)
}

async fn read_all(store: &S3, key: &str, offset: u64) -> Vec<u8> {
    let mut stream = store.read(key, offset).await.unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

/// Bytes that differ at every offset, so a misplaced range shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn chunks(data: &[u8], size: usize) -> ByteStream {
    let chunks: Vec<_> = data
        .chunks(size)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(chunks))
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
async fn objects_are_written_sized_read_from_an_offset_and_deleted() {
    let (_garage, s3) = bucket().await;
    // A key that needs encoding, as any key may.
    let key = "csv-jobs/a/ü x+y=(1).csv";
    s3.put(key, Bytes::from_static(b"hello")).await.unwrap();
    assert_eq!(s3.size(key).await.unwrap(), Some(5));
    assert_eq!(read_all(&s3, key, 0).await, b"hello");
    assert_eq!(read_all(&s3, key, 2).await, b"llo");
    // At or past the end: nothing, as from a file.
    assert_eq!(read_all(&s3, key, 5).await, b"");
    assert_eq!(read_all(&s3, key, 9).await, b"");
    let big = pattern(3 * 1024 * 1024 + 17);
    s3.put("csv-jobs/a/big", Bytes::from(big.clone()))
        .await
        .unwrap();
    assert_eq!(
        read_all(&s3, "csv-jobs/a/big", 1_000_003).await,
        &big[1_000_003..]
    );

    assert_eq!(s3.size("csv-jobs/a/missing").await.unwrap(), None);
    let missing = s3.read("csv-jobs/a/missing", 0).await.err().unwrap();
    assert!(
        matches!(missing, StorageError::NotFound(ref m) if m.contains("NoSuchKey")),
        "{missing}"
    );
    s3.delete(key).await.unwrap();
    assert_eq!(s3.size(key).await.unwrap(), None);
    s3.delete(key).await.unwrap();
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
async fn an_upload_through_vfps_is_stored_whole_or_not_at_all() {
    let (_garage, s3) = bucket().await;
    let small = pattern(100_000);
    let stored = s3
        .put_stream("csv-jobs/b/small.csv", chunks(&small, 7_000), 1 << 30)
        .await
        .unwrap();
    assert_eq!(stored, small.len() as u64);
    assert_eq!(read_all(&s3, "csv-jobs/b/small.csv", 0).await, small);
    // Larger than a part: a multipart upload.
    let large = pattern(17 * 1024 * 1024 + 5);
    let stored = s3
        .put_stream("csv-jobs/b/large.csv", chunks(&large, 300_000), 1 << 30)
        .await
        .unwrap();
    assert_eq!(stored, large.len() as u64);
    assert_eq!(read_all(&s3, "csv-jobs/b/large.csv", 0).await, large);
    let refused = s3
        .put_stream(
            "csv-jobs/b/over.csv",
            chunks(&large, 300_000),
            10 * 1024 * 1024,
        )
        .await;
    assert_eq!(
        refused,
        Err(StorageError::TooLarge {
            limit: 10 * 1024 * 1024
        })
    );
    assert_eq!(s3.size("csv-jobs/b/over.csv").await.unwrap(), None);
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
async fn a_multipart_upload_appears_whole_and_a_part_uploaded_twice_keeps_its_tag() {
    let (_garage, s3) = bucket().await;
    let key = "csv-jobs/c/output.csv";
    let id = s3.start_multipart(key).await.unwrap();
    let first = Bytes::from(pattern(6 * 1024 * 1024));
    let one = s3.put_part(key, &id, 1, first.clone()).await.unwrap();
    // A fenced runner uploading the same part late: the same tag here (MD5;
    // under SSE-KMS another, see tests/s3_aws.rs).
    let again = s3.put_part(key, &id, 1, first.clone()).await.unwrap();
    assert_eq!(one, again);
    let two = s3
        .put_part(key, &id, 2, Bytes::from_static(b"the end"))
        .await
        .unwrap();
    // What a completion refused for a changed tag lists.
    assert_eq!(
        s3.list_parts(key, &id).await.unwrap(),
        [
            ListedPart {
                number: 1,
                etag: one.clone(),
                bytes: first.len() as u64
            },
            ListedPart {
                number: 2,
                etag: two.clone(),
                bytes: 7
            },
        ]
    );
    assert_eq!(s3.size(key).await.unwrap(), None);
    let wrong = [(1, one.clone()), (2, one.clone())];
    let refused = s3.complete_multipart(key, &id, &wrong).await.unwrap_err();
    assert!(!refused.is_transient(), "{refused}");
    assert_eq!(s3.size(key).await.unwrap(), None);
    let parts = [(1, one.clone()), (2, two)];
    s3.complete_multipart(key, &id, &parts).await.unwrap();
    let mut expected = first.to_vec();
    expected.extend_from_slice(b"the end");
    assert_eq!(s3.size(key).await.unwrap(), Some(expected.len() as u64));
    assert_eq!(read_all(&s3, key, 0).await, expected);
    // Completed already (by a runner before it crashed): told apart, so the
    // runner checks the object's size instead.
    assert_eq!(
        s3.complete_multipart(key, &id, &parts).await,
        Err(StorageError::NoSuchUpload)
    );
    s3.abort_multipart(key, &id).await.unwrap();

    let dropped = s3.start_multipart("csv-jobs/c/dropped.csv").await.unwrap();
    s3.put_part("csv-jobs/c/dropped.csv", &dropped, 1, first)
        .await
        .unwrap();
    s3.abort_multipart("csv-jobs/c/dropped.csv", &dropped)
        .await
        .unwrap();
    assert_eq!(
        s3.complete_multipart("csv-jobs/c/dropped.csv", &dropped, &[(1, one)])
            .await,
        Err(StorageError::NoSuchUpload)
    );
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
async fn deleting_a_prefix_deletes_every_page_of_it_and_nothing_else() {
    let (_garage, s3) = bucket().await;
    let s3 = s3.with_list_page_keys(7);
    for i in 0..30 {
        s3.put(
            &format!("csv-jobs/d/segments/{i:03}"),
            Bytes::from_static(b"x"),
        )
        .await
        .unwrap();
    }
    s3.put("csv-jobs/d/input.csv", Bytes::from_static(b"x"))
        .await
        .unwrap();
    s3.put("csv-jobs/dd/input.csv", Bytes::from_static(b"kept"))
        .await
        .unwrap();
    s3.delete_prefix("csv-jobs/d/").await.unwrap();
    for i in [0, 6, 7, 29] {
        let key = format!("csv-jobs/d/segments/{i:03}");
        assert_eq!(s3.size(&key).await.unwrap(), None, "{key}");
    }
    assert_eq!(s3.size("csv-jobs/d/input.csv").await.unwrap(), None);
    assert_eq!(s3.size("csv-jobs/dd/input.csv").await.unwrap(), Some(4));
    s3.delete_prefix("csv-jobs/nothing/").await.unwrap();
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
async fn a_plain_client_uploads_and_downloads_through_presigned_addresses() {
    let (_garage, s3) = bucket().await;
    let key = "csv-jobs/e/input.csv";
    let expires = Duration::from_secs(300);
    let client = reqwest::Client::new();
    let upload = s3
        .presign(Transfer::Upload, key, expires, None)
        .await
        .unwrap()
        .unwrap();
    let put = client
        .put(&upload)
        .header("content-type", "text/csv")
        .body("id,name\r\n1,a\r\n")
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());
    assert_eq!(s3.size(key).await.unwrap(), Some(14));
    let download = s3
        .presign(
            Transfer::Download,
            key,
            expires,
            Some("input-pseudonymized.csv"),
        )
        .await
        .unwrap()
        .unwrap();
    let got = client.get(&download).send().await.unwrap();
    assert!(got.status().is_success(), "{}", got.status());
    assert_eq!(
        got.headers()["content-disposition"],
        "attachment; filename=\"input-pseudonymized.csv\"; filename*=UTF-8''input-pseudonymized.csv"
    );
    assert_eq!(got.bytes().await.unwrap(), "id,name\r\n1,a\r\n");
    // The signature covers the method and the key.
    let tampered = download.replace("input.csv", "other.csv");
    let refused = client.get(&tampered).send().await.unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::FORBIDDEN);
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
async fn a_download_name_with_non_ascii_and_line_breaks_reaches_the_client_safely() {
    let (_garage, s3) = bucket().await;
    let key = "csv-jobs/e2/output.csv";
    s3.put(key, Bytes::from_static(b"id\r\n")).await.unwrap();
    let name = "Müller \"Studie\"\r\nSet-Cookie: x=1-pseudonymized.csv";
    let url = s3
        .presign(Transfer::Download, key, Duration::from_secs(60), Some(name))
        .await
        .unwrap()
        .unwrap();
    let got = reqwest::get(&url).await.unwrap();
    assert!(got.status().is_success(), "{}", got.status());
    assert!(got.headers().get("set-cookie").is_none());
    assert_eq!(
        got.headers()["content-disposition"],
        "attachment; filename=\"M_ller _Studie___Set-Cookie: x=1-pseudonymized.csv\"; \
         filename*=UTF-8''M%C3%BCller%20%22Studie%22%0D%0ASet-Cookie%3A%20x%3D1-pseudonymized.csv"
    );
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
async fn a_misspelt_bucket_is_an_error_and_never_a_missing_object() {
    let garage = Garage::start().await;
    let s3 = S3::new(S3Config {
        bucket: format!("{}-misspelt", garage.bucket()),
        ..config(&garage)
    })
    .unwrap();
    let size = s3.size("csv-jobs/m/output.csv").await.unwrap_err();
    assert!(matches!(size, StorageError::Refused(_)), "{size}");
    assert!(size.to_string().contains("S3__Bucket"), "{size}");
    let delete = s3.delete("csv-jobs/m/output.csv").await;
    assert!(
        matches!(delete, Err(StorageError::Refused(_))),
        "{delete:?}"
    );
    let read = s3.read("csv-jobs/m/input.csv", 0).await.err().unwrap();
    assert!(matches!(read, StorageError::Refused(_)), "{read}");
    // Said at start-up already.
    let configure = s3.configure().await.unwrap_err();
    assert!(configure.to_string().contains("S3__Bucket"), "{configure}");
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
async fn the_bucket_takes_the_lifecycle_and_cors_rules() {
    let (garage, s3) = bucket().await;
    s3.configure().await.unwrap();
    // Applying them again (a restart, another replica) is fine.
    s3.configure().await.unwrap();
    // A browser on the allowed origin may PUT to a presigned address.
    let url = s3
        .presign(
            Transfer::Upload,
            "csv-jobs/f/input.csv",
            Duration::from_secs(60),
            None,
        )
        .await
        .unwrap()
        .unwrap();
    let preflight = |origin: &'static str| {
        reqwest::Client::new()
            .request(reqwest::Method::OPTIONS, &url)
            .header("origin", origin)
            .header("access-control-request-method", "PUT")
            .header("access-control-request-headers", "content-type")
            .send()
    };
    let allowed = preflight(ORIGIN).await.unwrap();
    assert!(allowed.status().is_success(), "{}", allowed.status());
    assert_eq!(allowed.headers()["access-control-allow-origin"], ORIGIN);
    let other = preflight("https://elsewhere.example.org").await.unwrap();
    // Refused (Garage marks even its errors `*`, so the status says it).
    assert_eq!(other.status(), reqwest::StatusCode::FORBIDDEN);
    // Nothing to apply: only the bucket is checked.
    let bare = S3::new(S3Config {
        object_retention_days: 0,
        allowed_origins: Vec::new(),
        ..config(&garage)
    })
    .unwrap();
    bare.configure().await.unwrap();
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
async fn a_wrong_secret_is_refused_for_good_naming_s3_s_code_and_not_the_secret() {
    let garage = Garage::start().await;
    let wrong = format!("{}0", garage.secret_key());
    let s3 = S3::new(S3Config {
        credentials: CredentialSource::Static(Credentials {
            access_key: garage.access_key().to_owned(),
            secret_key: wrong.clone(),
            session_token: None,
        }),
        ..config(&garage)
    })
    .unwrap();
    let error = s3
        .put("csv-jobs/g/x", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert!(matches!(error, StorageError::Refused(_)), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("403") && text.contains("AccessDenied"),
        "{text}"
    );
    assert!(
        !text.contains(&wrong) && !text.contains(garage.secret_key()),
        "{text}"
    );
    let head = s3.size("csv-jobs/g/x").await.unwrap_err();
    assert!(!head.is_transient(), "{head}");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable_within_seconds() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let s3 = S3::new(S3Config {
        service_url: format!("http://127.0.0.1:{port}"),
        credentials: CredentialSource::Static(Credentials {
            access_key: "GK0".into(),
            secret_key: "secret".into(),
            session_token: None,
        }),
        bucket: "vfps".into(),
        region: "garage".into(),
        force_path_style: true,
        presigned_url_expiry: Duration::from_secs(900),
        object_retention_days: 30,
        allowed_origins: Vec::new(),
    })
    .unwrap();
    let started = Instant::now();
    for error in [
        s3.size("csv-jobs/h/x").await.unwrap_err(),
        s3.read("csv-jobs/h/x", 0).await.err().unwrap(),
        s3.configure().await.unwrap_err(),
    ] {
        assert!(error.is_transient(), "{error}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A process stopped (SIGSTOP) until dropped, so a failed test leaves no
/// paused server behind.
struct Paused(u32);

impl Paused {
    /// Stops `pid` and waits until the kernel says it is stopped.
    fn new(pid: u32) -> Self {
        signal("-STOP", pid);
        let paused = Paused(pid);
        until_state(pid, true);
        paused
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal("-CONT", self.0);
        until_state(self.0, false);
    }
}

fn signal(which: &str, pid: u32) {
    let status = Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {which} {pid}");
}

/// Waits (up to 5 s) until `pid` is stopped, or running again.
fn until_state(pid: u32, stopped: bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // `pid (comm) S …`: the state follows the command's closing parenthesis.
        let state = stat.rsplit_once(") ").unwrap().1.chars().next().unwrap();
        if (state == 'T') == stopped {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} still in state {state}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
#[ignore = "needs Garage (scripts/install-garage.sh); run by ./scripts/test.sh"]
async fn a_paused_bucket_is_unavailable_within_the_request_timeout_and_back_after() {
    let (garage, s3) = bucket().await;
    s3.put("csv-jobs/i/x", Bytes::from_static(b"x"))
        .await
        .unwrap();
    let paused = Paused::new(garage.pid());
    let started = Instant::now();
    let error = s3.size("csv-jobs/i/x").await.unwrap_err();
    let waited = started.elapsed();
    assert!(error.is_transient(), "{error}");
    assert!(
        waited >= REQUEST_TIMEOUT && waited < REQUEST_TIMEOUT + Duration::from_secs(3),
        "{waited:?}"
    );
    drop(paused);
    assert_eq!(s3.size("csv-jobs/i/x").await.unwrap(), Some(1));
}
