//! `/ui/namespaces`: the namespaces the user may see; creating one (method
//! dropdown, the length locked for fixed-length methods) and deleting one
//! after typing its name, for admins — for others those controls are
//! disabled, not merely refused.

use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::Response,
    Form,
};
use maud::{html, Markup};
use serde::Deserialize;
use vfps_core::{Error, GenerationMethod};

use super::{csrf_field, shown, url_encode, Visit};
use crate::{
    auth::{Operation, Principal},
    service::NewNamespace,
    state::AppState,
};

/// The methods offered, in upstream's order, with the names users know.
pub const METHODS: [(GenerationMethod, &str); 7] = [
    (
        GenerationMethod::SecureRandomBase64UrlEncoded,
        "Secure random, base64url",
    ),
    (GenerationMethod::Sha256HexEncoded, "SHA-256, hex"),
    (GenerationMethod::Uuid4, "UUID v4"),
    (GenerationMethod::Uuid7, "UUID v7"),
    (GenerationMethod::FullRandomHexEncoded, "Full random, hex"),
    (
        GenerationMethod::FullRandomBase62Encoded,
        "Full random, base62",
    ),
    (
        GenerationMethod::HmacSha256HexEncoded,
        "HMAC-SHA-256, hex (keyed)",
    ),
];

/// The length offered for methods whose length is the user's.
const DEFAULT_LENGTH: u32 = 32;

pub fn method_label(m: GenerationMethod) -> &'static str {
    METHODS
        .iter()
        .find(|(x, _)| *x == m)
        .map_or("Unspecified (secure random)", |(_, l)| l)
}

pub async fn page(State(state): State<AppState>, visit: Visit) -> Response {
    render(&state, &visit, StatusCode::OK, html! {}).await
}

/// The page, with `outcome` (a result or a refusal) above the list.
async fn render(state: &AppState, visit: &Visit, status: StatusCode, outcome: Markup) -> Response {
    let principal = match visit.require(state).await {
        Ok(p) => p,
        Err(to_sign_in) => return to_sign_in,
    };
    let admin = state.auth.is_admin(&principal);
    let listed = state.service.list_namespaces(visit.deadline).await;
    // What a delete would erase, as this replica last counted it.
    let counts = state.metrics.pseudonym_counts();
    visit.page_status(
        status,
        "Namespaces",
        html! {
            (outcome)
            section aria-labelledby="create-heading" {
                h2 id="create-heading" { "Create a namespace" }
                @if !admin { p class="note" { "Creating namespaces needs an admin role." } }
                form method="post" action="/ui/namespaces" class="grid" {
                    (csrf_field(visit))
                    fieldset disabled[!admin] {
                        label for="ns-name" { "Name" }
                        input id="ns-name" name="name" required maxlength="256" autocomplete="off";
                        label for="ns-method" { "Method" }
                        select id="ns-method" name="method" {
                            @for (m, label) in METHODS {
                                option value=(m.to_wire()) data-fixed-length=[m.fixed_length()] { (label) }
                            }
                        }
                        label for="ns-length" { "Length" }
                        input id="ns-length" name="length" type="number" min="1" max="1000" value=(DEFAULT_LENGTH)
                            aria-describedby="ns-length-note";
                        p id="ns-length-note" class="note" { "SHA-256 is always 64 characters and UUIDs 36: for them the length is fixed." }
                        label for="ns-prefix" { "Prefix" }
                        input id="ns-prefix" name="prefix" maxlength="256" autocomplete="off";
                        label for="ns-suffix" { "Suffix" }
                        input id="ns-suffix" name="suffix" maxlength="256" autocomplete="off";
                        label for="ns-description" { "Description" }
                        textarea id="ns-description" name="description" rows="2" maxlength="4096" {}
                        label for="ns-system" { "Originals' identifier system" }
                        input id="ns-system" name="system" maxlength="1024" autocomplete="off" inputmode="url"
                            placeholder="https://hospital.example/patient-id" aria-describedby="ns-system-note";
                        p id="ns-system-note" class="note" { "The system of the identifiers this namespace pseudonymizes: an MII original of another system is refused. Empty: the first FHIR pseudonymization that names one sets it." }
                        label class="check" for="ns-deletable" {
                            input id="ns-deletable" type="checkbox" name="deletable" value="true";
                            " Entries may be deleted (an original's entry erased for good; off: only anonymized)"
                        }
                        label class="check" for="ns-multi" {
                            input id="ns-multi" type="checkbox" name="multi" value="true";
                            " Many pseudonyms per original (a multi-pseudonym namespace, for $pseudonymize-multiple; random pseudonyms only)"
                        }
                        button type="submit" { "Create namespace" }
                    }
                }
            }
            section aria-labelledby="list-heading" {
                h2 id="list-heading" { "Namespaces" }
                @match &listed {
                    Err(e) => p role="alert" { (e.message) },
                    Ok(all) => {
                        @let visible: Vec<_> = all.iter().filter(|n| state.auth.may_see(&principal, n.name.as_str())).collect();
                        @if visible.is_empty() { p { "No namespaces yet." } }
                        @else {
                            table {
                                thead { tr {
                                    th scope="col" { "Name" } th scope="col" { "Method" } th scope="col" class="num" { "Length" }
                                    th scope="col" { "Prefix" } th scope="col" { "Suffix" } th scope="col" { "Pseudonyms per original" } th scope="col" { "Originals' system" } th scope="col" { "Description" } th scope="col" { "Delete" }
                                } }
                                tbody {
                                    @for ns in visible { (row(state, visit, &principal, admin, ns, &counts)) }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

fn row(
    state: &AppState,
    visit: &Visit,
    principal: &Arc<Principal>,
    admin: bool,
    ns: &vfps_core::Namespace,
    counts: &[(String, i64)],
) -> Markup {
    let name = ns.name.as_str();
    let erases = match counts.iter().find(|(n, _)| n == name) {
        Some((_, 1)) => "which erases its 1 pseudonym for good (as last counted)".to_owned(),
        Some((_, c)) => format!("which erases its {c} pseudonyms for good (as last counted)"),
        None => "which erases all its pseudonyms for good".to_owned(),
    };
    let s = &ns.settings;
    let browse = state
        .auth
        .authorize(principal, Operation::ListPseudonyms, Some(name))
        .is_ok();
    html! {
        tr {
            td { @if browse { a href={ "/ui/namespaces/" (url_encode(name)) "/pseudonyms" } { (name) } } @else { (name) } }
            td { (method_label(s.method)) }
            td class="num" { (s.length) }
            td { (s.prefix.as_deref().unwrap_or("")) }
            td { (s.suffix.as_deref().unwrap_or("")) }
            td { @if s.multi { "many" } @else { "one" } }
            td { (s.original_system.as_deref().unwrap_or("")) }
            td { (ns.description) }
            td {
                form method="post" action={ "/ui/namespaces/" (url_encode(name)) "/delete" } class="inline" {
                    (csrf_field(visit))
                    fieldset disabled[!admin] class="inline" {
                        label for={ "confirm-" (name) } class="visually-hidden" { "Type the name to confirm" }
                        input id={ "confirm-" (name) } name="confirm" placeholder="Type the name to confirm"
                            required autocomplete="off" aria-label={ "Type " (name) " to confirm its deletion, " (erases) }
                            aria-describedby={ "erases-" (name) };
                        span id={ "erases-" (name) } class="note" { "Erases " (erases.trim_start_matches("which erases ")) }
                        button type="submit" class="danger" aria-label={ "Delete " (name) } { "Delete" }
                    }
                }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    method: String,
    #[serde(default)]
    length: String,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    suffix: String,
    #[serde(default)]
    description: String,
    /// `true` when "entries may be deleted" is ticked.
    #[serde(default)]
    deletable: Option<String>,
    /// `true` when "many pseudonyms per original" is ticked.
    #[serde(default)]
    multi: Option<String>,
    /// The originals' identifier system (blank: none declared).
    #[serde(default)]
    system: String,
}

pub async fn create(
    State(state): State<AppState>,
    visit: Visit,
    Form(f): Form<CreateForm>,
) -> Response {
    let outcome = async {
        visit.check_csrf(&state, &f.csrf)?;
        let d = visit.deadline;
        state
            .auth
            .check(visit.credential(), Operation::CreateNamespace, None, d)
            .await?;
        let method = f
            .method
            .parse::<i32>()
            .ok()
            .and_then(GenerationMethod::from_wire)
            .ok_or_else(|| Error::invalid_argument(format!("unknown method {:?}", f.method)))?;
        let length = match (f.length.trim(), method.fixed_length()) {
            ("", Some(fixed)) => fixed,
            ("", None) => DEFAULT_LENGTH,
            (raw, _) => raw.parse::<u32>().map_err(|_| {
                Error::invalid_argument(format!("the length must be a whole number, got {raw:?}"))
            })?,
        };
        let blank_none = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        state
            .service
            .create_namespace(
                NewNamespace {
                    name: f.name.trim().to_owned(),
                    method: method.to_wire(),
                    length,
                    prefix: blank_none(&f.prefix),
                    suffix: blank_none(&f.suffix),
                    description: f.description.clone(),
                    deletable: f.deletable.as_deref() == Some("true"),
                    multi: f.multi.as_deref() == Some("true"),
                    original_system: blank_none(f.system.trim()),
                },
                d,
            )
            .await
    }
    .await;
    let (status, outcome) = shown(outcome, |ns| {
        html! {
            p { output id="result" { "Namespace " (ns.name.as_str()) " created." } }
            @if let Some(reveals) = ns.settings.method.reveals() {
                p class="warning" role="note" { "Note: " (reveals) "." }
            }
        }
    });
    render(&state, &visit, status, outcome).await
}

#[derive(Deserialize)]
pub struct DeleteForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    confirm: String,
}

pub async fn delete(
    State(state): State<AppState>,
    visit: Visit,
    Path(name): Path<String>,
    Form(f): Form<DeleteForm>,
) -> Response {
    let outcome = async {
        visit.check_csrf(&state, &f.csrf)?;
        if f.confirm.trim() != name {
            return Err(Error::invalid_argument(format!(
                "type the namespace's name ({name}) to confirm its deletion"
            )));
        }
        state
            .delete_namespace(visit.credential(), &name, visit.deadline)
            .await
    }
    .await;
    let (status, outcome) = shown(outcome, |erased| {
        html! { p { output id="result" { "Namespace " (name) " deleted; " (erased) " pseudonym" @if erased != 1 { "s" } " erased with it." } } }
    });
    render(&state, &visit, status, outcome).await
}
