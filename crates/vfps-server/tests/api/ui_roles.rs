//! A UI session's roles are confirmed with the identity provider at least
//! every `VFPS_UI_ROLE_RECHECK_INTERVAL` (15 minutes): a page renews the
//! session with its refresh token and the roles the new ID token carries;
//! a user left with no role, or whose sign-in the provider ended, is signed
//! out; the API refuses a session whose re-check is due.

use std::time::Duration;

use reqwest::{header, StatusCode};
use vfps_server::auth::session::{Session, SessionKey};
use vfps_testkit::oidc::{OidcIssuer, UI_CLIENT};

use crate::helpers::{backend_env, spawn_app_with, Backend, TestApp};

const KEY: &str = "a session key shared by every replica, 32+ bytes";

fn env(issuer: &OidcIssuer) -> Vec<(String, String)> {
    let mut env = backend_env(Backend::Sqlite).0;
    for (k, v) in [
        ("VFPS_UI_SESSION_KEY", KEY),
        ("VFPS_UI_ROLE_RECHECK_INTERVAL", "1s"),
        ("Authorization__IsEnabled", "true"),
        ("Authorization__Authority", issuer.url.as_str()),
        ("Authorization__RequireHttpsMetadata", "false"),
        ("Authorization__Audience", "vfps"),
        ("Authorization__ClientId", UI_CLIENT),
        ("Authorization__ClientSecret", "ui-secret"),
        ("Authorization__AdminRoles__0", "vfps-admin"),
    ] {
        env.push((k.into(), v.into()));
    }
    env
}

/// A session as a sign-in leaves it, its re-check due now.
fn signed_in(issuer: &OidcIssuer, sub: &str, roles: &[&str]) -> String {
    let session = Session {
        subject: Some(format!("jwt:{}#{sub}", issuer.url)),
        name: sub.into(),
        roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        refresh_token: Some(issuer.refresh_token(sub, roles)),
        recheck_by: 0,
        ..Session::anonymous(Duration::from_secs(3600))
    };
    SessionKey::from_secret(KEY.as_bytes()).seal_session(&session)
}

/// A page with the session `sealed`: its status, `Location` and the session
/// cookie it sets (if any).
async fn page(app: &TestApp, sealed: &str) -> (StatusCode, Option<String>, Option<String>) {
    at(app, "/ui/namespaces", sealed).await
}

/// [`page`] at `path`.
async fn at(
    app: &TestApp,
    path: &str,
    sealed: &str,
) -> (StatusCode, Option<String>, Option<String>) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = client
        .get(format!("{}{path}", app.http))
        .header(header::COOKIE, format!("vfps_session={sealed}"))
        .send()
        .await
        .unwrap();
    let location = r
        .headers()
        .get(header::LOCATION)
        .map(|v| v.to_str().unwrap().to_owned());
    let cookie = r
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().unwrap().strip_prefix("vfps_session="))
        .map(|v| v.split(';').next().unwrap().to_owned())
        .next();
    (r.status(), location, cookie)
}

fn roles_of(sealed: &str) -> Option<Vec<String>> {
    let s = SessionKey::from_secret(KEY.as_bytes()).open_session(sealed)?;
    s.signed_in().then_some(s.roles)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_roles_are_rechecked_and_it_ends_when_they_are_gone() {
    let issuer = OidcIssuer::start().await;
    let app = spawn_app_with(env(&issuer)).await;

    // Due: the page renews the session with the provider, which now says
    // the user is a reader only.
    let sealed = signed_in(&issuer, "alice", &["vfps-admin"]);
    issuer.set_roles("alice", &["vfps-reader"]);
    let (status, _, renewed) = page(&app, &sealed).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(issuer.refreshes(), 1);
    let renewed = renewed.expect("the renewed session's cookie");
    assert_eq!(roles_of(&renewed), Some(vec!["vfps-reader".to_owned()]));
    // Not due again within the interval: no second renewal.
    let (status, _, again) = page(&app, &renewed).await;
    assert_eq!((status, again), (StatusCode::OK, None));
    assert_eq!(issuer.refreshes(), 1);

    // Due again, and the user has no role left: signed out.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    issuer.set_roles("alice", &[]);
    let (status, location, ended) = page(&app, &renewed).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.unwrap().starts_with("/ui/authentication/login"));
    assert_eq!(
        roles_of(&ended.expect("a new cookie")),
        None,
        "still signed in"
    );

    // The provider ended the sign-in (a disabled user): signed out too.
    let sealed = signed_in(&issuer, "bob", &["vfps-admin"]);
    issuer.revoke_refresh_tokens("bob");
    let (status, _, ended) = page(&app, &sealed).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(roles_of(&ended.unwrap()), None);

    // A form sent with a due session is renewed in place and taken: the
    // session keeps its CSRF token.
    let sealed = signed_in(&issuer, "dave", &["vfps-admin"]);
    let key = SessionKey::from_secret(KEY.as_bytes());
    let nonce = key.open_session(&sealed).unwrap().nonce;
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/ui/namespaces", app.http))
        .header(header::COOKIE, format!("vfps_session={sealed}"))
        .form(&[
            ("csrf", key.csrf_token(&nonce).as_str()),
            ("name", "made-while-due"),
            ("method", "5"),
            ("length", "16"),
        ])
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Namespace made-while-due created."), "{body}");

    // The API takes no session whose re-check is due (a page renews it).
    let sealed = signed_in(&issuer, "carol", &["vfps-admin"]);
    let nonce = key.open_session(&sealed).unwrap().nonce;
    let r = reqwest::Client::new()
        .get(format!("{}/v1/namespaces", app.http))
        .header(header::COOKIE, format!("vfps_session={sealed}"))
        .header("x-csrf-token", key.csrf_token(&nonce))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // Renewed by a page, the same session is taken again.
    let (_, _, renewed) = page(&app, &sealed).await;
    let renewed = renewed.unwrap();
    let nonce = key.open_session(&renewed).unwrap().nonce;
    let r = reqwest::Client::new()
        .get(format!("{}/v1/namespaces", app.http))
        .header(header::COOKIE, format!("vfps_session={renewed}"))
        .header("x-csrf-token", key.csrf_token(&nonce))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // The jobs page's grid, which its script asks to renew a session the
    // API refused, renews it for the browser too (its cookie is set): a CI
    // run's browser test found the upload refused twice without it.
    let sealed = signed_in(&issuer, "erin", &["vfps-admin"]);
    let (status, _, renewed) = at(&app, "/ui/csv-jobs/grid", &sealed).await;
    assert_eq!(status, StatusCode::OK);
    let renewed = renewed.expect("the grid sets the renewed session's cookie");
    assert_eq!(roles_of(&renewed), Some(vec!["vfps-admin".to_owned()]));
}
