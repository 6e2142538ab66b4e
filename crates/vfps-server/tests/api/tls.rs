//! TLS on the API ports: the certificate verifies with the CA, a rotated
//! certificate is served without a restart while open connections go on, and
//! mTLS refuses a client without a certificate.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vfps_testkit::{issue_client_certificate, issue_server_certificate, test_ca};

use crate::helpers::{backend_env, Backend};

/// A server with TLS on; returns it once `/readyz` answers over TLS, and its
/// HTTP and gRPC ports.
async fn spawn_tls(
    env: Vec<(String, String)>,
    client: &reqwest::Client,
) -> (vfps_server::startup::Running, u16, u16) {
    let running = vfps_server::startup::spawn(env, vfps_server::config::Flags::default())
        .await
        .unwrap();
    let (http, grpc) = (running.http_addr.port(), running.grpc_addr.port());
    for _ in 0..200 {
        if let Ok(r) = client
            .get(format!("https://localhost:{http}/readyz"))
            .send()
            .await
        {
            if r.status().is_success() {
                return (running, http, grpc);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the TLS server never became ready");
}

struct Pki {
    dir: PathBuf,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn pki(name: &str) -> Pki {
    let dir = vfps_testkit::scratch_dir(name);
    let ca = test_ca(&dir, "ca").unwrap();
    let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
    issue_server_certificate(&dir, "ca", &cert, &key).unwrap();
    Pki { dir, ca, cert, key }
}

fn tls_env(p: &Pki) -> Vec<(String, String)> {
    let mut env = backend_env(Backend::Sqlite).0;
    env.push(("VFPS_TLS_CERT_FILE".into(), p.cert.display().to_string()));
    env.push(("VFPS_TLS_KEY_FILE".into(), p.key.display().to_string()));
    env.push(("VFPS_TLS_RELOAD_INTERVAL".into(), "200ms".into()));
    env
}

fn client_config(ca: &Path, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

/// A verified TLS connection to `port` on localhost.
async fn connect(
    ca: &Path,
    port: u16,
    alpn: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    tokio_rustls::TlsConnector::from(client_config(ca, alpn))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

fn served_certificate(s: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> Vec<u8> {
    s.get_ref().1.peer_certificates().unwrap()[0]
        .as_ref()
        .to_vec()
}

fn file_certificate(path: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(path)
        .unwrap()
        .as_ref()
        .to_vec()
}

async fn livez_on(stream: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> String {
    stream
        .write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_api_ports_speak_tls_and_a_rotated_certificate_is_served_without_a_restart() {
    let p = pki("tls-rotation");
    let client = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(&p.ca).unwrap()).unwrap(),
        )
        .build()
        .unwrap();
    // Ready, asked over verified TLS, is REST over TLS.
    let (_app, http_port, grpc_port) = spawn_tls(tls_env(&p), &client).await;
    let r = client
        .get(format!("https://localhost:{http_port}/livez"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    // Plaintext is not served.
    assert!(reqwest::get(format!("http://127.0.0.1:{http_port}/livez"))
        .await
        .is_err());
    // The gRPC port negotiates HTTP/2 over the same certificate.
    let grpc = connect(&p.ca, grpc_port, b"h2").await.unwrap();
    assert_eq!(grpc.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(served_certificate(&grpc), file_certificate(&p.cert));

    // An open connection, then a rotation in place.
    let mut open = connect(&p.ca, http_port, b"http/1.1").await.unwrap();
    assert!(livez_on(&mut open).await.starts_with("HTTP/1.1 200"));
    let old = file_certificate(&p.cert);
    let (next_cert, next_key) = (p.dir.join("next.pem"), p.dir.join("next.key"));
    issue_server_certificate(&p.dir, "ca", &next_cert, &next_key).unwrap();
    std::fs::rename(&next_key, &p.key).unwrap();
    std::fs::rename(&next_cert, &p.cert).unwrap();
    let new = file_certificate(&p.cert);
    assert_ne!(old, new);
    let mut served = old.clone();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        served = served_certificate(&connect(&p.ca, http_port, b"http/1.1").await.unwrap());
        if served == new {
            break;
        }
    }
    assert_eq!(served, new, "the rotated certificate is not served");
    // The connection opened before the rotation still works.
    assert!(livez_on(&mut open).await.starts_with("HTTP/1.1 200"));

    // A broken pair (a half-written rotation) keeps the current certificate.
    std::fs::write(&p.cert, "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let still = connect(&p.ca, http_port, b"http/1.1").await.unwrap();
    assert_eq!(served_certificate(&still), new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_a_client_without_a_certificate() {
    let p = pki("tls-mutual");
    let mut env = tls_env(&p);
    env.push(("VFPS_TLS_CLIENT_CA_FILE".into(), p.ca.display().to_string()));
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&p.ca).unwrap()).unwrap();
    let (cert, key) = (p.dir.join("client.pem"), p.dir.join("client.key"));
    issue_client_certificate(&p.dir, "ca", &cert, &key).unwrap();
    let mut pem = std::fs::read(&cert).unwrap();
    pem.extend(std::fs::read(&key).unwrap());
    let identified = reqwest::Client::builder()
        .add_root_certificate(ca.clone())
        .identity(reqwest::Identity::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let (app, http_port, _) = spawn_tls(env, &identified).await;
    let anonymous = reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .unwrap();
    // Probes send no client certificate: the metrics port (never TLS) answers
    // them.
    for path in ["/livez", "/readyz", "/healthz"] {
        let r = reqwest::get(format!("http://{}{path}", app.metrics_addr))
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
    }
    assert!(anonymous
        .get(format!("https://localhost:{http_port}/livez"))
        .send()
        .await
        .is_err());
    let r = identified
        .get(format!("https://localhost:{http_port}/livez"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}

#[tokio::test]
async fn unusable_certificate_files_stop_start_up_naming_the_file() {
    let p = pki("tls-bad");
    let mut env = tls_env(&p);
    let missing = p.dir.join("missing.pem");
    env.retain(|(k, _)| k != "VFPS_TLS_CERT_FILE");
    env.push(("VFPS_TLS_CERT_FILE".into(), missing.display().to_string()));
    let e = vfps_server::startup::spawn(env, vfps_server::config::Flags::default())
        .await
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("missing.pem"), "{e:#}");
    let mut half = backend_env(Backend::Sqlite).0;
    half.push(("VFPS_TLS_CERT_FILE".into(), p.cert.display().to_string()));
    let e = vfps_server::startup::spawn(half, vfps_server::config::Flags::default())
        .await
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("must be set together"), "{e:#}");
    // A key of another certificate: both files named.
    let (other_cert, other_key) = (p.dir.join("other.pem"), p.dir.join("other.key"));
    issue_server_certificate(&p.dir, "ca", &other_cert, &other_key).unwrap();
    let mut mismatched = tls_env(&p);
    mismatched.retain(|(k, _)| k != "VFPS_TLS_KEY_FILE");
    mismatched.push(("VFPS_TLS_KEY_FILE".into(), other_key.display().to_string()));
    let e = vfps_server::startup::spawn(mismatched, vfps_server::config::Flags::default())
        .await
        .err()
        .unwrap();
    let text = format!("{e:#}");
    assert!(
        text.contains("other.key") && text.contains("server.pem"),
        "{text}"
    );
}

/// A client CA bundle replaced while serving (a compromised CA removed, a new
/// one added) applies to the next handshakes, without a restart, even when
/// the copy keeps the old file's modification time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_client_ca_bundle_applies_without_a_restart() {
    let p = pki("tls-client-ca");
    let bundle = p.dir.join("client-ca.pem");
    let old_ca = test_ca(&p.dir, "old").unwrap();
    std::fs::copy(&old_ca, &bundle).unwrap();
    let new_ca = test_ca(&p.dir, "new").unwrap();
    let mut env = tls_env(&p);
    env.push((
        "VFPS_TLS_CLIENT_CA_FILE".into(),
        bundle.display().to_string(),
    ));
    let server_ca = reqwest::Certificate::from_pem(&std::fs::read(&p.ca).unwrap()).unwrap();
    let client_of = |ca: &str| {
        let (cert, key) = (
            p.dir.join(format!("{ca}-client.pem")),
            p.dir.join(format!("{ca}-client.key")),
        );
        issue_client_certificate(&p.dir, ca, &cert, &key).unwrap();
        let mut pem = std::fs::read(&cert).unwrap();
        pem.extend(std::fs::read(&key).unwrap());
        pem
    };
    let (old_pem, new_pem) = (client_of("old"), client_of("new"));
    // A fresh client each time: a new connection, a new handshake.
    let accepted = |pem: &[u8], port: u16| {
        let client = reqwest::Client::builder()
            .add_root_certificate(server_ca.clone())
            .identity(reqwest::Identity::from_pem(pem).unwrap())
            .build()
            .unwrap();
        async move {
            client
                .get(format!("https://localhost:{port}/livez"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        }
    };
    let first = reqwest::Client::builder()
        .add_root_certificate(server_ca.clone())
        .identity(reqwest::Identity::from_pem(&old_pem).unwrap())
        .build()
        .unwrap();
    let (_app, port, _) = spawn_tls(env, &first).await;
    assert!(accepted(&old_pem, port).await);
    assert!(!accepted(&new_pem, port).await);
    let mtime = std::fs::metadata(&bundle).unwrap().modified().unwrap();
    std::fs::copy(&new_ca, &bundle).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&bundle)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let mut swapped = false;
    for _ in 0..50 {
        if accepted(&new_pem, port).await {
            swapped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(swapped, "the new CA's clients are accepted");
    assert!(!accepted(&old_pem, port).await, "the old CA's are refused");
}
