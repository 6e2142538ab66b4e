//! Swagger UI at upstream vfps's paths: `/swagger` (sent on to
//! `/swagger/index.html`), the REST API's OpenAPI document at
//! `/swagger/v1/swagger.json` (`assets/openapi.json`, written by hand; its
//! tests hold it to the router), and Swagger UI's files, vendored from npm by
//! `scripts/vendor-ui-assets.sh`. Everything is compiled in: no CDN, no build
//! step, nothing read from disk.
//!
//! The page itself is written by the server from the document: it lists every
//! operation (method, path, summary, by tag), so the page's content is there at
//! first paint and without JavaScript. Swagger UI draws into a hidden element
//! beside the list and takes its place once its own operations are drawn
//! (`swagger-init.js`), a few hundred milliseconds later on a slow machine.
//!
//! No inline script: the page's start-up script is a file, and the policy
//! allows scripts from this origin only. It does allow inline styles, which
//! Swagger UI sets on its elements.

use axum::{
    body::Bytes,
    http::{header, HeaderValue},
    response::{IntoResponse, Redirect, Response},
    routing::get,
    Router,
};

use maud::{html, DOCTYPE};
use serde_json::Value;

use crate::state::AppState;

/// The policy of every answer under `/swagger`: the UI's, but with inline
/// styles (Swagger UI's `style` attributes); scripts still only from here.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; \
     frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Swagger UI's own files change only with the pinned version: an hour in any cache.
const VENDORED: &str = "public, max-age=3600";
/// Ours (the page, its script, the document) are asked for again every time,
/// so a new release's document is shown at once.
const OURS: &str = "no-cache";

/// Stands for the crate's version in `assets/openapi.json`.
const VERSION_PLACEHOLDER: &str = "@CARGO_PKG_VERSION@";

/// A file served as it is.
struct File {
    path: &'static str,
    content_type: &'static str,
    cache_control: &'static str,
    body: &'static [u8],
}

static FILES: [File; 4] = [
    File {
        path: "/swagger/swagger-init.js",
        content_type: "text/javascript; charset=utf-8",
        cache_control: OURS,
        body: include_bytes!("../../assets/swagger-init.js"),
    },
    File {
        path: "/swagger/swagger-ui-bundle.js",
        content_type: "text/javascript; charset=utf-8",
        cache_control: VENDORED,
        body: include_bytes!("../../assets/vendor/swagger-ui-dist/swagger-ui-bundle.js"),
    },
    File {
        path: "/swagger/swagger-overrides.css",
        content_type: "text/css; charset=utf-8",
        cache_control: OURS,
        body: include_bytes!("../../assets/swagger-overrides.css"),
    },
    File {
        path: "/swagger/swagger-ui.css",
        content_type: "text/css; charset=utf-8",
        cache_control: VENDORED,
        body: include_bytes!("../../assets/vendor/swagger-ui-dist/swagger-ui.css"),
    },
];

/// The OpenAPI document as served: the crate's version filled in.
fn openapi_document() -> String {
    include_str!("../../assets/openapi.json").replacen(
        VERSION_PLACEHOLDER,
        env!("CARGO_PKG_VERSION"),
        1,
    )
}

/// The methods an OpenAPI path item may have, in the order they are listed.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// One operation of the document, as the page lists it.
struct Listed<'a> {
    method: &'a str,
    path: &'a str,
    summary: &'a str,
}

/// The document's operations grouped by their first tag, in the order of the
/// document's `tags` (then any tag it does not declare, then the untagged),
/// each group by path (a parsed document's paths come sorted) and, within a
/// path, by method as [`METHODS`] lists them.
fn operations_by_tag(document: &Value) -> Vec<(String, String, Vec<Listed<'_>>)> {
    let mut groups: Vec<(String, String, Vec<Listed<'_>>)> = document["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let text = |k: &str| t[k].as_str().unwrap_or_default().to_owned();
            (text("name"), text("description"), Vec::new())
        })
        .collect();
    let paths = document["paths"].as_object().into_iter().flatten();
    for (path, item) in paths {
        for method in METHODS {
            let Some(operation) = item.get(method) else {
                continue;
            };
            let tag = operation["tags"][0].as_str().unwrap_or("other");
            let listed = Listed {
                method,
                path,
                summary: operation["summary"].as_str().unwrap_or_default(),
            };
            match groups.iter_mut().find(|(name, _, _)| name == tag) {
                Some((_, _, ops)) => ops.push(listed),
                None => groups.push((tag.to_owned(), String::new(), vec![listed])),
            }
        }
    }
    groups.retain(|(_, _, ops)| !ops.is_empty());
    groups
}

/// `/swagger/index.html`: the document's operations listed, then Swagger UI's
/// element (hidden by the stylesheet while the list is there) and scripts.
fn index_page(document: &Value) -> String {
    let info = &document["info"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "vfps · API docs" }
                // Swagger UI's own stylesheet and bundle are fetched by the
                // start-up script, so that neither holds back this list.
                link rel="stylesheet" href="/swagger/swagger-overrides.css";
                // No favicon: the browser's request for one would be a 404.
                link rel="icon" href="data:,";
            }
            body {
                main #vfps-outline class="vfps-outline" {
                    h1 { (text(&info["title"])) " " small { (text(&info["version"])) } }
                    p {
                        "The REST API's operations, from "
                        a href="/swagger/v1/swagger.json" { "its OpenAPI document" }
                        ". Swagger UI, which lets you try them, takes this list's place once it has \
                         loaded (it needs JavaScript)."
                    }
                    @for (tag, description, operations) in operations_by_tag(document) {
                        section {
                            h2 { (tag) }
                            @if !description.is_empty() { p { (description) } }
                            ul {
                                @for op in operations {
                                    li {
                                        span class={ "vfps-method vfps-" (op.method) } { (op.method.to_ascii_uppercase()) }
                                        " " code { (op.path) } " " span { (op.summary) }
                                    }
                                }
                            }
                        }
                    }
                }
                div #swagger-ui {}
                script src="/swagger/swagger-init.js" async {}
            }
        }
    }
    .into_string()
}

pub fn routes() -> Router<AppState> {
    let text = openapi_document();
    let parsed: Value = serde_json::from_str(&text).expect("assets/openapi.json is JSON");
    let index = Bytes::from(index_page(&parsed));
    let document = Bytes::from(text);
    let to_index = || async { Redirect::permanent("/swagger/index.html") };
    let mut router = Router::new()
        .route("/swagger", get(to_index))
        .route("/swagger/", get(to_index))
        .route(
            "/swagger/index.html",
            get(move || async move { answer("text/html; charset=utf-8", OURS, index) }),
        )
        .route(
            "/swagger/v1/swagger.json",
            get(move || async move { answer("application/json; charset=utf-8", OURS, document) }),
        );
    for file in &FILES {
        router = router.route(
            file.path,
            get(move || async move {
                answer(
                    file.content_type,
                    file.cache_control,
                    Bytes::from_static(file.body),
                )
            }),
        );
    }
    router.layer(axum::middleware::map_response(policy))
}

fn answer(content_type: &'static str, cache_control: &'static str, body: Bytes) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static(cache_control),
            ),
        ],
        body,
    )
        .into_response()
}

/// The headers of every answer under `/swagger`, redirects included.
async fn policy(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeSet, path::PathBuf, sync::Arc};

    use axum::{
        body::Body,
        http::{Method, Request, StatusCode},
    };
    use http_body_util::BodyExt;
    use serde_json::Value;
    use sha2::{Digest, Sha256};
    use tower::ServiceExt;

    use super::*;

    /// Every REST route: its method, its path in the OpenAPI document, and
    /// the router's path that serves it (Google's custom methods, `{id}:start`
    /// and the like, are served by `{id}`'s handlers). A route added to the
    /// router, or to the document, without the other fails the tests below
    /// until it is added here too.
    const REST_ROUTES: [(&str, &str, &str); 34] = [
        ("GET", "/v1/namespaces", "/v1/namespaces"),
        ("POST", "/v1/namespaces", "/v1/namespaces"),
        ("GET", "/v1/namespaces/{name}", "/v1/namespaces/{name}"),
        ("DELETE", "/v1/namespaces/{name}", "/v1/namespaces/{name}"),
        (
            "GET",
            "/v1/namespaces/{namespace}/pseudonyms",
            "/v1/namespaces/{namespace}/pseudonyms",
        ),
        (
            "POST",
            "/v1/namespaces/{namespace}/pseudonyms",
            "/v1/namespaces/{namespace}/pseudonyms",
        ),
        (
            "GET",
            "/v1/namespaces/{namespace}/pseudonyms/{pseudonym}",
            "/v1/namespaces/{namespace}/pseudonyms/{pseudonym}",
        ),
        (
            "POST",
            "/v1/namespaces/{namespace}/pseudonyms:erase",
            "/v1/namespaces/{namespace}/pseudonyms:erase",
        ),
        (
            "POST",
            "/v1/fhir/$create-pseudonym",
            "/v1/fhir/$create-pseudonym",
        ),
        ("GET", "/v1/fhir/metadata", "/v1/fhir/metadata"),
        ("POST", "/v1/fhir", "/v1/fhir"),
        ("POST", "/v1/fhir/$pseudonymize", "/v1/fhir/$pseudonymize"),
        ("POST", "/v1/fhir/$get-pseudonym", "/v1/fhir/$get-pseudonym"),
        (
            "POST",
            "/v1/fhir/$de-pseudonymize",
            "/v1/fhir/$de-pseudonymize",
        ),
        (
            "POST",
            "/v1/fhir/$pseudonymize-multiple",
            "/v1/fhir/$pseudonymize-multiple",
        ),
        (
            "POST",
            "/v1/fhir/$delete-pseudonym",
            "/v1/fhir/$delete-pseudonym",
        ),
        (
            "POST",
            "/v1/fhir/$anonymize-original",
            "/v1/fhir/$anonymize-original",
        ),
        ("GET", "/v1/tokens", "/v1/tokens"),
        ("POST", "/v1/tokens", "/v1/tokens"),
        ("DELETE", "/v1/tokens/{id}", "/v1/tokens/{id}"),
        ("POST", "/v1/sessions:end", "/v1/sessions:end"),
        ("GET", "/v1/csv-jobs", "/v1/csv-jobs"),
        ("POST", "/v1/csv-jobs", "/v1/csv-jobs"),
        (
            "POST",
            "/v1/csv-jobs:clearFinished",
            "/v1/csv-jobs:clearFinished",
        ),
        ("GET", "/v1/csv-jobs/{id}", "/v1/csv-jobs/{id}"),
        ("DELETE", "/v1/csv-jobs/{id}", "/v1/csv-jobs/{id}"),
        ("POST", "/v1/csv-jobs/{id}:start", "/v1/csv-jobs/{id}"),
        ("POST", "/v1/csv-jobs/{id}:cancel", "/v1/csv-jobs/{id}"),
        (
            "GET",
            "/v1/csv-jobs/{id}:downloadAddress",
            "/v1/csv-jobs/{id}",
        ),
        ("PUT", "/v1/csv-jobs/{id}/input", "/v1/csv-jobs/{id}/input"),
        (
            "GET",
            "/v1/csv-jobs/{id}/output",
            "/v1/csv-jobs/{id}/output",
        ),
        ("GET", "/livez", "/livez"),
        ("GET", "/readyz", "/readyz"),
        ("GET", "/healthz", "/healthz"),
    ];

    /// The sources of the router's REST routes, and the routers
    /// `crate::router::router` merges (the UI's, Swagger's among them, are no
    /// REST routes).
    const ROUTE_SOURCES: [&str; 6] = [
        include_str!("../router.rs"),
        include_str!("../http/mod.rs"),
        include_str!("../http/rest.rs"),
        include_str!("../fhir/mod.rs"),
        include_str!("../http/tokens.rs"),
        include_str!("../http/jobs.rs"),
    ];
    const MERGED: [&str; 6] = [
        "http::rest::routes()",
        "fhir::routes()",
        "http::tokens::routes()",
        "http::jobs::routes()",
        "http::health_routes()",
        "ui::routes(&state)",
    ];

    fn document() -> Value {
        serde_json::from_str(&openapi_document()).expect("assets/openapi.json is JSON")
    }

    /// `(METHOD, path)` of every operation in the document.
    fn documented() -> BTreeSet<(String, String)> {
        let doc = document();
        let paths = doc["paths"].as_object().expect("paths");
        let mut ops = BTreeSet::new();
        for (path, item) in paths {
            for method in item.as_object().expect("a path item").keys() {
                if ["get", "put", "post", "delete", "patch", "head", "options"]
                    .contains(&method.as_str())
                {
                    ops.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        ops
    }

    /// The arguments of each call `name(…)` in `source` (up to the
    /// parenthesis that closes it).
    fn calls<'a>(source: &'a str, name: &str) -> Vec<&'a str> {
        let mut found = Vec::new();
        let mut rest = source;
        while let Some(at) = rest.find(name) {
            let args = &rest[at + name.len()..];
            let mut depth = 1;
            let end = args
                .char_indices()
                .find_map(|(i, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    (depth == 0).then_some(i)
                })
                .expect("a closed call");
            found.push(&args[..end]);
            rest = &args[end..];
        }
        found
    }

    /// `(METHOD, path)` of every `.route(path, get(…).post(…))` in `source`.
    fn routes_in(source: &str) -> BTreeSet<(String, String)> {
        let mut routes = BTreeSet::new();
        for args in calls(source, ".route(") {
            let path = args.split('"').nth(1).expect("a path literal");
            for method in ["get", "post", "put", "delete", "patch"] {
                // `get(…)`, `.post(…)`, `axum::routing::put(…)`, not `get_job(…)`.
                let call = format!("{method}(");
                let routed = args.match_indices(&call).any(|(i, _)| {
                    !args[..i]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if routed {
                    routes.insert((method.to_uppercase(), path.to_owned()));
                }
            }
        }
        routes
    }

    #[test]
    fn the_document_is_openapi_3_with_the_crates_version_and_a_bearer_scheme() {
        let doc = document();
        let version = doc["openapi"].as_str().expect("openapi");
        assert!(version.starts_with("3.0."), "{version}");
        assert_eq!(doc["info"]["title"], "vfps");
        assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
        assert!(!openapi_document().contains(VERSION_PLACEHOLDER));
        assert_eq!(
            doc["components"]["securitySchemes"]["bearer"],
            serde_json::json!({
                "type": "http",
                "scheme": "bearer",
                "description": doc["components"]["securitySchemes"]["bearer"]["description"],
            })
        );
        assert_eq!(doc["security"], serde_json::json!([{"bearer": []}]));
        // Every reference resolves (openapi-spec-validator checks this too,
        // in scripts/test.sh; this keeps `cargo test` alone honest).
        let text = openapi_document();
        for reference in text.split("\"$ref\": \"#/").skip(1) {
            let pointer = reference.split('"').next().expect("a closed string");
            assert!(
                doc.pointer(&format!("/{pointer}")).is_some(),
                "#/{pointer} is referenced but not defined"
            );
        }
    }

    #[test]
    fn the_document_names_exactly_the_routers_rest_routes() {
        let listed: BTreeSet<(String, String)> = REST_ROUTES
            .into_iter()
            .map(|(m, doc, _)| (m.to_owned(), doc.to_owned()))
            .collect();
        let documented = documented();
        assert_eq!(
            documented.difference(&listed).collect::<Vec<_>>(),
            Vec::<&(String, String)>::new(),
            "documented, but not a route of the router (REST_ROUTES)"
        );
        assert_eq!(
            listed.difference(&documented).collect::<Vec<_>>(),
            Vec::<&(String, String)>::new(),
            "a route of the router (REST_ROUTES) missing from assets/openapi.json"
        );

        let served: BTreeSet<(String, String)> = REST_ROUTES
            .into_iter()
            .map(|(m, _, route)| (m.to_owned(), route.to_owned()))
            .collect();
        let in_source: BTreeSet<(String, String)> =
            ROUTE_SOURCES.iter().flat_map(|s| routes_in(s)).collect();
        assert_eq!(
            in_source, served,
            "the routes in src/http/*.rs are not REST_ROUTES' (document a new route, then list it)"
        );
        // A router merged into the HTTP port's that this test does not read
        // would bring routes it never sees.
        let router_fn = ROUTE_SOURCES[0]
            .split("pub fn router(")
            .nth(1)
            .and_then(|body| body.split("\nfn ").next())
            .expect("crate::router::router");
        let merged: BTreeSet<&str> = calls(router_fn, ".merge(").into_iter().collect();
        assert_eq!(merged, BTreeSet::from(MERGED));
    }

    /// The HTTP port's router (authorization off, CSV jobs off) over a fresh
    /// SQLite file, removed on drop.
    struct HttpPort {
        router: Router,
        dir: PathBuf,
    }

    impl Drop for HttpPort {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Marks the answers no route gave.
    const UNROUTED: &str = "x-test-unrouted";

    async fn http_port() -> HttpPort {
        let dir = std::env::temp_dir().join(format!("vfps-swagger-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let flags = crate::config::Flags {
            sqlite_path: Some(dir.join("vfps.sqlite")),
            ..Default::default()
        };
        let (settings, _) =
            crate::config::Settings::load_in(Some(&dir), Vec::new(), &flags).unwrap();
        let store = crate::startup::open_store(&settings).await.unwrap();
        let metrics = crate::metrics::Metrics::new().unwrap();
        let auth = crate::auth::Auth::new(
            &settings.authorization,
            store.clone(),
            metrics.clone(),
            Arc::new(crate::auth::session::SessionKey::random()),
        );
        let state = AppState {
            service: crate::service::Service::new(
                store,
                settings.batching,
                settings.caching,
                metrics.clone(),
            ),
            jobs: crate::jobs::JobApi::new(
                Err("CSV jobs are off in this test".into()),
                auth.clone(),
                metrics.clone(),
            ),
            auth,
            metrics,
            ui: Arc::new(crate::ui::Ui::new(
                &settings.ui,
                &settings.authorization,
                false,
            )),
            health: Arc::default(),
            max_call_deadline: settings.calls.max_deadline,
            readiness_database_grace: settings.readiness.database_grace,
        };
        let router = crate::router::router(state, settings.calls.max_request_bytes, false)
            .fallback(|| async { (StatusCode::NOT_FOUND, [(UNROUTED, "1")]) });
        HttpPort { router, dir }
    }

    impl HttpPort {
        async fn call(&self, method: &str, path: &str) -> Response {
            let request = Request::builder()
                .method(Method::from_bytes(method.as_bytes()).unwrap())
                .uri(path)
                .body(Body::empty())
                .unwrap();
            self.router.clone().oneshot(request).await.unwrap()
        }

        /// Whether a route took `method path` (its handler may still refuse
        /// it, even with a 404 of its own: a namespace that does not exist).
        async fn routed(&self, method: &str, path: &str) -> bool {
            let r = self.call(method, path).await;
            r.status() != StatusCode::METHOD_NOT_ALLOWED && !r.headers().contains_key(UNROUTED)
        }
    }

    /// `path` with each `{parameter}` filled in.
    fn concrete(path: &str) -> String {
        let mut out = String::new();
        let mut rest = path;
        while let Some(open) = rest.find('{') {
            let close = rest[open..].find('}').expect("a closed parameter") + open;
            out.push_str(&rest[..open]);
            out.push('x');
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        out
    }

    #[tokio::test]
    async fn every_documented_operation_is_served_by_the_http_router() {
        let port = http_port().await;
        // The check itself tells an unrouted request from a routed one.
        assert!(!port.routed("GET", "/v1/no-such-route").await);
        assert!(!port.routed("PATCH", "/v1/namespaces").await);
        assert!(port.routed("GET", "/v1/namespaces/x").await);
        for (method, path) in documented() {
            assert!(
                port.routed(&method, &concrete(&path)).await,
                "{method} {path} is documented but not served"
            );
        }
    }

    async fn body_text(r: Response) -> String {
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn header_of(r: &Response, name: header::HeaderName) -> &str {
        r.headers()
            .get(&name)
            .unwrap_or_else(|| panic!("no {name}"))
            .to_str()
            .unwrap()
    }

    /// The values of attribute `name` in the tags `<tag …>` of `html`.
    fn attributes<'a>(html: &'a str, tag: &str, name: &str) -> Vec<Option<&'a str>> {
        html.split(&format!("<{tag}"))
            .skip(1)
            .map(|t| {
                let open = t.split('>').next().expect("a closed tag");
                open.split(&format!(" {name}=\""))
                    .nth(1)
                    .and_then(|v| v.split('"').next())
            })
            .collect()
    }

    #[tokio::test]
    async fn swagger_pages_forbid_inline_script_and_carry_their_headers() {
        let port = http_port().await;
        for path in ["/swagger", "/swagger/"] {
            let r = port.call("GET", path).await;
            assert_eq!(r.status(), StatusCode::PERMANENT_REDIRECT, "{path}");
            assert_eq!(header_of(&r, header::LOCATION), "/swagger/index.html");
            assert_eq!(
                header_of(&r, header::CONTENT_SECURITY_POLICY),
                CONTENT_SECURITY_POLICY
            );
        }

        let script_src = CONTENT_SECURITY_POLICY
            .split(';')
            .map(str::trim)
            .find(|d| d.starts_with("script-src "))
            .expect("a script-src directive");
        assert_eq!(script_src, "script-src 'self'");
        assert!(CONTENT_SECURITY_POLICY.contains("object-src 'none'"));
        assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));

        let r = port.call("GET", "/swagger/index.html").await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            header_of(&r, header::CONTENT_TYPE),
            "text/html; charset=utf-8"
        );
        assert_eq!(header_of(&r, header::CACHE_CONTROL), "no-cache");
        assert_eq!(header_of(&r, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
        assert_eq!(
            header_of(&r, header::CONTENT_SECURITY_POLICY),
            CONTENT_SECURITY_POLICY
        );
        let html = body_text(r).await;
        let scripts = attributes(&html, "script", "src");
        assert!(!scripts.is_empty());
        assert!(
            scripts.iter().all(Option::is_some),
            "an inline <script> in index.html"
        );
        for script in html.split("<script").skip(1) {
            let inner = script.split_once('>').expect("a closed tag").1;
            assert!(
                inner.starts_with("</script>"),
                "a script with a src has a body too"
            );
        }
        let handlers: Vec<&str> = html
            .split('<')
            .filter_map(|tag| tag.split('>').next())
            .flat_map(str::split_whitespace)
            .filter(|attribute| attribute.starts_with("on") && attribute.contains('='))
            .collect();
        assert!(handlers.is_empty(), "inline event handlers: {handlers:?}");

        // What the page loads is served, with the type and cache it should have.
        // (The icon is `data:,`: no request.)
        let styles: Vec<&str> = attributes(&html, "link", "href")
            .into_iter()
            .flatten()
            .filter(|href| !href.starts_with("data:"))
            .collect();
        // The start-up script fetches Swagger UI's stylesheet and bundle.
        let r = port.call("GET", "/swagger/swagger-init.js").await;
        let init = body_text(r).await;
        assert!(init.contains("url: \"/swagger/v1/swagger.json\""), "{init}");
        let fetched: Vec<&str> = init
            .split('"')
            .filter(|s| s.starts_with("/swagger/") && (s.ends_with(".js") || s.ends_with(".css")))
            .collect();
        assert_eq!(
            fetched,
            [
                "/swagger/swagger-overrides.css",
                "/swagger/swagger-ui.css",
                "/swagger/swagger-ui-bundle.js"
            ],
            "{init}"
        );
        let loaded = scripts
            .into_iter()
            .flatten()
            .chain(styles)
            .chain(fetched[1..].iter().copied());
        let mut seen = 0;
        for path in loaded {
            let r = port.call("GET", path).await;
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let want_type = if path.ends_with(".js") {
                "text/javascript; charset=utf-8"
            } else {
                "text/css; charset=utf-8"
            };
            assert_eq!(header_of(&r, header::CONTENT_TYPE), want_type, "{path}");
            let want_cache = if path.contains("swagger-ui") {
                "public, max-age=3600"
            } else {
                "no-cache"
            };
            assert_eq!(header_of(&r, header::CACHE_CONTROL), want_cache, "{path}");
            assert_eq!(header_of(&r, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
            seen += 1;
        }
        assert_eq!(
            seen, 4,
            "the start-up script and our stylesheet, then Swagger UI's stylesheet and bundle"
        );

        let r = port.call("GET", "/swagger/v1/swagger.json").await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            header_of(&r, header::CONTENT_TYPE),
            "application/json; charset=utf-8"
        );
        assert_eq!(header_of(&r, header::CACHE_CONTROL), "no-cache");
        assert_eq!(header_of(&r, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
        let served: Value = serde_json::from_str(&body_text(r).await).unwrap();
        assert_eq!(served, document());
    }

    #[test]
    fn the_page_lists_every_operation_of_the_document_by_tag() {
        let document = document();
        let page = index_page(&document);
        let mut listed = 0;
        for (path, item) in document["paths"].as_object().unwrap() {
            for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
                let entry = format!("{}</span> <code>{path}</code>", method.to_ascii_uppercase());
                assert!(page.contains(&entry), "{entry} is not listed");
                listed += 1;
            }
        }
        assert_eq!(page.matches("<li>").count(), listed, "an operation twice");
        assert!(listed >= 20, "{listed} operations");
        // Sections in the order the document declares its tags.
        let tags: Vec<&str> = document["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        let at: Vec<usize> = tags
            .iter()
            .map(|t| page.find(&format!("<h2>{t}</h2>")).expect(t))
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{tags:?} out of order");
        // Swagger UI's element comes after the list (the stylesheet hides it
        // while the list is there) and the start-up script removes the list.
        let (outline, ui) = (
            page.find("id=\"vfps-outline\"").unwrap(),
            page.find("id=\"swagger-ui\"").unwrap(),
        );
        assert!(outline < ui);
        let init = String::from_utf8_lossy(FILES[0].body);
        assert!(init.contains("outline.remove()"), "{init}");
        let css = include_str!("../../assets/swagger-overrides.css");
        assert!(css.contains(".vfps-outline ~ #swagger-ui { display: none; }"));
    }

    #[test]
    fn the_page_escapes_what_the_document_says() {
        let document = serde_json::json!({
            "info": {"title": "<script>alert(1)</script>", "version": "1\"><b>"},
            "tags": [{"name": "T<i>", "description": "a & b"}],
            "paths": {"/x/{<y>}": {"get": {"tags": ["T<i>"], "summary": "<img src=x onerror=alert(2)>"}}},
        });
        let page = index_page(&document);
        for raw in ["<script>alert", "<b>", "<i>", "<img", "{<y>}"] {
            assert!(!page.contains(raw), "{raw} unescaped in {page}");
        }
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("&lt;img src=x onerror=alert(2)&gt;"));
        assert!(page.contains("a &amp; b"));
    }

    #[test]
    fn the_vendored_files_are_those_their_sha256sums_name() {
        let sums = include_str!("../../assets/vendor/swagger-ui-dist/SHA256SUMS");
        for file in FILES.iter().filter(|f| f.cache_control == VENDORED) {
            let name = file.path.trim_start_matches("/swagger/");
            let want = sums
                .lines()
                .find_map(|l| l.strip_suffix(&format!("  {name}")))
                .unwrap_or_else(|| panic!("{name} is not in SHA256SUMS"));
            let got: String = Sha256::digest(file.body)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                got, want,
                "{name} differs from the vendored swagger-ui-dist"
            );
        }
    }
}
