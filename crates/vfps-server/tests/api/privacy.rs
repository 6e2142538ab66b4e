//! What a pseudonym reveals: a namespace whose method reveals something by
//! construction (SHA-256: its original, to anyone who can list the possible
//! ones; UUIDv7: its creation time) is made with a warning beside the
//! answer; the default method's pseudonyms are random through and through.

use reqwest::StatusCode;
use serde_json::json;
use vfps_proto::v1::NamespaceServiceCreateRequest;

use crate::helpers::{spawn_app, Backend};

async fn creating_a_revealing_namespace_says_what_it_reveals(backend: Backend) {
    let app = spawn_app(backend).await;
    for (name, method, length, warned) in [
        (
            "by-time",
            "PSEUDONYM_GENERATION_METHOD_UUID7",
            36,
            Some("creation time"),
        ),
        (
            "by-hash",
            "PSEUDONYM_GENERATION_METHOD_SHA256_HEX_ENCODED",
            64,
            Some("hash each"),
        ),
        ("random", "PSEUDONYM_GENERATION_METHOD_UUID4", 36, None),
    ] {
        let r = app
            .http_client
            .post(format!("{}/v1/namespaces", app.http))
            .json(&json!({"name": name, "pseudonymGenerationMethod": method, "pseudonymLength": length}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let warning = r
            .headers()
            .get("warning")
            .map(|v| v.to_str().unwrap().to_owned());
        match warned {
            Some(said) => {
                let w = warning.unwrap_or_else(|| panic!("{method}: no Warning header"));
                assert!(w.starts_with("299 vfps \"") && w.contains(said), "{w}");
            }
            None => assert_eq!(warning, None, "{method}"),
        }
    }
    let created = app
        .namespaces
        .clone()
        .create(NamespaceServiceCreateRequest {
            name: "by-time-grpc".into(),
            pseudonym_generation_method: 4,
            pseudonym_length: 36,
            ..Default::default()
        })
        .await
        .unwrap();
    let w = created.metadata().get("vfps-warning").expect("a warning");
    assert!(w.to_str().unwrap().contains("UUIDv7"), "{w:?}");
}

async fn default_pseudonyms_share_no_leading_tag(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("default", 1, 32).await;
    let made: Vec<String> = futures::future::join_all((0..40).map(|i| {
        let app = &app;
        async move {
            app.create("default", &format!("s-{i}"))
                .await
                .unwrap()
                .pseudonym_value
        }
    }))
    .await;
    // One replica, within milliseconds: upstream's layout (host tag, tick)
    // shared the first 6 characters and more.
    let leading: std::collections::HashSet<&str> = made.iter().map(|p| &p[..6]).collect();
    assert_eq!(leading.len(), made.len(), "{made:?}");
    assert!(made.iter().all(|p| p.len() == 54));
}

crate::on_both_backends!(
    creating_a_revealing_namespace_says_what_it_reveals,
    default_pseudonyms_share_no_leading_tag,
);
