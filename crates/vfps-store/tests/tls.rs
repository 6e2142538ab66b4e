//! TLS to a real PostgreSQL that refuses unencrypted TCP connections
//! (`hostnossl … reject`), with a certificate for `localhost` only, signed by a
//! throwaway CA: every Npgsql SSL Mode does what it says, and a connection that
//! should not be made is not.

#![allow(clippy::unwrap_used)]

use std::{path::Path, sync::OnceLock};

use vfps_store::{
    postgres::{npgsql, PgStore},
    Store,
};
use vfps_testkit::PgCluster;

struct Tls {
    cluster: PgCluster,
    ca: std::path::PathBuf,
}

fn tls() -> &'static Tls {
    static TLS: OnceLock<Tls> = OnceLock::new();
    TLS.get_or_init(|| {
        let (cluster, ca) = PgCluster::start_tls().unwrap();
        Tls { cluster, ca }
    })
}

/// A connection string for a fresh database, `Host` and TLS keywords replaced.
fn connection_string(host: &str, tls_keywords: &str) -> String {
    let db = tls().cluster.create_database().unwrap();
    format!(
        "{};{tls_keywords}",
        db.connection_string
            .replace("Host=127.0.0.1", &format!("Host={host}"))
    )
}

/// Connects and writes through the store; the error text when it cannot.
async fn works(connection_string: &str) -> Result<(), String> {
    let opts = npgsql::parse(connection_string, None, None)
        .map_err(|e| e.to_string())?
        .options;
    let store = PgStore::new(&opts).map_err(|e| e.to_string())?;
    store.migrate().await.map_err(|e| e.to_string())?;
    store.check_writable().await.map_err(|e| e.to_string())
}

fn root(path: &Path) -> String {
    format!("Root Certificate={}", path.display())
}

#[tokio::test]
async fn without_tls_the_server_refuses_the_connection() {
    let e = works(&connection_string("127.0.0.1", "SSL Mode=Disable"))
        .await
        .unwrap_err();
    assert!(e.contains("no encryption") || e.contains("pg_hba"), "{e}");
}

#[tokio::test]
async fn prefer_and_require_encrypt_without_verifying() {
    // The server rejects unencrypted connections, so success means TLS.
    works(&connection_string("127.0.0.1", "SSL Mode=Prefer"))
        .await
        .unwrap();
    works(&connection_string("127.0.0.1", "SSL Mode=Require"))
        .await
        .unwrap();
    // The default is Prefer, as in Npgsql.
    works(&connection_string("127.0.0.1", "Application Name=vfps"))
        .await
        .unwrap();
}

#[tokio::test]
async fn verify_full_checks_the_chain_and_the_host_name() {
    let ca = root(&tls().ca);
    works(&connection_string(
        "localhost",
        &format!("SSL Mode=VerifyFull;{ca}"),
    ))
    .await
    .unwrap();
    // The certificate names localhost, not 127.0.0.1.
    let e = works(&connection_string(
        "127.0.0.1",
        &format!("SSL Mode=VerifyFull;{ca}"),
    ))
    .await
    .unwrap_err();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
}

#[tokio::test]
async fn verify_ca_checks_the_chain_only() {
    let ca = root(&tls().ca);
    works(&connection_string(
        "127.0.0.1",
        &format!("SSL Mode=VerifyCA;{ca}"),
    ))
    .await
    .unwrap();
    // A certificate from another CA is refused, whatever the name.
    let other = vfps_testkit::scratch_dir("other-ca");
    let other_ca = vfps_testkit::test_ca(&other, "other").unwrap();
    for mode in ["VerifyCA", "VerifyFull"] {
        let e = works(&connection_string(
            "localhost",
            &format!("SSL Mode={mode};{}", root(&other_ca)),
        ))
        .await
        .unwrap_err();
        assert!(e.to_lowercase().contains("certificate"), "{mode}: {e}");
    }
    // Trust Server Certificate skips verification.
    works(&connection_string(
        "localhost",
        &format!(
            "SSL Mode=VerifyFull;{};Trust Server Certificate=true",
            root(&other_ca)
        ),
    ))
    .await
    .unwrap();
}

#[test]
fn tls_settings_that_cannot_work_are_refused_with_the_keyword() {
    let e = npgsql::parse("Host=a;SSL Mode=Sometimes", None, None).unwrap_err();
    assert!(e.0.contains("SSL Mode") && e.0.contains("Sometimes"), "{e}");
    let e = npgsql::parse("Host=a;SSL Certificate=/c.pem", None, None).unwrap_err();
    assert!(e.0.contains("SSL Certificate"), "{e}");
    let e = npgsql::parse("Host=a;Trust Server Certificate=maybe", None, None).unwrap_err();
    assert!(e.0.contains("Trust Server Certificate"), "{e}");
    let opts = npgsql::parse(
        "Host=a;SSL Mode=VerifyFull;Root Certificate=/nonexistent/ca.pem",
        None,
        None,
    )
    .unwrap()
    .options;
    let e = PgStore::new(&opts).err().unwrap().to_string();
    assert!(e.contains("/nonexistent/ca.pem"), "{e}");
}
