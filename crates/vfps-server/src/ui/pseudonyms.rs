//! `/ui/namespaces/{name}/pseudonyms`: create one, look one up, and the
//! namespace's pseudonyms 25 a page (keyset paging, so the thousandth page
//! of a million-row namespace costs what the first does). Originals are
//! never listed: each row's "Reveal" is a reverse lookup (reverse-lookup
//! rights, an audit event), answered in the page, never in an address.
//! "Erase" removes one original's entry (erase rights, an audit event) after
//! the namespace's name is typed: anonymized for good, or deleted where the
//! namespace allows it.

use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::Response,
    Form,
};
use maud::{html, Markup};
use serde::Deserialize;

use super::{csrf_field, shown, url_encode, Visit};
use crate::{auth::Operation, state::AppState};

/// Pseudonyms a page.
pub const PAGE_SIZE: i32 = 25;

#[derive(Deserialize, Default)]
pub struct PageQuery {
    /// The keyset position: the API's page token (it names the last
    /// pseudonym of the page before, never an original).
    #[serde(default)]
    after: String,
}

pub async fn page(
    State(state): State<AppState>,
    visit: Visit,
    Path(name): Path<String>,
    Query(q): Query<PageQuery>,
) -> Response {
    let d = visit.deadline;
    render(&state, &visit, &name, &q.after, d, StatusCode::OK, html! {}).await
}

/// The page, its calls done by `d` (one deadline for the whole request,
/// the form's call included).
async fn render(
    state: &AppState,
    visit: &Visit,
    name: &str,
    after: &str,
    d: std::time::Instant,
    status: StatusCode,
    outcome: Markup,
) -> Response {
    let principal = match visit.require(state).await {
        Ok(p) => p,
        Err(to_sign_in) => return to_sign_in,
    };
    let may = |op| state.auth.authorize(&principal, op, Some(name)).is_ok();
    let (write, reveal, erase) = (
        may(Operation::CreatePseudonym),
        may(Operation::GetPseudonym),
        may(Operation::ErasePseudonym),
    );
    let listed = state.auth.audited(
        visit.credential(),
        Operation::ListPseudonyms,
        name,
        d,
        state
            .service
            .list_pseudonyms(name, PAGE_SIZE, after, false, d),
        |p| p.items.len() as u64,
    );
    let listed = listed.await;
    let base = format!("/ui/namespaces/{}", url_encode(name));
    visit.page_status(
        status,
        &format!("Pseudonyms in {name}"),
        html! {
            p { a href="/ui/namespaces" { "All namespaces" } }
            (outcome)
            div class="two" {
                section aria-labelledby="create-heading" {
                    h2 id="create-heading" { "Create a pseudonym" }
                    form method="post" action={ (base) "/pseudonyms" } {
                        (csrf_field(visit))
                        input type="hidden" name="after" value=(after);
                        fieldset disabled[!write] {
                            label for="original" { "Original value" }
                            input id="original" name="original" required autocomplete="off" spellcheck="false";
                            button type="submit" { "Create pseudonym" }
                        }
                    }
                    @if !write { p class="note" { "Creating pseudonyms here needs write rights in this namespace." } }
                }
                section aria-labelledby="lookup-heading" {
                    h2 id="lookup-heading" { "Reverse lookup" }
                    form method="post" action={ (base) "/lookup" } {
                        (csrf_field(visit))
                        input type="hidden" name="after" value=(after);
                        fieldset disabled[!reveal] {
                            label for="pseudonym" { "Pseudonym" }
                            input id="pseudonym" name="pseudonym" required autocomplete="off" spellcheck="false";
                            button type="submit" { "Look up" }
                        }
                    }
                    @if !reveal { p class="note" { "Reverse lookup needs reverse-lookup rights in this namespace." } }
                }
            }
            section aria-labelledby="erase-heading" {
                h2 id="erase-heading" { "Erase an original's entry" }
                form method="post" action={ (base) "/erase" } class="grid" {
                    (csrf_field(visit))
                    input type="hidden" name="after" value=(after);
                    fieldset disabled[!erase] {
                        label for="erase-original" { "Original to erase" }
                        input id="erase-original" name="original" required autocomplete="off" spellcheck="false";
                        fieldset {
                            legend { "How" }
                            label class="check" for="erase-anonymize" {
                                input id="erase-anonymize" type="radio" name="mode" value="anonymize" checked;
                                " Anonymize: the link is gone for good, the pseudonym stays reserved"
                            }
                            label class="check" for="erase-delete" {
                                input id="erase-delete" type="radio" name="mode" value="delete";
                                " Delete the entry (where the namespace allows it; the original may get a new pseudonym)"
                            }
                        }
                        // `confirm-<name>`: the page's script enables the
                        // button once the name is typed (the server checks too).
                        label for={ "confirm-" (name) } { "Type the namespace's name to confirm" }
                        input id={ "confirm-" (name) } name="confirm" required autocomplete="off" spellcheck="false";
                        button type="submit" { "Erase" }
                    }
                }
                @if !erase { p class="note" { "Erasing needs erase rights in this namespace." } }
            }
            section aria-labelledby="list-heading" {
                h2 id="list-heading" { "Pseudonyms" }
                @match &listed {
                    Err(e) => p role="alert" { (e.message) },
                    Ok(page) => {
                        @if page.items.is_empty() { p { "No pseudonyms " @if !after.is_empty() { "after this point" } @else { "yet" } "." } }
                        @else {
                            table {
                                thead { tr { th scope="col" { "Pseudonym" } th scope="col" { "Created" } th scope="col" { "Original" } } }
                                tbody {
                                    @for p in &page.items {
                                        tr {
                                            td { code { (p.pseudonym_value) } }
                                            td { (timestamp(vfps_core::shown_time(p.created_at))) }
                                            td {
                                                form method="post" action={ (base) "/reveal" } class="inline" {
                                                    (csrf_field(visit))
                                                    input type="hidden" name="after" value=(after);
                                                    input type="hidden" name="pseudonym" value=(p.pseudonym_value);
                                                    button type="submit" class="quiet" disabled[!reveal]
                                                        aria-label={ "Reveal the original of " (p.pseudonym_value) } { "Reveal" }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        nav aria-label="Pages" class="pager" {
                            @if !after.is_empty() { a href={ (base) "/pseudonyms" } { "First page" } }
                            @if let Some(next) = &page.next {
                                a href={ (base) "/pseudonyms?after=" (url_encode(&next.encode())) } rel="next" { "Next page" }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// A time as UTC, to the second.
pub fn timestamp(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let ts = pbjson_types::Timestamp {
        seconds: secs,
        nanos: 0,
    };
    serde_json::to_value(ts)
        .ok()
        .and_then(|v| v.as_str().map(|s| s.replace('T', " ").replace('Z', " UTC")))
        .unwrap_or_default()
}

#[derive(Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    original: String,
    #[serde(default)]
    after: String,
}

pub async fn create(
    State(state): State<AppState>,
    visit: Visit,
    Path(name): Path<String>,
    Form(f): Form<CreateForm>,
) -> Response {
    let d = visit.deadline;
    let outcome = async {
        visit.check_csrf(&state, &f.csrf)?;
        state
            .auth
            .check(
                visit.credential(),
                Operation::CreatePseudonym,
                Some(&name),
                d,
            )
            .await?;
        // In a multi-pseudonym namespace each Create makes one more.
        let ns = state.service.get_namespace(&name, d).await?;
        if ns.settings.multi {
            let made = state
                .service
                .pseudonymize_multiple(&name, &f.original, 1, d)
                .await?;
            return made
                .into_iter()
                .next()
                .ok_or_else(|| vfps_core::Error::internal("no pseudonym was made"));
        }
        state.service.create_pseudonym(&name, &f.original, d).await
    }
    .await;
    let (status, outcome) = shown(outcome, |p| {
        html! { p { "The pseudonym: " output id="result" { code { (p.pseudonym_value) } } } }
    });
    render(&state, &visit, &name, &f.after, d, status, outcome).await
}

#[derive(Deserialize)]
pub struct LookupForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    pseudonym: String,
    #[serde(default)]
    after: String,
}

/// `…/lookup` and `…/reveal`: a reverse lookup, audited as the API's.
pub async fn lookup(
    State(state): State<AppState>,
    visit: Visit,
    Path(name): Path<String>,
    Form(f): Form<LookupForm>,
) -> Response {
    let d = visit.deadline;
    let outcome = async {
        visit.check_csrf(&state, &f.csrf)?;
        let call = state.service.get_pseudonym(&name, f.pseudonym.trim(), d);
        state
            .auth
            .audited(
                visit.credential(),
                Operation::GetPseudonym,
                &name,
                d,
                call,
                |_| 1,
            )
            .await
    }
    .await;
    let (status, outcome) = shown(outcome, |p| {
        html! {
            p { "The original of " code { (p.pseudonym_value) } ": "
                output id="result" { (p.original_value) } }
        }
    });
    render(&state, &visit, &name, &f.after, d, status, outcome).await
}

#[derive(Deserialize)]
pub struct EraseForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    original: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    confirm: String,
    #[serde(default)]
    after: String,
}

/// `…/erase`: one original's entry erased, audited as the API's.
pub async fn erase(
    State(state): State<AppState>,
    visit: Visit,
    Path(name): Path<String>,
    Form(f): Form<EraseForm>,
) -> Response {
    use crate::service::Erasure;
    let d = visit.deadline;
    let outcome = async {
        visit.check_csrf(&state, &f.csrf)?;
        let how = match f.mode.as_str() {
            "anonymize" => Erasure::Anonymize,
            "delete" => Erasure::Delete,
            other => {
                return Err(vfps_core::Error::invalid_argument(format!(
                    "how to erase must be anonymize or delete, got {other:?}"
                )))
            }
        };
        if f.confirm.trim() != name {
            return Err(vfps_core::Error::invalid_argument(format!(
                "type the namespace's name ({name}) to confirm the erasure"
            )));
        }
        let call = state.service.erase(&name, &f.original, how, d);
        state
            .auth
            .audited(
                visit.credential(),
                Operation::ErasePseudonym,
                &name,
                d,
                call,
                |_| 1,
            )
            .await
            .map(|()| how)
    }
    .await;
    let (status, outcome) = shown(outcome, |how| {
        html! { p { output id="result" { @match how {
            crate::service::Erasure::Anonymize => "Anonymized: the entry resolves to no one any more.",
            crate::service::Erasure::Delete => "Deleted: the entry is gone.",
        } } } }
    });
    render(&state, &visit, &name, &f.after, d, status, outcome).await
}
