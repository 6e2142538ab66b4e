//! `/ui/`: where to go, and how things stand — namespaces and their
//! pseudonyms (as this replica last counted them: the counts are the
//! metrics' own, refreshed on their interval, so the page never scans a
//! table), jobs by state, the database's and this replica's health.

use axum::{extract::State, response::Response};
use maud::html;

use super::Visit;
use crate::{auth::Operation, state::AppState};

pub async fn page(State(state): State<AppState>, visit: Visit) -> Response {
    let principal = match visit.require(&state).await {
        Ok(p) => p,
        Err(to_sign_in) => return to_sign_in,
    };
    let d = visit.deadline;
    let namespaces = state.service.list_namespaces(d).await;
    let counts = state.metrics.pseudonym_counts();
    let jobs = state.jobs.list(visit.credential(), d).await;
    let ready = state.readiness();
    let database = state.health();
    visit.page(
        "Home",
        html! {
            p { "Pseudonyms for research data: stable, resolvable, and joined across sources." }
            ul class="cards" {
                li { a href="/ui/namespaces" { "Namespaces" } " — create, browse, delete" }
                li { a href="/ui/csv-jobs" { "CSV jobs" } " — pseudonymize and de-pseudonymize whole files" }
                li { a href="/ui/access-control" { "Access control" } " — roles, rules and your rights" }
                li { a href="/ui/tokens" { "Access tokens" } " — for services and scripts" }
                li { a href="/swagger" { "API docs" } " — the REST API, with Swagger UI" }
            }
            h2 { "Namespaces" }
            @match &namespaces {
                Ok(all) => {
                    @let visible: Vec<_> = all.iter().filter(|n| state.auth.may_see(&principal, n.name.as_str())).collect();
                    p { (visible.len()) " namespace" @if visible.len() != 1 { "s" } }
                    @if !visible.is_empty() {
                        table {
                            caption { "Pseudonyms per namespace, as this replica last counted them" }
                            thead { tr { th scope="col" { "Namespace" } th scope="col" class="num" { "Pseudonyms" } } }
                            tbody {
                                @for ns in &visible {
                                    tr {
                                        td {
                                            @if state.auth.authorize(&principal, Operation::ListPseudonyms, Some(ns.name.as_str())).is_ok() {
                                                a href={ "/ui/namespaces/" (super::url_encode(ns.name.as_str())) "/pseudonyms" } { (ns.name.as_str()) }
                                            } @else { (ns.name.as_str()) }
                                        }
                                        td class="num" {
                                            @match counts.iter().find(|(n, _)| n == ns.name.as_str()) {
                                                Some((_, c)) => (c),
                                                None => "not counted yet",
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                Err(e) => p role="alert" { (e.message) },
            }
            h2 { "CSV jobs" }
            @match &jobs {
                Ok(list) => {
                    ul class="figures" {
                        @for s in vfps_store::jobs::JobState::ALL {
                            li { span class="figure" { (list.iter().filter(|j| j.state == s).count()) } " " (super::jobs::state_label(s)) }
                        }
                    }
                }
                Err(e) => p { "Jobs are not available here: " (e.message) },
            }
            h2 { "Health" }
            dl class="health" {
                dt { "This replica" }
                dd { @match &ready { Ok(()) => span class="ok" { "ready" }, Err(why) => span class="bad" { "not ready: " (why) } } }
                dt { "Database" }
                dd { @match &database { Ok(()) => span class="ok" { "reachable" }, Err(why) => span class="bad" { (why) } } }
            }
        },
    )
}
