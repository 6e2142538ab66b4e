//! The browser probe, in a real headless Chromium: against a real vfps its
//! steps pass the UI's checker; against a broken page (a form whose result
//! is wrong, a page that fails) they fail it.

#![allow(clippy::unwrap_used)]

use std::{path::PathBuf, time::Duration};

use axum::{
    response::{Html, IntoResponse},
    routing::get,
    Router,
};
use vfps_chaos::{
    checker::{ui, Budgets, Property, Validity},
    workload::ui::UiProbe,
};
use vfps_server::{config::Flags, startup};

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/ui")
}

fn probe(address: String) -> UiProbe {
    UiProbe {
        address,
        namespace: "probed".into(),
        user: "admin".into(),
        tests_dir: tests_dir(),
        seed: 7,
    }
}

const BUDGETS: Budgets = Budgets {
    max_outage_seconds: 3,
    max_unavailable_seconds: 3.0,
};

/// Runs the probe for `seconds` and judges its steps (agreements as given).
async fn judged(p: &UiProbe, seconds: u64, agree: bool) -> Vec<vfps_chaos::checker::Verdict> {
    p.check_installed().unwrap();
    let dir = vfps_testkit::scratch_dir("ui-probe");
    let end = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let steps = p.during(&dir, end).await.unwrap();
    let agreements: Vec<ui::Agreement> = steps
        .iter()
        .filter(|s| s.step == ui::Step::Create && s.ok)
        .map(|s| ui::Agreement {
            original: s.original.clone(),
            ui: s.pseudonym.clone(),
            api: agree.then(|| s.pseudonym.clone()),
        })
        .collect();
    let window_end = steps.last().map_or(0.0, |s| s.t + 1.0);
    ui::check(&steps, &agreements, BUDGETS, 0, window_end)
}

fn validity(v: &[vfps_chaos::checker::Verdict], p: Property) -> Validity {
    v.iter().find(|x| x.property == p).unwrap().validity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs node, tests/ui's packages and Chromium: scripts/test.sh runs it with --include-ignored"]
async fn the_probe_passes_on_the_real_ui() {
    let sqlite = vfps_testkit::scratch_dir("ui-probe-vfps").join("vfps.sqlite");
    let env = vec![
        ("VFPS_SQLITE_PATH".to_owned(), sqlite.display().to_string()),
        (
            "Init__v1__Namespaces__0__Name".to_owned(),
            "probed".to_owned(),
        ),
        (
            "Init__v1__Namespaces__0__PseudonymGenerationMethod".to_owned(),
            "FullRandomHexEncoded".to_owned(),
        ),
        (
            "Init__v1__Namespaces__0__PseudonymLength".to_owned(),
            "16".to_owned(),
        ),
    ];
    let app = startup::spawn(env, Flags::default()).await.unwrap();
    let address = format!("http://{}", app.http_addr);
    let v = judged(&probe(address), 8, true).await;
    for p in [Property::UiOutage, Property::UiSession, Property::UiResults] {
        assert_eq!(validity(&v, p), Validity::Valid, "{p:?}: {v:?}");
    }
    app.shutdown.cancel();
}

/// A pseudonyms page that looks right and answers wrong: every lookup
/// names someone else.
async fn broken_answers() -> Router {
    let form = |result: &str| {
        Html(format!(
            "<!DOCTYPE html><html lang=en><head><title>t</title></head><body><main>\
             <p><output id=\"result\">{result}</output></p>\
             <form method=post action=\"/ui/namespaces/probed/pseudonyms\"><label for=original>Original value</label>\
             <input id=original name=original><button type=submit>Create pseudonym</button></form>\
             <form method=post action=\"/ui/namespaces/probed/lookup\"><label for=pseudonym>Pseudonym</label>\
             <input id=pseudonym name=pseudonym><button type=submit>Look up</button></form>\
             </main></body></html>"
        ))
    };
    Router::new()
        .route(
            "/ui/authentication/login",
            get(|| async { axum::response::Redirect::to("/ui/namespaces/probed/pseudonyms") }),
        )
        .route(
            "/ui/namespaces/probed/pseudonyms",
            get(move || async move { form("") }).post(move || async move { form("pseudonym-1") }),
        )
        .route(
            "/ui/namespaces/probed/lookup",
            axum::routing::post(move || async move { form("someone else") }),
        )
}

/// A pseudonyms page that works for its first two creates, then fails them;
/// its lookups fail from then on too when `lookups_fail`.
async fn failing(lookups_fail: bool) -> Router {
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    };
    #[derive(serde::Deserialize)]
    struct Fields {
        #[serde(default)]
        original: String,
        #[serde(default)]
        pseudonym: String,
    }
    let page = |result: &str| {
        Html(format!(
            "<p><output id=\"result\">{result}</output></p>\
             <form method=post action=\"/ui/namespaces/probed/pseudonyms\"><label for=original>Original value</label>\
             <input id=original name=original><button type=submit>Create pseudonym</button></form>\
             <form method=post action=\"/ui/namespaces/probed/lookup\"><label for=pseudonym>Pseudonym</label>\
             <input id=pseudonym name=pseudonym><button type=submit>Look up</button></form>"
        ))
    };
    let creates = Arc::new(AtomicUsize::new(0));
    let seen = creates.clone();
    Router::new()
        .route(
            "/ui/authentication/login",
            get(|| async { axum::response::Redirect::to("/ui/namespaces/probed/pseudonyms") }),
        )
        .route(
            "/ui/namespaces/probed/pseudonyms",
            get(move || async move { page("") }).post(move |axum::Form(f): axum::Form<Fields>| {
                let creates = creates.clone();
                async move {
                    if creates.fetch_add(1, Ordering::SeqCst) < 2 {
                        page(&format!("p-{}", f.original)).into_response()
                    } else {
                        (
                            axum::http::StatusCode::BAD_GATEWAY,
                            Html("<p role=alert>down</p>"),
                        )
                            .into_response()
                    }
                }
            }),
        )
        .route(
            "/ui/namespaces/probed/lookup",
            axum::routing::post(move |axum::Form(f): axum::Form<Fields>| {
                let seen = seen.clone();
                async move {
                    if lookups_fail && seen.load(Ordering::SeqCst) > 2 {
                        return (
                            axum::http::StatusCode::BAD_GATEWAY,
                            Html("<p role=alert>down</p>"),
                        )
                            .into_response();
                    }
                    page(f.pseudonym.trim_start_matches("p-")).into_response()
                }
            }),
        )
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs node, tests/ui's packages and Chromium: scripts/test.sh runs it with --include-ignored"]
async fn the_probe_fails_on_a_broken_page() {
    let wrong = serve(broken_answers().await).await;
    // A create, and its lookup a step (3 s) later.
    let v = judged(&probe(wrong), 7, true).await;
    assert_eq!(
        validity(&v, Property::UiResults),
        Validity::Invalid,
        "{v:?}"
    );

    let down = serve(failing(true).await).await;
    // Longer than the budget and the probe's resolution (3 + 11 s): two
    // creates and their lookups (12 s at a step every 3 s), then down.
    let v = judged(&probe(down), 32, true).await;
    assert_eq!(validity(&v, Property::UiOutage), Validity::Invalid, "{v:?}");
    assert_eq!(validity(&v, Property::UiResults), Validity::Valid, "{v:?}");

    // Creates refused but lookups answered: the UI is still usable (as the
    // API's reads count for its availability), and every lookup is right.
    let read_only = serve(failing(false).await).await;
    let v = judged(&probe(read_only), 20, true).await;
    assert_eq!(validity(&v, Property::UiOutage), Validity::Valid, "{v:?}");
    assert_eq!(validity(&v, Property::UiResults), Validity::Valid, "{v:?}");
}

/// While steps fail, the probe looks again every half period (one step a
/// tick): a recovery is seen within 1.5 s of it, not 3 s, at about the
/// steady state's steps per second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs node, tests/ui's packages and Chromium: scripts/test.sh runs it with --include-ignored"]
async fn while_steps_fail_the_probe_looks_again_every_half_period() {
    let down = serve(failing(true).await).await;
    let p = probe(down);
    p.check_installed().unwrap();
    let dir = vfps_testkit::scratch_dir("ui-probe");
    let end = tokio::time::Instant::now() + Duration::from_secs(22);
    let steps: Vec<_> = p
        .during(&dir, end)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.step != ui::Step::SignIn)
        .collect();
    let first_failed = steps.iter().position(|s| !s.ok).unwrap();
    let failing = &steps[first_failed..];
    assert!(failing.iter().all(|s| !s.ok), "{steps:#?}");
    assert!(failing.len() >= 5, "{steps:#?}");
    let gaps: Vec<f64> = failing.windows(2).map(|w| w[1].t - w[0].t).collect();
    // A create fails, the lookup right after it fails too; from then on
    // one step every 1.5 s, creates and lookups by turns.
    for g in &gaps[1..] {
        assert!((1.3..2.0).contains(g), "gaps {gaps:?}");
    }
    let kinds: Vec<_> = failing[1..].iter().map(|s| s.step).collect();
    assert!(
        kinds.windows(2).all(|w| w[0] != w[1]),
        "creates and lookups by turns: {kinds:?}"
    );
}
