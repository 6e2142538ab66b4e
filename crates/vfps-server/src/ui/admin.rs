//! `/ui/access-control` (who may do what: the configured admin roles and
//! namespace rules, and the signed-in user's rights per namespace, judged
//! by the API's own rules) and `/ui/tokens` (access tokens for services and
//! people: created with grants and an expiry and shown once, listed,
//! revoked — the admin API's checks and code).

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::Response,
    Form,
};
use maud::{html, Markup};
use serde::Deserialize;
use vfps_core::Error;

use super::{csrf_field, pseudonyms::timestamp, shown, CsrfOnly, Visit};
use crate::{auth::Operation, state::AppState, tokens};

fn roles(list: &[String]) -> Markup {
    html! {
        @if list.is_empty() { span class="note" { "none" } }
        @else { @for (i, r) in list.iter().enumerate() { @if i > 0 { ", " } code { (r) } } }
    }
}

fn yes_no(allowed: bool) -> Markup {
    html! { @if allowed { span class="ok" { "yes" } } @else { span class="note" { "no" } } }
}

pub async fn access_control(State(state): State<AppState>, visit: Visit) -> Response {
    let principal = match visit.require(&state).await {
        Ok(p) => p,
        Err(to_sign_in) => return to_sign_in,
    };
    let config = &state.ui.authorization;
    let namespaces = state.service.list_namespaces(visit.deadline).await;
    let may = |op, ns: &str| state.auth.authorize(&principal, op, Some(ns)).is_ok();
    visit.page(
        "Access control",
        html! {
            @if !state.auth.enabled() {
                p class="note" { "Authorization is off (Authorization__IsEnabled=false): everyone may do everything, as upstream's default." }
            }
            section aria-labelledby="you-heading" {
                h2 id="you-heading" { "Your rights" }
                p { "Admin (create and delete namespaces, manage access tokens): " (yes_no(state.auth.is_admin(&principal))) }
                @match &namespaces {
                    Err(e) => p role="alert" { (e.message) },
                    Ok(all) => {
                        @let visible: Vec<_> = all.iter().filter(|n| state.auth.may_see(&principal, n.name.as_str())).collect();
                        @if visible.is_empty() { p { "No namespace you may see." } }
                        @else {
                            table {
                                thead { tr { th scope="col" { "Namespace" } th scope="col" { "Read" } th scope="col" { "Write" } th scope="col" { "Reverse lookup" } } }
                                tbody {
                                    @for ns in visible {
                                        @let n = ns.name.as_str();
                                        tr {
                                            td { (n) }
                                            td { (yes_no(may(Operation::ListPseudonyms, n))) }
                                            td { (yes_no(may(Operation::CreatePseudonym, n))) }
                                            td { (yes_no(may(Operation::GetPseudonym, n))) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if state.auth.enabled() {
                section aria-labelledby="roles-heading" {
                    h2 id="roles-heading" { "Admin roles" }
                    p { (roles(&config.admin_roles)) }
                    p class="note" { "Roles are read from the " code { (config.role_claim_type) } " claim." }
                }
                section aria-labelledby="rules-heading" {
                    h2 id="rules-heading" { "Namespace rules" }
                    @if config.namespace_rules.is_empty() { p { "No namespace rules: only admins may use namespaces." } }
                    @else {
                        table {
                            thead { tr { th scope="col" { "Namespace" } th scope="col" { "Read roles" } th scope="col" { "Write roles" } th scope="col" { "Reverse-lookup roles" } th scope="col" { "Erase roles" } } }
                            tbody {
                                @for rule in &config.namespace_rules {
                                    tr {
                                        td { code { (rule.namespace) } }
                                        td { (roles(&rule.read_roles)) }
                                        td { (roles(&rule.write_roles)) }
                                        td { (roles(&rule.reverse_lookup_roles)) }
                                        td { (roles(&rule.erase_roles)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

pub async fn tokens(State(state): State<AppState>, visit: Visit) -> Response {
    render_tokens(&state, &visit, StatusCode::OK, html! {}).await
}

async fn render_tokens(
    state: &AppState,
    visit: &Visit,
    status: StatusCode,
    outcome: Markup,
) -> Response {
    if let Err(to_sign_in) = visit.require(state).await {
        return to_sign_in;
    }
    let d = visit.deadline;
    let allowed = crate::http::tokens::admin(state, visit.credential(), d).await;
    let listed = match &allowed {
        Ok(_) => Some(state.service.store().list_tokens().await),
        Err(_) => None,
    };
    let usable = allowed.is_ok();
    visit.page_status(
        status,
        "Access tokens",
        html! {
            (outcome)
            @if let Err(why) = &allowed { p class="note" { (why.message) } }
            section aria-labelledby="create-heading" {
                h2 id="create-heading" { "Create a token" }
                form method="post" action="/ui/tokens" class="grid" {
                    (csrf_field(visit))
                    fieldset disabled[!usable] {
                        label for="t-kind" { "Kind" }
                        select id="t-kind" name="kind" {
                            option value="service-account" { "Service account" }
                            option value="personal" { "Personal" }
                        }
                        label for="t-name" { "Name" }
                        input id="t-name" name="name" required maxlength="200" autocomplete="off";
                        label for="t-admin" class="check" {
                            input id="t-admin" name="admin" type="checkbox" value="true";
                            " Admin"
                        }
                        label for="t-grants" { "Grants" }
                        textarea id="t-grants" name="grants" rows="3" aria-describedby="t-grants-note" placeholder="research=read,write" {}
                        p id="t-grants-note" class="note" { "One a line: " code { "namespace=permission,…" } " (read, write, reverse-lookup; " code { "*" } " for every namespace). You can grant only rights you hold yourself." }
                        label for="t-expiry" { "Expires in (days)" }
                        input id="t-expiry" name="expires_in_days" type="number" min="1" max="3650" value="90";
                        button type="submit" { "Create token" }
                    }
                }
            }
            @if let Some(listed) = &listed {
                section aria-labelledby="list-heading" {
                    h2 id="list-heading" { "Tokens" }
                    @match listed {
                        Err(e) => p role="alert" { (e.message) },
                        Ok(all) if all.is_empty() => p { "No tokens yet." },
                        Ok(all) => table {
                            thead { tr {
                                th scope="col" { "Name" } th scope="col" { "Kind" } th scope="col" { "Admin" } th scope="col" { "Grants" }
                                th scope="col" { "Created" } th scope="col" { "Expires" } th scope="col" { "Revoke" }
                            } }
                            tbody {
                                @for t in all {
                                    tr {
                                        td { (t.name) br; code class="note" { (t.id) } }
                                        td { (t.kind.name()) }
                                        td { (yes_no(t.admin)) }
                                        td { @for g in &t.grants { code { (g.to_string()) } " " } }
                                        td { (timestamp(t.created_at)) }
                                        td { (t.expires_at.map(timestamp).unwrap_or_else(|| "never".into())) }
                                        td {
                                            @if let Some(r) = t.revoked_at { "revoked " (timestamp(r)) }
                                            @else {
                                                form method="post" action={ "/ui/tokens/" (t.id) "/revoke" } class="inline" {
                                                    (csrf_field(visit))
                                                    button type="submit" class="danger" aria-label={ "Revoke " (t.name) } { "Revoke" }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        },
                    }
                }
            }
        },
    )
}

#[derive(Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    admin: Option<String>,
    #[serde(default)]
    grants: String,
    #[serde(default)]
    expires_in_days: String,
}

pub async fn create_token(
    State(state): State<AppState>,
    visit: Visit,
    Form(f): Form<CreateForm>,
) -> Response {
    let outcome = async {
        visit.check_csrf(&state, &f.csrf)?;
        let minter =
            crate::http::tokens::manager(&state, visit.credential(), visit.deadline).await?;
        let grants: Vec<String> = f
            .grants
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        let expires_in = match f.expires_in_days.trim() {
            "" => None,
            raw => Some(raw.parse::<u64>().map_err(|_| {
                Error::invalid_argument(format!(
                    "expires in (days) must be a whole number, got {raw:?}"
                ))
            })?),
        }
        .map(|days| std::time::Duration::from_secs(days.saturating_mul(86_400)));
        let request = tokens::NewToken::parse(
            &f.kind,
            f.name.trim(),
            f.admin.as_deref() == Some("true"),
            &grants,
            expires_in,
        )?;
        tokens::mint(
            &state.auth,
            state.service.store().as_ref(),
            &minter,
            request,
        )
        .await
    }
    .await;
    let (status, outcome) = shown(outcome, |(record, secret)| {
        html! {
            div class="secret" {
                p { "Token " strong { (record.name) } " created. Copy it now: it is shown this once." }
                p { output id="result" { code { (secret.expose()) } } }
            }
        }
    });
    render_tokens(&state, &visit, status, outcome).await
}

pub async fn revoke_token(
    State(state): State<AppState>,
    visit: Visit,
    Path(id): Path<String>,
    Form(f): Form<CsrfOnly>,
) -> Response {
    let outcome = async {
        visit.check_csrf(&state, &f.csrf)?;
        let revoker =
            crate::http::tokens::manager(&state, visit.credential(), visit.deadline).await?;
        if !tokens::revoke_as(&state.auth, state.service.store().as_ref(), &revoker, &id).await? {
            return Err(Error::not_found(format!("no access token has id {id:?}")));
        }
        Ok(())
    }
    .await;
    let (status, outcome) = shown(outcome, |()| {
        html! { p { output id="result" { "Token " (id) " revoked." } } }
    });
    render_tokens(&state, &visit, status, outcome).await
}
