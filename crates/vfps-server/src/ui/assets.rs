//! The UI's own stylesheet and scripts, compiled into the binary: no build
//! step, no CDN. (Swagger UI's vendored files are served by [`super::swagger`].)

use axum::{
    extract::Path,
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};

/// `(name, content type, bytes)`.
const ASSETS: [(&str, &str, &str); 3] = [
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../../assets/ui/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/ui/app.js"),
    ),
    (
        "jobs.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/ui/jobs.js"),
    ),
];

pub async fn serve(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, kind, body)) => (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
                // An hour: a new version's pages may meet an old script for
                // that long, so scripts stay compatible across one release.
                (
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=3600"),
                ),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}
