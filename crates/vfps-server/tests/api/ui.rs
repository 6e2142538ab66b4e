//! The admin UI over HTTP: every escaping, CSRF and header rule of its
//! pages, sessions across replicas, and rights shown as disabled controls.
//! (The sign-in itself, against a real OpenID provider, and the pages in a
//! real browser are tests/ui's.)

use std::time::Duration;

use reqwest::{header, StatusCode};
use vfps_server::auth::session::{Session, SessionKey};

use crate::helpers::{backend_env, spawn_app_with, Backend, TestApp};

const KEY: &str = "a session key shared by every replica, 32+ bytes";

fn ui_env(backend: Backend, key: &str) -> Vec<(String, String)> {
    let mut env = backend_env(backend).0;
    env.push(("VFPS_UI_SESSION_KEY".into(), key.into()));
    env
}

/// Authorization on with database tokens only: admins are `vfps-admin`,
/// `vfps-reader` may read namespace `research`, `vfps-trustee` write and
/// re-identify there.
fn secured_ui_env(backend: Backend) -> Vec<(String, String)> {
    let mut env = ui_env(backend, KEY);
    for (k, v) in [
        ("Authorization__IsEnabled", "true"),
        ("Authorization__AdminRoles__0", "vfps-admin"),
        ("Authorization__NamespaceRules__0__Namespace", "research"),
        (
            "Authorization__NamespaceRules__0__ReadRoles__0",
            "vfps-reader",
        ),
        (
            "Authorization__NamespaceRules__0__WriteRoles__0",
            "vfps-trustee",
        ),
        (
            "Authorization__NamespaceRules__0__ReverseLookupRoles__0",
            "vfps-trustee",
        ),
        (
            "Authorization__NamespaceRules__0__EraseRoles__0",
            "vfps-trustee",
        ),
    ] {
        env.push((k.into(), v.into()));
    }
    env
}

/// A browser without a cookie jar of reqwest's: its one cookie is the
/// session, and the CSRF token is read off the last page.
struct Browser {
    base: String,
    client: reqwest::Client,
    session: Option<String>,
    csrf: String,
}

impl Browser {
    fn new(app: &TestApp) -> Self {
        Self {
            base: app.http.clone(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            session: None,
            csrf: String::new(),
        }
    }

    /// A browser holding a session sealed with `key` (a sign-in's outcome).
    fn signed_in(app: &TestApp, key: &str, sub: &str, roles: &[&str]) -> Self {
        let session = Session {
            subject: Some(sub.into()),
            name: sub.into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            ..Session::anonymous(Duration::from_secs(600))
        };
        let mut b = Self::new(app);
        b.session = Some(SessionKey::from_secret(key.as_bytes()).seal_session(&session));
        b
    }

    fn keep(&mut self, response: &reqwest::Response) {
        for v in response.headers().get_all(header::SET_COOKIE) {
            let v = v.to_str().unwrap();
            if let Some(rest) = v.strip_prefix("vfps_session=") {
                self.session = Some(rest.split(';').next().unwrap().to_owned());
            }
        }
    }

    fn cookie(&self) -> String {
        self.session
            .as_ref()
            .map(|s| format!("vfps_session={s}"))
            .unwrap_or_default()
    }

    async fn get(&mut self, path: &str) -> (StatusCode, reqwest::header::HeaderMap, String) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .header(header::COOKIE, self.cookie())
            .send()
            .await
            .unwrap();
        self.keep(&r);
        let (status, headers) = (r.status(), r.headers().clone());
        let body = r.text().await.unwrap();
        if let Some(token) = csrf_of(&body) {
            self.csrf = token;
        }
        (status, headers, body)
    }

    async fn post(
        &mut self,
        path: &str,
        form: &[(&str, &str)],
        origin: Option<&str>,
    ) -> (StatusCode, String) {
        let mut req = self
            .client
            .post(format!("{}{path}", self.base))
            .header(header::COOKIE, self.cookie())
            .form(form);
        if let Some(o) = origin {
            req = req.header(header::ORIGIN, o);
        }
        let r = req.send().await.unwrap();
        self.keep(&r);
        let status = r.status();
        (status, r.text().await.unwrap())
    }
}

fn csrf_of(page: &str) -> Option<String> {
    let at = page.find("name=\"csrf-token\" content=\"")? + 27;
    Some(page[at..].split('"').next()?.to_owned())
}

/// The text of `<output id="result">`, tags and all.
fn result_of(page: &str) -> &str {
    let at = page
        .find("<output id=\"result\">")
        .unwrap_or_else(|| panic!("no result in {page}"))
        + 20;
    &page[at..at + page[at..].find("</output>").unwrap()]
}

const PAGES: [&str; 6] = [
    "/ui/",
    "/ui/namespaces",
    "/ui/namespaces/demo/pseudonyms",
    "/ui/csv-jobs",
    "/ui/access-control",
    "/ui/tokens",
];

/// Inline script, inline event handlers or inline styles: what the policy
/// forbids, so a page using them would break, and a page that needs them
/// would be an injection's way in.
fn inline_code(page: &str) -> Vec<String> {
    let lower = page.to_ascii_lowercase();
    let mut found = Vec::new();
    // Only inside tags: an escaped value has no `<`, so it never starts one.
    for tag in lower.split('<').skip(1).filter_map(|t| t.split('>').next()) {
        if tag.starts_with("script") && !tag.contains(" src=") {
            found.push(tag.to_owned());
        }
        for attr in [
            " onclick=",
            " onload=",
            " onerror=",
            " onsubmit=",
            " onchange=",
            " style=",
        ] {
            if tag.contains(attr) {
                found.push(format!("{attr} in <{tag}>"));
            }
        }
        if tag.contains("javascript:") {
            found.push(format!("javascript: in <{tag}>"));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_carries_the_policy_and_is_never_cached() {
    let app = spawn_app_with(ui_env(Backend::Sqlite, KEY)).await;
    app.namespace("demo", 5, 16).await;
    let mut b = Browser::new(&app);
    for path in PAGES {
        let (status, headers, body) = b.get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        let script_src = csp
            .split(';')
            .find(|d| d.trim().starts_with("script-src"))
            .unwrap_or_else(|| panic!("{path}: no script-src in {csp}"));
        assert!(
            !script_src.contains("unsafe-inline") && !script_src.contains("unsafe-eval"),
            "{path}: {csp}"
        );
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert_eq!(headers[header::CACHE_CONTROL], "no-store", "{path}");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        assert_eq!(headers[header::REFERRER_POLICY], "same-origin", "{path}");
        assert!(
            inline_code(&body).is_empty(),
            "{path}: {:?}",
            inline_code(&body)
        );
        let cookie = headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .find(|c| c.starts_with("vfps_session="));
        if let Some(c) = cookie {
            assert!(c.contains("HttpOnly") && c.contains("SameSite=Lax"), "{c}");
        }
    }
    // The checker itself finds what it looks for.
    assert_eq!(inline_code("<script>alert(1)</script>").len(), 1);
    assert_eq!(inline_code("<p style=\"x\" onclick=\"y\">").len(), 2);
    assert!(inline_code("<script src=\"/ui/assets/app.js\" defer></script>").is_empty());
    assert!(inline_code("<p>&lt;svg onload=alert(3)&gt;</p>").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_with_markup_show_as_text() {
    let app = spawn_app_with(ui_env(Backend::Sqlite, KEY)).await;
    app.namespace("demo", 5, 16).await;
    let mut b = Browser::new(&app);
    b.get("/ui/namespaces").await;
    let csrf = b.csrf.clone();
    let description = "<img src=x onerror=alert(2)>";
    let (status, page) = b
        .post(
            "/ui/namespaces",
            &[
                ("csrf", &csrf),
                ("name", "marked"),
                ("method", "5"),
                ("length", "8"),
                ("description", description),
            ],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(!page.contains(description), "raw description in the page");
    assert!(page.contains("&lt;img src=x onerror=alert(2)&gt;"));
    for original in [
        "<script>alert(1)</script>",
        "\"><svg onload=alert(3)>",
        "a&b 'c'",
    ] {
        let (status, page) = b
            .post(
                "/ui/namespaces/demo/pseudonyms",
                &[("csrf", &csrf), ("original", original)],
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let pseudonym = result_of(&page)
            .trim_start_matches("<code>")
            .trim_end_matches("</code>")
            .to_owned();
        let (status, page) = b
            .post(
                "/ui/namespaces/demo/reveal",
                &[("csrf", &csrf), ("pseudonym", &pseudonym)],
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert!(!page.contains(original), "{original} raw in the page");
        let escaped = original
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;");
        assert_eq!(result_of(&page), escaped);
        assert!(inline_code(&page).is_empty());
    }
}

/// How many namespaces the REST API lists.
async fn namespace_count(app: &TestApp) -> usize {
    app.get_json("/v1/namespaces").await["namespaces"]
        .as_array()
        .map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_without_this_sessions_token_or_from_another_site_changes_nothing() {
    let app = spawn_app_with(ui_env(Backend::Sqlite, KEY)).await;
    let mut b = Browser::new(&app);
    b.get("/ui/namespaces").await;
    let mut other = Browser::new(&app);
    other.get("/ui/namespaces").await;
    let own = b.csrf.clone();
    let foreign = other.csrf.clone();
    assert_ne!(own, foreign);
    let form = |csrf: &str, name: &str| {
        vec![
            ("csrf", csrf.to_owned()),
            ("name", name.to_owned()),
            ("method", "5".to_owned()),
            ("length", "8".to_owned()),
        ]
    };
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, Option<&'a str>);
    let cases: [Case; 4] = [
        (
            "no token",
            vec![("name", "x1".into()), ("method", "5".into())],
            None,
        ),
        ("another session's token", form(&foreign, "x2"), None),
        ("a made-up token", form("AAAA", "x3"), None),
        (
            "another site's page",
            form(&own, "x4"),
            Some("http://evil.example"),
        ),
    ];
    for (what, fields, origin) in cases {
        let refs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (status, page) = b.post("/ui/namespaces", &refs, origin).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{what}: {page}");
        assert!(page.contains("role=\"alert\""), "{what}");
        assert_eq!(namespace_count(&app).await, 0, "{what} created a namespace");
    }
    // A cookie-less post (the forged form of a browser with no session) too.
    let mut stranger = Browser::new(&app);
    let (status, _) = stranger
        .post(
            "/ui/namespaces",
            &[("csrf", &own), ("name", "x5"), ("method", "5")],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The page's own form, from our origin, works.
    let origin = app.http.clone();
    let fields = form(&own, "x6");
    let refs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, page) = b.post("/ui/namespaces", &refs, Some(&origin)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(namespace_count(&app).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_replica_with_the_same_key_takes_the_session_and_one_without_it_does_not() {
    let first = spawn_app_with(ui_env(Backend::Sqlite, KEY)).await;
    let second = spawn_app_with(ui_env(Backend::Sqlite, KEY)).await;
    let stranger = spawn_app_with(ui_env(
        Backend::Sqlite,
        "another key of 32 bytes or more....",
    ))
    .await;
    let mut b = Browser::new(&first);
    b.get("/ui/namespaces").await;
    let csrf = b.csrf.clone();
    let form = [
        ("csrf", csrf.as_str()),
        ("name", "moved"),
        ("method", "5"),
        ("length", "8"),
    ];
    b.base = second.http.clone();
    let (status, page) = b.post("/ui/namespaces", &form, None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(namespace_count(&second).await, 1);
    b.base = stranger.http.clone();
    let (status, _) = b.post("/ui/namespaces", &form, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(namespace_count(&stranger).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rights_are_the_apis_and_what_one_may_not_do_is_disabled() {
    let app = spawn_app_with(secured_ui_env(Backend::Sqlite)).await;
    let mut admin = Browser::signed_in(&app, KEY, "ada", &["vfps-admin"]);
    let mut reader = Browser::signed_in(&app, KEY, "rae", &["vfps-reader"]);
    let (status, _, page) = admin.get("/ui/namespaces").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("<fieldset disabled>"), "{page}");
    let csrf = admin.csrf.clone();
    let (status, page) = admin
        .post(
            "/ui/namespaces",
            &[
                ("csrf", &csrf),
                ("name", "research"),
                ("method", "5"),
                ("length", "8"),
            ],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");

    let (status, _, page) = reader.get("/ui/namespaces").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("<fieldset disabled>"), "{page}");
    let (_, _, page) = reader.get("/ui/namespaces/research/pseudonyms").await;
    assert_eq!(
        page.matches("<fieldset disabled>").count(),
        3,
        "create, look up and erase: {page}"
    );
    let csrf = reader.csrf.clone();
    let (status, _) = reader
        .post(
            "/ui/namespaces",
            &[("csrf", &csrf), ("name", "mine"), ("method", "5")],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = reader
        .post(
            "/ui/namespaces/research/pseudonyms",
            &[("csrf", &csrf), ("original", "x")],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // No session at all: not signed in, so no page (sign-in is not
    // configured here, so a refusal rather than a redirect).
    let mut nobody = Browser::new(&app);
    let (status, _, _) = nobody.get("/ui/namespaces").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A session sealed with another key is no one's.
    let mut forged = Browser::signed_in(
        &app,
        "a key that is not this service's key!!",
        "eve",
        &["vfps-admin"],
    );
    let (status, _, _) = forged.get("/ui/tokens").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apis_scripts_use_the_session_only_with_its_csrf_header() {
    let app = spawn_app_with(secured_ui_env(Backend::Sqlite)).await;
    let mut admin = Browser::signed_in(&app, KEY, "ada", &["vfps-admin"]);
    admin.get("/ui/").await;
    let call = |token: Option<String>| {
        let mut req = admin
            .client
            .get(format!("{}/v1/namespaces", admin.base))
            .header(header::COOKIE, admin.cookie());
        if let Some(t) = token {
            req = req.header("x-csrf-token", t);
        }
        req.send()
    };
    assert_eq!(call(None).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        call(Some("wrong".into())).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(Some(admin.csrf.clone())).await.unwrap().status(),
        StatusCode::OK
    );
    // The session as a credential of its own: the same rules as a token's.
    let r = admin
        .client
        .post(format!("{}/v1/namespaces", admin.base))
        .header(header::AUTHORIZATION, format!("Session {}", admin.session.clone().unwrap()))
        .json(&serde_json::json!({"name": "viaapi", "pseudonymGenerationMethod": 5, "pseudonymLength": 8}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// Namespace `research` (hex, length 8), made through the namespaces page.
async fn create_research(admin: &mut Browser) {
    admin.get("/ui/namespaces").await;
    let csrf = admin.csrf.clone();
    let (status, page) = admin
        .post(
            "/ui/namespaces",
            &[
                ("csrf", &csrf),
                ("name", "research"),
                ("method", "5"),
                ("length", "8"),
            ],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
}

/// A signed-in admin and trustee of `research` (made through the UI), on
/// its pseudonyms page; its CSRF token.
async fn trustee_on_research(app: &TestApp) -> (Browser, String) {
    let mut admin = Browser::signed_in(app, KEY, "ada", &["vfps-admin", "vfps-trustee"]);
    create_research(&mut admin).await;
    let (status, _, _) = admin.get("/ui/namespaces/research/pseudonyms").await;
    assert_eq!(status, StatusCode::OK);
    let csrf = admin.csrf.clone();
    (admin, csrf)
}

/// The access-tokens page refuses what the API refuses (a grant beyond the
/// signed-in admin's own rights, naming it), and the lookup form reveals
/// nothing to an admin without the namespace's reverse-lookup role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_grants_only_what_it_holds_and_reveals_nothing() {
    let app = spawn_app_with(secured_ui_env(Backend::Sqlite)).await;
    let mut admin = Browser::signed_in(&app, KEY, "ada", &["vfps-admin"]);
    let mut trustee = Browser::signed_in(&app, KEY, "tom", &["vfps-trustee"]);
    create_research(&mut admin).await;
    trustee.get("/ui/namespaces/research/pseudonyms").await;
    let csrf = trustee.csrf.clone();
    let original = "patient-0815";
    let (status, page) = trustee
        .post(
            "/ui/namespaces/research/pseudonyms",
            &[("csrf", &csrf), ("original", original)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let pseudonym = result_of(&page)
        .trim_start_matches("<code>")
        .trim_end_matches("</code>")
        .to_owned();

    admin.get("/ui/tokens").await;
    let csrf = admin.csrf.clone();
    for grants in ["research=reverse-lookup", "*=read,write,reverse-lookup"] {
        let (status, page) = admin
            .post(
                "/ui/tokens",
                &[
                    ("csrf", &csrf),
                    ("kind", "service-account"),
                    ("name", "escalate"),
                    ("grants", grants),
                ],
                None,
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{grants}: {page}");
        assert!(page.contains("cannot grant"), "{grants}: {page}");
        assert!(!page.contains("vfps_sat_"), "a secret was shown: {page}");
    }
    let (status, page) = admin
        .post(
            "/ui/tokens",
            &[
                ("csrf", &csrf),
                ("kind", "personal"),
                ("name", "deputy"),
                ("admin", "true"),
            ],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");

    admin.get("/ui/namespaces/research/pseudonyms").await;
    let csrf = admin.csrf.clone();
    let (status, page) = admin
        .post(
            "/ui/namespaces/research/reveal",
            &[("csrf", &csrf), ("pseudonym", &pseudonym)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(!page.contains(original), "the original in the page: {page}");
    let csrf = trustee.csrf.clone();
    let (status, page) = trustee
        .post(
            "/ui/namespaces/research/reveal",
            &[("csrf", &csrf), ("pseudonym", &pseudonym)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(result_of(&page), original);
}

/// A session cookie copied before its sign-out signed its holder in on any
/// replica until it expired (all of a session is in its cookie): the
/// sign-out now ends it on every replica before it answers, and so does an
/// admin ending a user's sessions; a sign-in after that is a session anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_out_session_is_refused_on_every_replica() {
    let env = secured_ui_env(Backend::Postgres);
    let a = spawn_app_with(env.clone()).await;
    let b = spawn_app_with(env).await;
    let mut ada = Browser::signed_in(&a, KEY, "ada", &["vfps-admin"]);
    let (status, _, _) = ada.get("/ui/tokens").await;
    assert_eq!(status, StatusCode::OK);
    let copied = ada.session.clone().unwrap();
    let on = |app: &TestApp, session: &str| {
        let mut browser = Browser::new(app);
        browser.session = Some(session.to_owned());
        browser
    };
    let (status, _, _) = on(&b, &copied).get("/ui/tokens").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the other replica takes the session"
    );

    let csrf = ada.csrf.clone();
    let (status, page) = ada
        .post("/ui/authentication/logout", &[("csrf", &csrf)], None)
        .await;
    assert!(status.is_redirection(), "{status}: {page}");
    for replica in [&b, &a] {
        let (status, _, _) = on(replica, &copied).get("/ui/tokens").await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "the copied cookie signs in"
        );
        let r = reqwest::Client::new()
            .get(format!("{}/v1/namespaces", replica.http))
            .header(header::AUTHORIZATION, format!("Session {copied}"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "the session as a credential"
        );
    }

    // An admin ends every session of a user, through one replica; the
    // user's cookie is refused by the other.
    let bob = Browser::signed_in(&a, KEY, "bob", &["vfps-reader"]);
    let bobs = bob.session.clone().unwrap();
    let (status, _, _) = on(&b, &bobs).get("/ui/namespaces").await;
    assert_eq!(status, StatusCode::OK);
    let admin = Browser::signed_in(&a, KEY, "ada", &["vfps-admin"]);
    let end = |who: &Browser, subject: &str| {
        let request = reqwest::Client::new()
            .post(format!("{}/v1/sessions:end", a.http))
            .header(
                header::AUTHORIZATION,
                format!("Session {}", who.session.clone().unwrap()),
            )
            .json(&serde_json::json!({ "subject": subject }));
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(end(&bob, "ada").await, StatusCode::FORBIDDEN, "only admins");
    assert_eq!(end(&admin, "bob").await, StatusCode::OK);
    let (status, _, _) = on(&b, &bobs).get("/ui/namespaces").await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "bob's session outlived its end"
    );
    let (status, _, _) = on(&b, &admin.session.clone().unwrap())
        .get("/ui/namespaces")
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "an end of bob's sessions ended ada's"
    );
    let again = Browser::signed_in(&b, KEY, "bob", &["vfps-reader"]);
    let (status, _, _) = on(&a, &again.session.clone().unwrap())
        .get("/ui/namespaces")
        .await;
    assert_eq!(status, StatusCode::OK, "a sign-in after the end");
}

/// The erase form: erase rights, the namespace's name typed, anonymized for
/// good or deleted where the namespace allows it; refused otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_erase_form_needs_its_right_and_the_namespaces_name() {
    let app = spawn_app_with(secured_ui_env(Backend::Sqlite)).await;
    let mut admin = Browser::signed_in(&app, KEY, "ada", &["vfps-admin"]);
    let mut trustee = Browser::signed_in(&app, KEY, "tom", &["vfps-trustee"]);
    create_research(&mut admin).await;
    let (_, _, page) = trustee.get("/ui/namespaces/research/pseudonyms").await;
    assert!(page.contains("Erase an original"), "{page}");
    let csrf = trustee.csrf.clone();
    let (_, page) = trustee
        .post(
            "/ui/namespaces/research/pseudonyms",
            &[("csrf", &csrf), ("original", "withdrawn")],
            None,
        )
        .await;
    let pseudonym = result_of(&page)
        .trim_start_matches("<code>")
        .trim_end_matches("</code>")
        .to_owned();
    let erase = |mode: &'static str, confirm: &'static str| {
        [
            ("csrf", csrf.clone()),
            ("original", "withdrawn".to_owned()),
            ("mode", mode.to_owned()),
            ("confirm", confirm.to_owned()),
        ]
    };
    let form = |f: &[(&'static str, String)]| -> Vec<(&'static str, String)> { f.to_vec() };
    for (fields, status, says) in [
        (
            form(&erase("anonymize", "other")),
            StatusCode::BAD_REQUEST,
            "type the namespace",
        ),
        (
            form(&erase("shred", "research")),
            StatusCode::BAD_REQUEST,
            "anonymize or delete",
        ),
        (
            form(&erase("delete", "research")),
            StatusCode::BAD_REQUEST,
            "does not allow deleting",
        ),
        (
            form(&erase("anonymize", "research")),
            StatusCode::OK,
            "Anonymized",
        ),
    ] {
        let pairs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (got, page) = trustee
            .post("/ui/namespaces/research/erase", &pairs, None)
            .await;
        assert_eq!(got, status, "{fields:?}: {page}");
        assert!(page.contains(says), "{says}: {page}");
    }
    let (status, page) = trustee
        .post(
            "/ui/namespaces/research/reveal",
            &[("csrf", &csrf), ("pseudonym", &pseudonym)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{page}");
    // An admin without the erase right sees the form disabled, and is refused.
    let (_, _, page) = admin.get("/ui/namespaces/research/pseudonyms").await;
    assert!(page.contains("Erasing needs erase rights"), "{page}");
    let csrf = admin.csrf.clone();
    let (status, _) = admin
        .post(
            "/ui/namespaces/research/erase",
            &[
                ("csrf", &csrf),
                ("original", "x"),
                ("mode", "anonymize"),
                ("confirm", "research"),
            ],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// A multi-pseudonym namespace from the form: listed as such; its pseudonyms
/// page makes one more pseudonym per Create, lists and reveals them all, and
/// an erasure takes them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_pseudonym_namespace_makes_one_more_pseudonym_per_create() {
    let app = spawn_app_with(secured_ui_env(Backend::Sqlite)).await;
    let mut admin = Browser::signed_in(&app, KEY, "ada", &["vfps-admin"]);
    let mut trustee = Browser::signed_in(&app, KEY, "tom", &["vfps-trustee", "vfps-reader"]);
    admin.get("/ui/namespaces").await;
    let csrf = admin.csrf.clone();
    let (status, page) = admin
        .post(
            "/ui/namespaces",
            &[
                ("csrf", &csrf),
                ("name", "research"),
                ("method", "5"),
                ("length", "8"),
                ("multi", "true"),
            ],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("Pseudonyms per original"), "{page}");
    assert!(page.contains("<td>many</td>"), "{page}");
    // SHA-256 cannot be one, and the form says why.
    let (status, page) = admin
        .post(
            "/ui/namespaces",
            &[
                ("csrf", &csrf),
                ("name", "hashed"),
                ("method", "2"),
                ("length", "64"),
                ("multi", "true"),
            ],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{page}");
    assert!(page.contains("random generation method"), "{page}");

    trustee.get("/ui/namespaces/research/pseudonyms").await;
    let csrf = trustee.csrf.clone();
    let mut made = Vec::new();
    for _ in 0..2 {
        let (status, page) = trustee
            .post(
                "/ui/namespaces/research/pseudonyms",
                &[("csrf", &csrf), ("original", "subject")],
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        made.push(
            result_of(&page)
                .trim_start_matches("<code>")
                .trim_end_matches("</code>")
                .to_owned(),
        );
    }
    assert_ne!(made[0], made[1], "a Create answered an earlier pseudonym");
    let (_, _, page) = trustee.get("/ui/namespaces/research/pseudonyms").await;
    for p in &made {
        assert!(page.contains(p.as_str()), "{p} not listed: {page}");
        let (status, page) = trustee
            .post(
                "/ui/namespaces/research/reveal",
                &[("csrf", &csrf), ("pseudonym", p)],
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert_eq!(result_of(&page), "subject");
    }
    let (status, page) = trustee
        .post(
            "/ui/namespaces/research/erase",
            &[
                ("csrf", &csrf),
                ("original", "subject"),
                ("mode", "anonymize"),
                ("confirm", "research"),
            ],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    for p in &made {
        let (status, page) = trustee
            .post(
                "/ui/namespaces/research/reveal",
                &[("csrf", &csrf), ("pseudonym", p)],
                None,
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{page}");
    }
}

/// A TCP proxy before PostgreSQL that, once stalled, forwards nothing more in
/// either direction and holds every connection open (new ones too): a
/// replica cut off from its database by the network, not refused.
struct StallProxy {
    port: u16,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StallProxy {
    async fn start(upstream_port: u16) -> Self {
        use std::sync::{atomic::AtomicBool, Arc};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stalled = Arc::new(AtomicBool::new(false));
        let s = stalled.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    Self::hold_while(&s).await;
                    let Ok(server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", upstream_port)).await
                    else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(Self::pump(cr, sw, &s), Self::pump(sr, cw, &s));
                });
            }
        });
        Self { port, stalled }
    }

    async fn hold_while(stalled: &std::sync::atomic::AtomicBool) {
        while stalled.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn pump(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        stalled: &std::sync::atomic::AtomicBool,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = from.read(&mut buf).await {
            Self::hold_while(stalled).await;
            if n == 0 || to.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    }

    fn stall(&self, on: bool) {
        self.stalled.store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A page answers within its one deadline when the database does not answer
/// (a replica cut off from it): a lookup's form took the deadline twice,
/// once for the lookup and again for the page's own check of the session,
/// past a browser's patience (the browser probe's steps timed out at 8 s on
/// a cut-off replica behind the load balancer). Now the whole request shares
/// one deadline and answers "try again" by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_answers_try_again_within_its_one_deadline_when_the_database_is_cut_off() {
    // Three hosts, read-write sessions only, as the platform's `-rw`
    // service: each unanswered host costs its connect timeout (2 s).
    let port = vfps_testkit::shared().port();
    let mut proxies = Vec::new();
    for _ in 0..3 {
        proxies.push(StallProxy::start(port).await);
    }
    let hosts: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.port))
        .collect();
    let env: Vec<_> = secured_ui_env(Backend::Postgres)
        .into_iter()
        .map(|(k, v)| {
            let v = if k == "ConnectionStrings__PostgreSQL" {
                v.replace(
                    &format!("Host=127.0.0.1;Port={port};"),
                    &format!(
                        "Host={};Target Session Attributes=read-write;",
                        hosts.join(",")
                    ),
                )
            } else {
                v
            };
            (k, v)
        })
        .collect();
    let app = spawn_app_with(env).await;
    let (mut admin, csrf) = trustee_on_research(&app).await;

    for p in &proxies {
        p.stall(true);
    }
    // The caches' lease runs out: every read goes to the database.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for path in ["lookup", "pseudonyms"] {
        let field = if path == "lookup" {
            "pseudonym"
        } else {
            "original"
        };
        let started = std::time::Instant::now();
        let (status, page) = admin
            .post(
                &format!("/ui/namespaces/research/{path}"),
                &[("csrf", &csrf), (field, "0123abcd")],
                None,
            )
            .await;
        let took = started.elapsed();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {page}");
        assert!(page.contains("Try again"), "{path}: {page}");
        assert!(
            took < vfps_server::ui::PAGE_DEADLINE + Duration::from_millis(1500),
            "{path}: the page took {took:?}, its deadline is {:?}",
            vfps_server::ui::PAGE_DEADLINE
        );
    }
    for p in &proxies {
        p.stall(false);
    }
}

/// A page is held inside its deadline while the database restarts, as an
/// API call is: the session's check is retried like the page's other calls.
/// It answered "try again" at once ("connection refused") while the
/// database was away, so every failover cost the UI its whole length even
/// where the API's calls rode it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_is_held_inside_the_pages_deadline_while_the_database_restarts() {
    let cluster = vfps_testkit::PgCluster::start().unwrap();
    let db = cluster.create_database().unwrap();
    let env = crate::helpers::on_postgres(secured_ui_env(Backend::Sqlite), &db.connection_string);
    let app = spawn_app_with(env).await;
    let (admin, csrf) = trustee_on_research(&app).await;

    cluster.stop_server().unwrap();
    // The caches' lease runs out: the session's check goes to the database.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut browser = Browser::new(&app);
    browser.session = admin.session.clone();
    let submitted = tokio::spawn(async move {
        browser
            .post(
                "/ui/namespaces/research/pseudonyms",
                &[("csrf", &csrf), ("original", "held")],
                None,
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !submitted.is_finished(),
        "the page must wait for the database, not answer at once: {:?}",
        submitted.await
    );
    cluster.start_server().unwrap();
    let (status, page) = submitted.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(!result_of(&page).is_empty(), "{page}");
}
