//! What a run asks of the service after its load, beside the ledger's
//! re-reads: every replica about the MII side's erasures, the API about the
//! UI's pseudonyms, the CSV jobs to their end, P10's late samples; each
//! written to the run directory for `check`.

use std::path::Path;

use vfps_client::{Client, Endpoints, RetryPolicy};

use super::{JOB_VERIFY_DEADLINE, VERIFY_DEADLINE};
use crate::{
    checker::{self, FinalChecks, Observation},
    config::LoadConfig,
    history::{self, Entry, Leftovers},
    mix::Mix,
    operation::Operation,
    report, verify,
    workload::{
        jobs::{Jobs, Submitted},
        ui::UiProbe,
    },
};

/// What P10 judges beside the ledger, into `privacy.json`.
pub(super) async fn verify_privacy(
    dir: &Path,
    probe: crate::workload::privacy::Probe,
    early: crate::workload::privacy::Early,
    erasures: Option<&history::erasures::ErasureHistory>,
    jobs: Option<&[checker::jobs::JobObservation]>,
) -> anyhow::Result<checker::privacy::Observed> {
    let observed = probe.late_with_load(early, erasures, jobs).await;
    report::write_file(dir, PRIVACY_FILE, serde_json::to_string(&observed)?)?;
    Ok(observed)
}

/// What P10 judged beside the ledger.
pub(super) const PRIVACY_FILE: &str = "privacy.json";

/// What the MII side of a run keeps: its answers and erasures, and what
/// verification asked every replica about them.
pub(super) const ERASURES_FILE: &str = "erasures.json";

pub(super) const ERASURES_VERIFY_FILE: &str = "erasures-verify.json";

/// Whether the mix has any of the MII interface's operations.
pub(super) fn mii_in(mix: &Mix) -> bool {
    [Operation::Mii, Operation::Bundle, Operation::Erase]
        .into_iter()
        .any(|op| mix.weight(op) > 0)
}

/// Asks every replica about every erasure and live subject of the MII side.
pub(super) async fn verify_erasures(
    dir: &Path,
    endpoints: &Endpoints,
    http: Option<&str>,
    bearer: Option<&str>,
    history: &history::erasures::ErasureHistory,
    concurrency: usize,
) -> anyhow::Result<crate::history::verified::Observed> {
    use crate::workload::mii::{ask, http_bases, verify};
    let any = Client::new(endpoints.clone(), RetryPolicy::verification()).with_bearer(bearer)?;
    let mut bases = http_bases(&any, http);
    if bases.len() != any.endpoints().uris().len() {
        // One address for all (kind's Service): each replica asked on its
        // own host, as resolved now, so that every one is asked.
        bases = http_bases(&any, None);
    }
    let mut replicas = Vec::new();
    for (e, base) in endpoints.each()?.into_iter().zip(bases) {
        replicas.push(ask::Replica {
            grpc: Client::new(e, RetryPolicy::verification()).with_bearer(bearer)?,
            http: base,
        });
    }
    eprintln!(
        "erasures: verifying {} erasures through {} replicas",
        history.erasures.len(),
        replicas.len()
    );
    let bearer_header = any.bearer_header().map(str::to_owned);
    let seen = verify::observe(
        &replicas,
        bearer_header.as_deref(),
        history,
        concurrency,
        VERIFY_DEADLINE,
    )
    .await?;
    report::write_file(dir, ERASURES_VERIFY_FILE, serde_json::to_string(&seen)?)?;
    Ok(seen)
}

/// The browser probe of a run that names the UI's address; refused at once
/// when it cannot run.
pub(super) fn ui_probe(cfg: &LoadConfig, seed: u64) -> anyhow::Result<Option<UiProbe>> {
    let Some(address) = &cfg.workload.ui_address else {
        return Ok(None);
    };
    let probe = UiProbe {
        address: address.trim_end_matches('/').to_owned(),
        namespace: cfg.service.namespace.clone(),
        user: cfg.workload.ui_user.clone(),
        tests_dir: cfg.workload.ui_tests_dir.clone(),
        seed,
    };
    probe.check_installed()?;
    Ok(Some(probe))
}

/// Verify: re-Create every ledger original and Get every pseudonym through
/// each replica separately, and look at the workload's leftovers, with the
/// verification retry policy.
pub async fn verify(
    endpoints: &Endpoints,
    bearer: Option<&str>,
    namespace: &str,
    ledger: &[Entry],
    leftovers: &Leftovers,
    concurrency: usize,
    progress: bool,
) -> anyhow::Result<(Vec<Observation>, FinalChecks)> {
    let replicas: Vec<Client> = endpoints
        .each()?
        .into_iter()
        .map(|e| Client::new(e, RetryPolicy::verification()).with_bearer(bearer))
        .collect::<Result<_, _>>()?;
    let observations = verify::observe(
        &replicas,
        namespace,
        ledger,
        concurrency,
        VERIFY_DEADLINE,
        progress,
    )
    .await;
    let any = Client::new(endpoints.clone(), RetryPolicy::verification()).with_bearer(bearer)?;
    let finals = verify::leftovers(&any, namespace, leftovers, concurrency, VERIFY_DEADLINE).await;
    Ok((observations, finals))
}

/// What the API answers for every original the UI created, into
/// `ui-agreements.json`.
pub(super) async fn verify_ui(
    dir: &Path,
    client: &Client,
    namespace: &str,
    steps: &[checker::ui::StepRecord],
) -> anyhow::Result<Vec<checker::ui::Agreement>> {
    let agreements = crate::workload::ui::verify(client, namespace, steps).await;
    eprintln!(
        "ui: {} of the UI's pseudonyms asked of the API",
        agreements.len()
    );
    report::write_file(
        dir,
        "ui-agreements.json",
        serde_json::to_string_pretty(&agreements)?,
    )?;
    Ok(agreements)
}

/// The run's CSV jobs followed to their end and looked at; what was seen goes
/// to `jobs.json` (which `check` reads to look again).
pub(super) async fn verify_jobs(
    dir: &Path,
    jobs: &Jobs,
    submitted: Vec<Submitted>,
) -> anyhow::Result<Vec<checker::jobs::JobObservation>> {
    eprintln!("jobs: verifying {} jobs", submitted.len());
    let observed = jobs
        .verify(submitted, tokio::time::Instant::now() + JOB_VERIFY_DEADLINE)
        .await;
    report::write_file(dir, "jobs.json", serde_json::to_string_pretty(&observed)?)?;
    Ok(observed)
}
