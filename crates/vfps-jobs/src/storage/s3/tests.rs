//! What needs no bucket: settings checked, addresses built, errors
//! classified, and deadlines kept against servers that do not answer.
//! Against a real bucket: `tests/s3.rs`.

use std::time::Instant;

use futures::StreamExt;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

use super::*;

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

fn config(service_url: &str, force_path_style: bool) -> S3Config {
    S3Config {
        service_url: service_url.to_owned(),
        credentials: CredentialSource::Static(Credentials {
            access_key: "AKIAIOSFODNN7EXAMPLE".to_owned(),
            secret_key: SECRET.to_owned(),
            session_token: None,
        }),
        bucket: "vfps-jobs".to_owned(),
        region: "eu-central-1".to_owned(),
        force_path_style,
        presigned_url_expiry: Duration::from_secs(900),
        object_retention_days: 30,
        allowed_origins: vec!["https://vfps.example.org".to_owned()],
    }
}

/// `S3` at `url` with deadlines short enough for a test.
fn impatient(url: &str) -> S3 {
    let mut s3 = S3::new(config(url, true)).unwrap();
    s3.timeouts = Timeouts {
        request: Duration::from_millis(300),
        read_idle: Duration::from_millis(300),
        complete: Duration::from_millis(300),
    };
    s3
}

#[test]
fn bad_settings_are_refused_naming_them_and_never_the_secret() {
    let refused = |c: S3Config| S3::new(c).err().unwrap();
    for (url, expected) in [
        ("garage:3900", "S3__ServiceUrl=\"garage:3900\""),
        ("ftp://garage:3900", "expected http or https"),
        ("http://garage:3900/vfps", "without a path"),
        ("http://garage:3900/?x=1", "without a path"),
        ("http://key:pw@garage:3900", "holds credentials"),
    ] {
        let error = refused(config(url, true));
        assert!(error.contains(expected), "{url}: {error}");
        assert!(!error.contains(SECRET) && !error.contains("pw"), "{error}");
    }
    let upper = S3Config {
        bucket: "Jobs_Bucket".to_owned(),
        ..config("https://s3.example.org", false)
    };
    assert!(refused(upper.clone()).contains("S3__ForcePathStyle"));
    assert!(S3::new(S3Config {
        force_path_style: true,
        ..upper
    })
    .is_ok());
    let no_secret = S3Config {
        credentials: CredentialSource::Static(Credentials {
            access_key: "AKIAIOSFODNN7EXAMPLE".to_owned(),
            secret_key: String::new(),
            session_token: None,
        }),
        ..config("https://s3.example.org", true)
    };
    assert_eq!(refused(no_secret), "S3__SecretKey is empty");
}

#[test]
fn the_secret_key_is_in_no_debug_output() {
    let config = config("https://s3.example.org", true);
    let s3 = S3::new(config.clone()).unwrap();
    for shown in [format!("{config:?}"), format!("{s3:?}"), s3.describe()] {
        assert!(!shown.contains(SECRET), "{shown}");
    }
}

#[tokio::test]
async fn presigned_addresses_name_the_bucket_in_the_path_or_the_host() {
    let key = "csv-jobs/0b5e/input.csv";
    let expires = Duration::from_secs(900);
    let path_style = S3::new(config("http://127.0.0.1:3900", true)).unwrap();
    let url = path_style
        .presign(Transfer::Upload, key, expires, None)
        .await
        .unwrap()
        .unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:3900/vfps-jobs/csv-jobs/0b5e/input.csv?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F"),
        "{url}"
    );
    assert!(
        url.contains("%2Feu-central-1%2Fs3%2Faws4_request&"),
        "{url}"
    );
    assert!(url.contains("&X-Amz-Expires=900&"), "{url}");
    let virtual_host = S3::new(config("https://s3.example.org", false)).unwrap();
    let url = virtual_host
        .presign(
            Transfer::Download,
            key,
            expires,
            Some("patients pseudonymized.csv"),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(
        url.starts_with("https://vfps-jobs.s3.example.org/csv-jobs/0b5e/input.csv?X-Amz-"),
        "{url}"
    );
    assert!(
        url.contains("&response-content-disposition=attachment%3B%20filename%3D%22patients%20pseudonymized.csv%22%3B%20filename%2A%3DUTF-8%27%27patients%2520pseudonymized.csv&"),
        "{url}"
    );
    assert!(!url.contains(SECRET));
}

#[test]
fn keys_that_an_http_client_would_rewrite_are_refused() {
    let s3 = S3::new(config("https://s3.example.org", true)).unwrap();
    for key in ["", "/csv-jobs/a", "csv-jobs/../etc", "csv-jobs/./a"] {
        assert!(
            matches!(s3.key_path(key), Err(StorageError::Refused(_))),
            "{key:?}"
        );
    }
    assert_eq!(
        s3.key_path("csv-jobs/a b/input.csv").unwrap(),
        "/vfps-jobs/csv-jobs/a%20b/input.csv"
    );
}

#[test]
fn s3_errors_are_classified_by_status_and_code() {
    let s3 = S3::new(config("https://s3.example.org", true)).unwrap();
    let body = |code: &str, message: &str| {
        format!("<Error><Code>{code}</Code><Message>{message}</Message></Error>")
    };
    let error = |status: u16, body: &str| {
        s3.s3_error("PutObject", StatusCode::from_u16(status).unwrap(), body)
    };
    assert!(error(503, &body("SlowDown", "Please reduce your request rate.")).is_transient());
    assert!(error(500, "").is_transient());
    assert!(error(429, "").is_transient());
    assert!(error(400, &body("RequestTimeout", "idle")).is_transient());
    assert_eq!(
        error(404, &body("NoSuchUpload", "gone")),
        StorageError::NoSuchUpload
    );
    assert!(matches!(
        error(404, &body("NoSuchKey", "no")),
        StorageError::NotFound(_)
    ));
    let denied = error(
        403,
        &body(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match",
        ),
    );
    assert!(!denied.is_transient());
    assert_eq!(
        denied.to_string(),
        "the object store refused the request: S3 PutObject answered 403 Forbidden: SignatureDoesNotMatch (The request signature we calculated does not match)"
    );
    let leaky = error(403, &body("AccessDenied", &format!("key {SECRET}")));
    assert!(!leaky.to_string().contains(SECRET), "{leaky}");
    assert!(leaky.to_string().contains("AccessDenied"), "{leaky}");
}

#[tokio::test]
async fn a_bucket_that_accepts_and_never_answers_is_unavailable_within_the_deadline() {
    // Connections complete in the kernel's backlog; nothing ever answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let s3 = impatient(&format!("http://{}", listener.local_addr().unwrap()));
    let started = Instant::now();
    let size = s3.size("csv-jobs/a/input.csv").await;
    let read = s3.read("csv-jobs/a/input.csv", 0).await.err();
    let put = s3.put("csv-jobs/a/x", Bytes::from_static(b"x")).await;
    assert!(
        matches!(size, Err(StorageError::Unavailable(_))),
        "{size:?}"
    );
    assert!(
        matches!(read, Some(StorageError::Unavailable(_))),
        "{read:?}"
    );
    assert!(matches!(put, Err(StorageError::Unavailable(_))), "{put:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(listener);
}

#[tokio::test]
async fn a_closed_port_is_unavailable_at_once() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let s3 = S3::new(config(&format!("http://127.0.0.1:{port}"), true)).unwrap();
    let started = Instant::now();
    let error = s3.size("csv-jobs/a/input.csv").await.unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert!(
        started.elapsed() < CONNECT_TIMEOUT,
        "{:?}",
        started.elapsed()
    );
    // The error names the endpoint it could not reach (a DNS failure names
    // no address of its own), never the request's URL.
    let text = error.to_string();
    assert!(text.contains(&format!("to 127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("/vfps-jobs/csv-jobs"), "{text}");
}

/// A port that accepts and resets every connection, as a plain-HTTP server
/// may answer a TLS handshake: unavailable the first times, with the hint
/// that it may not speak TLS, then refused instead of retried for ever.
#[tokio::test]
async fn an_https_port_that_resets_the_handshake_is_named_and_refused_after_a_few() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            // SO_LINGER 0: a close sends RST, not FIN. (Deprecated for
            // blocking the thread on drop, which a zero linger does not.)
            #[allow(deprecated)]
            let _ = stream.set_linger(Some(Duration::ZERO));
            drop(stream);
        }
    });
    let s3 = S3::new(config(&format!("https://127.0.0.1:{port}"), true)).unwrap();
    let mut errors = Vec::new();
    for _ in 0..request::MAX_HANDSHAKE_RESETS {
        errors.push(s3.configure().await.unwrap_err());
    }
    for e in &errors[..errors.len() - 1] {
        assert!(e.is_transient(), "{e}");
        assert!(e.to_string().contains("does 127.0.0.1:"), "{e}");
        assert!(e.to_string().contains("speak TLS"), "{e}");
    }
    let last = errors.last().unwrap();
    assert!(matches!(last, StorageError::Refused(_)), "{last}");
    assert!(last.to_string().contains("in a row were reset"), "{last}");
}

#[tokio::test]
async fn a_read_that_stalls_mid_body_fails_transiently_and_says_so() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let s3 = impatient(&format!("http://{}", listener.local_addr().unwrap()));
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "the client hung up before its request ended");
            request.extend_from_slice(&buf[..n]);
        }
        socket
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
            .await
            .unwrap();
        // Holds the connection open, sending nothing more.
        std::future::pending::<()>().await;
    });
    let mut stream = s3.read("csv-jobs/a/input.csv", 0).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        Bytes::from_static(b"abc")
    );
    let started = Instant::now();
    let stalled = stream.next().await.unwrap().unwrap_err();
    assert!(stalled.is_transient(), "{stalled}");
    assert!(stalled.to_string().contains("no bytes for"), "{stalled}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        stream.next().await.is_none(),
        "the stream ends after its error"
    );
}

#[test]
fn a_dotted_bucket_cannot_be_a_virtual_host_over_https() {
    let dotted = |url: &str, path_style| S3Config {
        bucket: "vfps.jobs.example".to_owned(),
        ..config(url, path_style)
    };
    let error = S3::new(dotted("https://s3.eu-central-1.amazonaws.com", false))
        .err()
        .unwrap();
    assert!(
        error.contains("S3__Bucket=\"vfps.jobs.example\"")
            && error.contains("S3__ForcePathStyle=true"),
        "{error}"
    );
    // Path style, or no TLS whose certificate could fail: fine.
    assert!(S3::new(dotted("https://s3.eu-central-1.amazonaws.com", true)).is_ok());
    assert!(S3::new(dotted("http://minio:9000", false)).is_ok());
}

#[test]
fn a_presigned_url_expiry_past_seven_days_is_refused_naming_it() {
    let long = S3Config {
        presigned_url_expiry: Duration::from_secs(7 * 86_400 + 1),
        ..config("https://s3.example.org", true)
    };
    let error = S3::new(long).err().unwrap();
    assert!(
        error.contains("S3__PresignedUrlExpiry=604801 s") && error.contains("7 days"),
        "{error}"
    );
    let week = S3Config {
        presigned_url_expiry: Duration::from_secs(7 * 86_400),
        ..config("https://s3.example.org", true)
    };
    assert!(S3::new(week).is_ok());
}

#[test]
fn the_download_name_is_given_in_rfc_6266_s_safe_form() {
    assert_eq!(
        content_disposition("input-pseudonymized.csv"),
        "attachment; filename=\"input-pseudonymized.csv\"; filename*=UTF-8''input-pseudonymized.csv"
    );
    // Non-ASCII, quotes, CR/LF: never raw in the header.
    let hostile = "Müller \"a\"\r\nSet-Cookie: x=1;\\%.csv";
    let header = content_disposition(hostile);
    assert_eq!(
        header,
        "attachment; filename=\"M_ller _a___Set-Cookie: x=1;__.csv\"; \
         filename*=UTF-8''M%C3%BCller%20%22a%22%0D%0ASet-Cookie%3A%20x%3D1%3B%5C%25.csv"
    );
    assert!(header.is_ascii() && !header.contains(['\r', '\n']));
}

#[tokio::test]
async fn a_bucket_in_another_region_is_refused_naming_its_region() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let s3 = impatient(&format!("http://{}", listener.local_addr().unwrap()));
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "the client hung up before its request ended");
            request.extend_from_slice(&buf[..n]);
        }
        // As AWS answers a HEAD for a bucket of another region: no body.
        socket
            .write_all(b"HTTP/1.1 301 Moved Permanently\r\nx-amz-bucket-region: eu-west-3\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
    });
    let error = s3.size("csv-jobs/a/input.csv").await.unwrap_err();
    assert!(!error.is_transient(), "{error}");
    assert!(
        error.to_string().contains("\"eu-west-3\"") && error.to_string().contains("S3__Region"),
        "{error}"
    );
}
