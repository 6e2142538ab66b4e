//! P10's probe: what the load alone cannot show about what pseudonyms
//! reveal, asked outside the load window so it does not disturb what the
//! run measures.
//!
//! - **Early round** (before the load window) and **late round** (after
//!   verification, at least `rounds_apart` later: 70 s unless configured,
//!   longer than the 65.5 s a millisecond clock's third byte takes to
//!   change, so a clock in the pseudonym differs): for every random
//!   method, [`PER_GROUP`] pseudonyms made through each replica in a
//!   namespace of that method (`<namespace>-p10-<method>`). P10 compares
//!   their positions' symbols round against round and replica against
//!   replica.
//! - **Orders** (late): in a UUIDv7 namespace (`<namespace>-p10-ordered`,
//!   whose pseudonyms carry the order they were made in), a transaction and
//!   a batch Bundle of [`BUNDLE`] sequential originals through each replica,
//!   and a CSV job of [`JOB_ROWS`] sorted ones when the run has jobs; in a random
//!   namespace (`<namespace>-p10-listed`), [`LISTED`] sequential originals
//!   made one after another, then listed in pages.
//! - **Siblings** (late): [`SIBLING_CREATES`] `$pseudonymize-multiple` of
//!   [`SIBLING_COUNT`] one after another in a multi-pseudonym namespace
//!   (`<namespace>-p10-multi`), and the load's own multi creates; the times
//!   List shows for each.
//!
//! Every call is bounded; a refused or failed one becomes a note (and the
//! checker, missing its samples, says unknown rather than valid).

use std::{collections::HashMap, time::Duration};

use futures::StreamExt;
use serde_json::{json, Value};
use tokio::time::Instant;
use vfps_client::{Client, Endpoints, Outcome, RetryPolicy};
use vfps_proto::v1::{NamespaceServiceCreateRequest, PseudonymServiceListRequest};

use super::{
    jobs::Jobs,
    mii::{fhir, multi::pseudonyms_of},
};
use crate::{
    checker::{
        jobs::JobObservation,
        privacy::{Made, Observed, Order, OrderKind, PairSeen, Round, Siblings},
    },
    config::LoadConfig,
    history::{
        erasures::{ErasureHistory, Meaning},
        multi::MultiCreate,
    },
};

/// The random methods: (name, wire number, length).
pub const METHODS: [(&str, i32, u32); 4] = [
    ("base64url", 1, 32),
    ("hex", 5, 32),
    ("base62", 6, 32),
    ("uuid4", 3, 36),
];
const UUID7: i32 = 4;
/// Pseudonyms per method, replica and round: with three replicas, 600 a
/// round and 400 a replica, enough for a chi-square of 64 symbols per
/// position (at least 5 expected in every cell).
pub const PER_GROUP: usize = 200;
/// Creates in flight at once.
const CONCURRENCY: usize = 16;
/// Entries of each probe Bundle.
const BUNDLE: usize = 100;
/// Rows of the probe job: one batch of the job runner's, even when it
/// yields to interactive calls (`vfps_jobs::runner::YIELDING_BATCH_ROWS`).
/// A UUIDv7 pseudonym carries the order its batch was made in, so across
/// batches a job's pseudonyms follow its input's order (the caller's, as
/// Creates sent one after another do); within one, nothing may.
const JOB_ROWS: usize = 25;
/// Sequential originals made one after another, then listed.
const LISTED: usize = 100;
/// `$pseudonymize-multiple` calls and their count.
const SIBLING_CREATES: usize = 60;
const SIBLING_COUNT: u32 = 3;
/// Strangers are made at most this far apart (microseconds).
const STRANGERS_WITHIN_MICROS: u64 = 1_000_000;
/// Deadline of one call.
const CALL: Duration = Duration::from_secs(10);

/// The probe's addresses and names.
pub struct Probe {
    /// One client per replica.
    pub replicas: Vec<Client>,
    /// A client over all of them.
    pub any: Client,
    /// vfps's HTTP addresses, one per replica where they can be told apart.
    pub http_bases: Vec<String>,
    /// `RESILIENCE_HTTP_ADDRESS`, for the probe job.
    pub http_address: Option<String>,
    /// The run's namespace: the probe's are named after it.
    pub namespace: String,
    pub seed: u64,
    /// Whether the run has CSV jobs (the probe job needs them).
    pub jobs: bool,
    /// The least distance between the rounds.
    pub rounds_apart: Duration,
}

/// The early round's pseudonyms, and when it ended.
pub struct Early {
    made: Vec<Made>,
    notes: Vec<String>,
    at: Instant,
}

impl Probe {
    /// Over the run's replicas, with its credentials.
    pub fn for_run(cfg: &LoadConfig, endpoints: &Endpoints, seed: u64) -> anyhow::Result<Self> {
        let bearer = cfg.credentials.bearer()?;
        let replicas: Vec<Client> = endpoints
            .each()?
            .into_iter()
            .map(|e| Client::new(e, RetryPolicy::verification()).with_bearer(bearer.as_deref()))
            .collect::<Result<_, _>>()?;
        let any = Client::new(endpoints.clone(), RetryPolicy::verification())
            .with_bearer(bearer.as_deref())?;
        Ok(Self {
            http_bases: super::mii::http_bases(&any, cfg.workload.http_address.as_deref()),
            replicas,
            any,
            http_address: cfg.workload.http_address.clone(),
            namespace: cfg.service.namespace.clone(),
            seed,
            jobs: cfg.workload.job_rows > 0,
            rounds_apart: Duration::from_secs(cfg.workload.privacy_rounds_apart_seconds),
        })
    }

    /// [`Probe::late`], with the orders of the load's own jobs and batch
    /// Bundles and its multi creates: what P10 judges beside the ledger.
    pub async fn late_with_load(
        &self,
        early: Early,
        erasures: Option<&ErasureHistory>,
        jobs: Option<&[JobObservation]>,
    ) -> Observed {
        let multi = erasures
            .and_then(|h| h.multi.as_ref())
            .map(|m| (m.namespace.as_str(), m.creates.as_slice()));
        let mut observed = self.late(early, multi).await;
        observed.orders.extend(
            jobs.unwrap_or_default()
                .iter()
                .filter(|j| j.output.is_some())
                .map(|j| {
                    Order::of_originals(
                        OrderKind::Job,
                        format!("job {}", j.id),
                        crate::checker::jobs::pairs(j),
                    )
                }),
        );
        observed.orders.extend(
            erasures
                .into_iter()
                .flat_map(|h| h.bundles.iter().filter_map(|b| b.order.clone())),
        );
        observed
    }

    fn named(&self, what: &str) -> String {
        format!("{}-p10-{what}", self.namespace)
    }

    async fn ensure(
        &self,
        name: &str,
        method: i32,
        length: u32,
        multi: bool,
    ) -> Result<(), String> {
        let created = self
            .any
            .ensure_namespace(
                NamespaceServiceCreateRequest {
                    name: name.to_owned(),
                    pseudonym_generation_method: method,
                    pseudonym_length: length,
                    description: "created by vfps-chaos: the P10 probe".into(),
                    pseudonym_deletion_allowed: Some(true),
                    multi_pseudonym: multi.then_some(true),
                    ..Default::default()
                },
                CALL,
            )
            .await;
        match created {
            Outcome::Ok(()) => Ok(()),
            other => Err(format!("namespace {name} not created: {:?}", other.code())),
        }
    }

    /// One round: every random method through every replica.
    async fn round(&self, round: Round, notes: &mut Vec<String>) -> Vec<Made> {
        let mut made = Vec::new();
        for (method, number, length) in METHODS {
            let name = self.named(method);
            if let Err(e) = self.ensure(&name, number, length, false).await {
                notes.push(e);
                continue;
            }
            for (replica, client) in self.replicas.iter().enumerate() {
                let name = &name;
                let answers: Vec<Option<String>> = futures::stream::iter(0..PER_GROUP)
                    .map(|k| async move {
                        let original =
                            format!("p10-{:x}-{method}-{round:?}-{replica}-{k}", self.seed);
                        match client.create(name, &original, CALL).await {
                            Outcome::Ok(p) => Some(p.pseudonym_value),
                            _ => None,
                        }
                    })
                    .buffer_unordered(CONCURRENCY)
                    .collect()
                    .await;
                let failed = answers.iter().filter(|a| a.is_none()).count();
                if failed > 0 {
                    notes.push(format!(
                        "{method} through replica {replica} ({round:?}): {failed} of {PER_GROUP} creates failed"
                    ));
                }
                made.push(Made {
                    method: method.to_owned(),
                    round,
                    replica,
                    pseudonyms: answers.into_iter().flatten().collect(),
                });
            }
        }
        made
    }

    /// Before the load window.
    pub async fn early(&self) -> Early {
        let started = Instant::now();
        let mut notes = Vec::new();
        let made = self.round(Round::Early, &mut notes).await;
        let count: usize = made.iter().map(|m| m.pseudonyms.len()).sum();
        eprintln!(
            "privacy: early round, {count} pseudonyms of {} methods through {} replicas ({:.1} s)",
            METHODS.len(),
            self.replicas.len(),
            started.elapsed().as_secs_f64()
        );
        Early {
            made,
            notes,
            at: Instant::now(),
        }
    }

    /// After verification: the late round, the orders and the siblings.
    /// `multi`: the load's own `$pseudonymize-multiple` creates.
    pub async fn late(&self, early: Early, multi: Option<(&str, &[MultiCreate])>) -> Observed {
        let started = Instant::now();
        let Early {
            mut made,
            mut notes,
            at,
        } = early;
        let wait = (at + self.rounds_apart).saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            eprintln!(
                "privacy: waiting {:.0} s for the late round ({} s after the early one)",
                wait.as_secs_f64(),
                self.rounds_apart.as_secs()
            );
            tokio::time::sleep(wait).await;
        }
        made.extend(self.round(Round::Late, &mut notes).await);
        let mut orders = Vec::new();
        self.bundles(&mut orders, &mut notes).await;
        if self.jobs {
            self.job(&mut orders, &mut notes).await;
        } else {
            notes.push("the run has no CSV jobs: no probe job".into());
        }
        self.listed(&mut orders, &mut notes).await;
        let siblings = self.siblings(multi, &mut notes).await;
        eprintln!(
            "privacy: late round, {} ordered samples, {} sibling and {} stranger pairs ({:.1} s)",
            orders.len(),
            siblings.siblings.len(),
            siblings.strangers.len(),
            started.elapsed().as_secs_f64()
        );
        Observed {
            methods: METHODS.iter().map(|(m, _, _)| (*m).to_owned()).collect(),
            made,
            orders,
            siblings,
            notes,
        }
    }

    async fn post(&self, base: &str, path: &str, body: &Value) -> Result<Value, String> {
        let http = reqwest::Client::new();
        match fhir::post(
            &http,
            &format!("{base}/v1/fhir{path}"),
            self.any.bearer_header(),
            body,
            CALL,
        )
        .await
        {
            fhir::Reply::Status(200 | 201, answer) => Ok(answer),
            fhir::Reply::Status(s, _) => Err(format!("answered {s}")),
            fhir::Reply::Lost(why) | fhir::Reply::NotSent(why) => Err(why),
        }
    }

    /// A transaction and a batch Bundle of sequential originals through
    /// each replica, in the UUIDv7 namespace.
    async fn bundles(&self, orders: &mut Vec<Order>, notes: &mut Vec<String>) {
        let name = self.named("ordered");
        if let Err(e) = self.ensure(&name, UUID7, 36, false).await {
            notes.push(e);
            return;
        }
        for (r, base) in self.http_bases.iter().enumerate() {
            for kind in ["transaction", "batch"] {
                let originals: Vec<String> = (0..BUNDLE)
                    .map(|k| format!("p10-{:x}-{kind}-{r}-{k:06}", self.seed))
                    .collect();
                let entries: Vec<Value> = originals
                    .iter()
                    .map(|o| {
                        json!({"request": {"method": "POST", "url": "$pseudonymize"},
                               "resource": fhir::parameters(&[("context", &name), ("original", o)])})
                    })
                    .collect();
                let body = json!({"resourceType": "Bundle", "type": kind, "entry": entries});
                let answer = match self.post(base, "", &body).await {
                    Ok(a) => a,
                    Err(e) => {
                        notes.push(format!("the {kind} Bundle through replica {r}: {e}"));
                        continue;
                    }
                };
                let pairs: Vec<(u64, String)> = fhir::batch_answers(&answer)
                    .unwrap_or_default()
                    .into_iter()
                    .enumerate()
                    .filter_map(|(k, (status, resource))| {
                        let p = fhir::value_of(&resource, "pseudonym")?;
                        (status < 300).then(|| (k as u64, p.to_owned()))
                    })
                    .collect();
                if pairs.len() < BUNDLE {
                    notes.push(format!(
                        "the {kind} Bundle through replica {r}: {} of {BUNDLE} entries answered",
                        pairs.len()
                    ));
                }
                orders.push(Order::of(
                    OrderKind::Bundle,
                    format!("the probe's {kind} Bundle through replica {r}"),
                    pairs,
                ));
            }
        }
    }

    /// A CSV job of sequential originals in the UUIDv7 namespace.
    async fn job(&self, orders: &mut Vec<Order>, notes: &mut Vec<String>) {
        let name = self.named("ordered");
        let jobs = match Jobs::new(
            self.any.clone(),
            self.http_address.as_deref(),
            &name,
            self.seed,
            0,
        ) {
            Ok(j) => j,
            Err(e) => {
                notes.push(format!("the probe job: {e:#}"));
                return;
            }
        };
        let mut input = String::from("row,name\r\n");
        let originals: Vec<String> = (0..JOB_ROWS)
            .map(|k| format!("p10-{:x}-job-{k:06}", self.seed))
            .collect();
        for (k, o) in originals.iter().enumerate() {
            input.push_str(&format!("{k},{o}\r\n"));
        }
        match jobs
            .run_once(
                input.into_bytes(),
                Instant::now() + Duration::from_secs(120),
            )
            .await
        {
            Ok(output) => {
                let text = String::from_utf8_lossy(&output).into_owned();
                let pairs: Vec<(u64, String)> = text
                    .lines()
                    .skip(1)
                    .filter_map(|line| {
                        let (row, pseudonym) = line.split_once(',')?;
                        Some((row.parse().ok()?, pseudonym.trim_matches('"').to_owned()))
                    })
                    .collect();
                if pairs.len() < JOB_ROWS {
                    notes.push(format!(
                        "the probe job: {} of {JOB_ROWS} rows read back",
                        pairs.len()
                    ));
                }
                orders.push(Order::of(OrderKind::Job, "the probe's job".into(), pairs));
            }
            Err(e) => notes.push(format!("the probe job: {e:#}")),
        }
    }

    /// Sequential originals made one after another, then listed in pages
    /// of 25 and in one page of all.
    /// One List page of `namespace` after `token`; a failure is noted.
    async fn list_page(
        &self,
        namespace: &str,
        page_size: i32,
        token: &str,
        notes: &mut Vec<String>,
    ) -> Option<vfps_proto::v1::PseudonymServiceListResponse> {
        let asked = PseudonymServiceListRequest {
            namespace: namespace.to_owned(),
            page_size,
            page_token: token.to_owned(),
            include_total_size: false,
        };
        match self.any.list(asked, CALL).await {
            Outcome::Ok(p) => Some(p),
            other => {
                notes.push(format!("List of {namespace}: {:?}", other.code()));
                None
            }
        }
    }

    async fn listed(&self, orders: &mut Vec<Order>, notes: &mut Vec<String>) {
        let name = self.named("listed");
        if let Err(e) = self.ensure(&name, 1, 32, false).await {
            notes.push(e);
            return;
        }
        let mut rank_of: HashMap<String, u64> = HashMap::new();
        for k in 0..LISTED {
            let original = format!("p10-{:x}-listed-{k:06}", self.seed);
            match self.any.create(&name, &original, CALL).await {
                Outcome::Ok(p) => {
                    rank_of.insert(p.pseudonym_value, k as u64);
                }
                other => notes.push(format!("listed original {k}: {:?}", other.code())),
            }
        }
        for page_size in [25, LISTED as i32] {
            let mut token = String::new();
            let mut page_number = 0;
            loop {
                let Some(page) = self.list_page(&name, page_size, &token, notes).await else {
                    break;
                };
                let pairs: Vec<(u64, u64)> = page
                    .pseudonyms
                    .iter()
                    .enumerate()
                    .filter_map(|(position, p)| {
                        Some((*rank_of.get(&p.pseudonym_value)?, position as u64))
                    })
                    .collect();
                orders.push(Order::of(
                    OrderKind::ListPage,
                    format!("List page {page_number} of {page_size}"),
                    pairs,
                ));
                page_number += 1;
                if page.next_page_token.is_empty() || page_number > LISTED {
                    break;
                }
                token = page.next_page_token;
            }
        }
    }

    /// Sibling and stranger pairs, of the probe's multi creates and the
    /// load's, with the times List shows.
    async fn siblings(
        &self,
        multi: Option<(&str, &[MultiCreate])>,
        notes: &mut Vec<String>,
    ) -> Siblings {
        let name = self.named("multi");
        let mut creates: Vec<(u64, String, Vec<String>)> = Vec::new();
        let mut namespaces = Vec::new();
        match self.ensure(&name, 1, 32, true).await {
            Err(e) => notes.push(e),
            Ok(()) => {
                namespaces.push(name.clone());
                let Some(base) = self.http_bases.first() else {
                    notes.push("no HTTP address for $pseudonymize-multiple".into());
                    return Siblings::default();
                };
                for k in 0..SIBLING_CREATES {
                    let original = format!("p10-{:x}-multi-{k:06}", self.seed);
                    let mut body = fhir::parameters(&[("context", &name), ("original", &original)]);
                    if let Some(p) = body["parameter"].as_array_mut() {
                        p.push(json!({"name": "count", "valueInteger": SIBLING_COUNT}));
                    }
                    match self.post(base, "/$pseudonymize-multiple", &body).await {
                        Ok(answer) => match pseudonyms_of(&answer) {
                            Some(p) => {
                                creates.push((crate::history::erasures::now_micros(), original, p))
                            }
                            None => notes.push(format!("multi create {k}: no pseudonyms answered")),
                        },
                        Err(e) => notes.push(format!("multi create {k}: {e}")),
                    }
                }
            }
        }
        if let Some((namespace, load)) = multi {
            namespaces.push(namespace.to_owned());
            creates.extend(
                load.iter()
                    .filter(|c| c.meaning == Meaning::Acknowledged)
                    .map(|c| (c.answered_micros, c.original.clone(), c.pseudonyms.clone())),
            );
        }
        let mut shown: HashMap<String, i64> = HashMap::new();
        for namespace in &namespaces {
            self.shown_times(namespace, &mut shown, notes).await;
        }
        pairs(creates, &shown)
    }

    /// Every pseudonym of `namespace` with the creation time List shows.
    async fn shown_times(
        &self,
        namespace: &str,
        shown: &mut HashMap<String, i64>,
        notes: &mut Vec<String>,
    ) {
        let mut token = String::new();
        for _ in 0..10_000 {
            let Some(page) = self.list_page(namespace, 1000, &token, notes).await else {
                return;
            };
            for p in page.pseudonyms {
                if let Some(t) = p.meta.and_then(|m| m.created_at) {
                    shown.insert(
                        p.pseudonym_value,
                        t.seconds * 1_000_000 + i64::from(t.nanos) / 1000,
                    );
                }
            }
            if page.next_page_token.is_empty() {
                return;
            }
            token = page.next_page_token;
        }
    }
}

/// One sibling pair per create of two or more (its first two), and
/// stranger pairs of creates of different originals answered within
/// [`STRANGERS_WITHIN_MICROS`] of each other (each create in one pair).
pub fn pairs(
    mut creates: Vec<(u64, String, Vec<String>)>,
    shown: &HashMap<String, i64>,
) -> Siblings {
    let seen = |a: &str, b: &str| PairSeen {
        a: a.to_owned(),
        b: b.to_owned(),
        shown: shown.get(a).copied().zip(shown.get(b).copied()),
    };
    creates.sort_by_key(|c| c.0);
    let siblings = creates
        .iter()
        .filter(|c| c.2.len() >= 2)
        .map(|c| seen(&c.2[0], &c.2[1]))
        .collect();
    let mut strangers = Vec::new();
    let mut i = 0;
    while i + 1 < creates.len() {
        let (a, b) = (&creates[i], &creates[i + 1]);
        if a.1 != b.1 && b.0 - a.0 <= STRANGERS_WITHIN_MICROS && !a.2.is_empty() && !b.2.is_empty()
        {
            strangers.push(seen(&a.2[0], &b.2[0]));
            i += 2;
        } else {
            i += 1;
        }
    }
    Siblings {
        siblings,
        strangers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_pair_within_a_create_and_strangers_across_close_ones() {
        let create = |at: u64, o: &str, ps: &[&str]| {
            (
                at,
                o.to_owned(),
                ps.iter().map(|p| (*p).to_owned()).collect(),
            )
        };
        let shown: HashMap<String, i64> = [("a1", 5), ("a2", 5), ("b1", 9)]
            .iter()
            .map(|(p, t)| ((*p).to_owned(), *t))
            .collect();
        let s = pairs(
            vec![
                create(10, "a", &["a1", "a2"]),
                create(20, "b", &["b1", "b2", "b3"]),
                create(5_000_000, "c", &["c1"]),
                create(5_000_100, "c", &["c2"]),
            ],
            &shown,
        );
        assert_eq!(s.siblings.len(), 2);
        assert_eq!(s.siblings[0].shown, Some((5, 5)));
        assert_eq!(s.siblings[1].shown, None, "b2 was not listed");
        // a and b are strangers; the two c creates are one original's.
        assert_eq!(s.strangers.len(), 1);
        assert_eq!(
            (s.strangers[0].a.as_str(), s.strangers[0].b.as_str()),
            ("a1", "b1")
        );
        assert_eq!(s.strangers[0].shown, Some((5, 9)));
    }
}
