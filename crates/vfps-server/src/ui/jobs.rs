//! `/ui/csv-jobs`: CSV jobs on the jobs API. The grid is rendered here (and
//! re-fetched by the page's script every two seconds for live progress);
//! a new job is made by the page's script, which reads the column names
//! from the file's header in the browser, creates the job through the REST
//! API with the session (see [`super::session_bridge`]), uploads the file to
//! where the API says (presigned to the object store, or through vfps) and
//! starts it. Download, cancel and clearing finished jobs are plain links
//! and forms.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    Form,
};
use maud::{html, Markup};
use vfps_proto::v1 as pb;
use vfps_store::jobs::JobState;

use super::{csrf_field, shown, CsrfOnly, Visit};
use crate::{auth::Operation, grpc::jobs::job_to_proto, state::AppState};

pub fn state_label(s: JobState) -> &'static str {
    match s {
        JobState::AwaitingUpload => "awaiting upload",
        JobState::Queued => "queued",
        JobState::Running => "running",
        JobState::Completed => "completed",
        JobState::Failed => "failed",
        JobState::Cancelled => "cancelled",
    }
}

fn finished(s: JobState) -> bool {
    matches!(
        s,
        JobState::Completed | JobState::Failed | JobState::Cancelled
    )
}

pub async fn page(State(state): State<AppState>, visit: Visit) -> Response {
    render(&state, &visit, StatusCode::OK, html! {}).await
}

async fn render(state: &AppState, visit: &Visit, status: StatusCode, outcome: Markup) -> Response {
    let principal = match visit.require(state).await {
        Ok(p) => p,
        Err(to_sign_in) => return to_sign_in,
    };
    let d = visit.deadline;
    let namespaces = state.service.list_namespaces(d).await.unwrap_or_default();
    let writable: Vec<&str> = namespaces
        .iter()
        .map(|n| n.name.as_str())
        .filter(|n| {
            state
                .auth
                .authorize(&principal, Operation::PseudonymizeFile, Some(n))
                .is_ok()
                || state
                    .auth
                    .authorize(&principal, Operation::DepseudonymizeFile, Some(n))
                    .is_ok()
        })
        .collect();
    let grid = grid_markup(state, visit).await;
    visit.page_status(
        status,
        "CSV jobs",
        html! {
            (outcome)
            @if let Err(why) = state.jobs.jobs() { p role="alert" { (why.message) } }
            section aria-labelledby="new-heading" {
                h2 id="new-heading" { "New job" }
                form id="new-job" class="grid" data-namespaces=(writable.join("\n")) {
                    label for="job-file" { "CSV file" }
                    input id="job-file" name="file" type="file" accept=".csv,text/csv" required;
                    label for="job-direction" { "Direction" }
                    select id="job-direction" name="direction" {
                        option value="CSV_JOB_DIRECTION_PSEUDONYMIZE" { "Pseudonymize" }
                        option value="CSV_JOB_DIRECTION_DEPSEUDONYMIZE" { "De-pseudonymize" }
                    }
                    label for="job-delimiter" { "Delimiter" }
                    input id="job-delimiter" name="delimiter" value="," maxlength="1" size="2";
                    label for="job-encoding" { "Encoding" }
                    select id="job-encoding" name="encoding" {
                        @for e in ["utf-8", "utf-16", "iso-8859-1", "windows-1252"] { option value=(e) { (e) } }
                    }
                    label for="job-header" class="check" {
                        input id="job-header" name="has_header_row" type="checkbox" checked;
                        " The first row is a header"
                    }
                    fieldset id="job-columns" {
                        legend { "Columns to map: choose a namespace for each (none: left as it is)" }
                        p class="note" { "Choose a file to see its columns." }
                    }
                    button type="submit" { "Start job" }
                    p id="job-status" role="status" {}
                }
                noscript { p class="note" { "A new job needs the page's script (it reads the file's header in your browser); the API and `vfps jobs submit` need none." } }
            }
            section aria-labelledby="grid-heading" {
                h2 id="grid-heading" { "Jobs" }
                form method="post" action="/ui/csv-jobs/clear" class="inline" {
                    (csrf_field(visit))
                    button type="submit" class="quiet" { "Clear finished" }
                }
                div id="jobs-grid" aria-live="polite" { (grid) }
            }
            script src="/ui/assets/jobs.js" defer {}
        },
    )
}

/// `GET /ui/csv-jobs/grid`: the grid alone, for the page's live refresh.
pub async fn grid(State(state): State<AppState>, visit: Visit) -> Response {
    // A session renewed here (the page's script asks for the grid to renew
    // one the API refused as due) reaches the browser with the answer.
    if visit.principal(&state).await.is_none() && state.auth.enabled() {
        return visit.with_cookie((StatusCode::UNAUTHORIZED, "sign in again").into_response());
    }
    let markup = grid_markup(&state, &visit).await;
    let mut response = markup.into_string().into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    visit.with_cookie(response)
}

async fn grid_markup(state: &AppState, visit: &Visit) -> Markup {
    let listed = state.jobs.list(visit.credential(), visit.deadline).await;
    html! {
        @match listed {
            Err(e) => p role="alert" { (e.message) },
            Ok(jobs) if jobs.is_empty() => p { "No jobs yet." },
            Ok(jobs) => table class="jobs" {
                thead { tr {
                    th scope="col" { "File" } th scope="col" { "Direction" } th scope="col" { "State" }
                    th scope="col" { "Progress" } th scope="col" class="num" { "Rows/s" } th scope="col" { "Warnings" } th scope="col" { "Actions" }
                } }
                tbody {
                    @for job in &jobs { (row(visit, job.state, &job_to_proto(job))) }
                }
            },
        }
    }
}

fn row(visit: &Visit, state: JobState, j: &pb::CsvJob) -> Markup {
    let percent = if j.total_bytes > 0 {
        (j.bytes_processed as f64 / j.total_bytes as f64 * 100.0).clamp(0.0, 100.0)
    } else if state == JobState::Completed {
        100.0
    } else {
        0.0
    };
    let direction = if j.direction == pb::CsvJobDirection::Depseudonymize as i32 {
        "de-pseudonymize"
    } else {
        "pseudonymize"
    };
    let name = if j.original_file_name.is_empty() {
        &j.id
    } else {
        &j.original_file_name
    };
    html! {
        tr data-job=(j.id) data-state=(state.name()) {
            td { (name) }
            td { (direction) }
            td { (state_label(state)) @if !j.error_message.is_empty() { br; span class="bad" { (j.error_message) } } }
            td {
                progress max="100" value=(format!("{percent:.0}")) aria-label={ "Progress of " (name) } { (format!("{percent:.0}%")) }
                " " (j.rows_processed) " rows"
            }
            td class="num" { @if j.rows_per_second > 0.0 { (format!("{:.0}", j.rows_per_second)) } }
            td {
                @if j.missing_value_count > 0 { (j.missing_value_count) " missing values" br; }
                @if j.malformed_row_count > 0 { (j.malformed_row_count) " malformed rows" br; }
                @if j.unknown_pseudonym_count > 0 { (j.unknown_pseudonym_count) " unknown pseudonyms" }
            }
            td {
                @if state == JobState::Completed {
                    a class="button" href={ "/ui/csv-jobs/" (j.id) "/download" } download aria-label={ "Download the result of " (name) } { "Download" }
                }
                @if !finished(state) {
                    form method="post" action={ "/ui/csv-jobs/" (j.id) "/cancel" } class="inline" {
                        (csrf_field(visit))
                        button type="submit" class="danger" aria-label={ "Cancel " (name) } { "Cancel" }
                    }
                }
            }
        }
    }
}

/// `GET /ui/csv-jobs/{id}/download`: the output through vfps, or off to
/// its presigned address in the object store (an audit event either way).
pub async fn download(
    State(state): State<AppState>,
    visit: Visit,
    Path(id): Path<String>,
) -> Response {
    if state.jobs.through_vfps() {
        let response = crate::http::jobs::download_response(&state, visit.credential(), &id).await;
        return visit.with_cookie(response);
    }
    match state
        .jobs
        .download_address(visit.credential(), &id, visit.deadline)
        .await
    {
        Ok(address) => visit.with_cookie(Redirect::to(&address.url).into_response()),
        Err(e) => visit.error_page("Download", &e),
    }
}

pub async fn cancel(
    State(state): State<AppState>,
    visit: Visit,
    Path(id): Path<String>,
    Form(f): Form<CsrfOnly>,
) -> Response {
    let outcome = async {
        visit.check_csrf(&state, &f.csrf)?;
        state
            .jobs
            .cancel(visit.credential(), &id, visit.deadline)
            .await
    }
    .await;
    let (status, outcome) = shown(outcome, |_| {
        html! { p { output id="result" { "Job cancelled: it stops within one checkpoint interval." } } }
    });
    render(&state, &visit, status, outcome).await
}

pub async fn clear(
    State(state): State<AppState>,
    visit: Visit,
    Form(f): Form<CsrfOnly>,
) -> Response {
    let outcome = async {
        visit.check_csrf(&state, &f.csrf)?;
        state
            .jobs
            .clear_finished(visit.credential(), visit.deadline)
            .await
    }
    .await;
    let (status, outcome) = shown(outcome, |n| {
        html! { p { output id="result" { (n) " finished job" @if n != 1 { "s" } " cleared." } } }
    });
    render(&state, &visit, status, outcome).await
}
