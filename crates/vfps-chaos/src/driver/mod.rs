//! The driver: a platform run as four steps — up, scenarios, collect, down —
//! and [`all`], which does them in order the same way on every platform.
//!
//! # Layout
//! - this file: the [`Driver`] trait, [`all`] and the steps on their own, and
//!   the plan from the environment.
//! - [`artifacts`]: what `scenarios` leaves in the run directory for `collect`.
//! - [`failovers`]: each database failover's seconds, read from the run
//!   directory's logs and ledger.
//! - [`finish`]: the final verdicts, composed once in memory and written once.
//! - [`pglog`]: one-node commits found in PostgreSQL's logs.

use std::path::Path;

use anyhow::Context;

use crate::{
    config::LoadConfig,
    nemesis::Knobs,
    report::Summary,
    scenario::{self, ScenarioPlan},
    target::Target,
};

pub mod artifacts;
pub mod failovers;
pub mod finish;
pub mod pglog;

/// The settings shared by every platform's driver.
#[derive(Debug, Clone, clap::Args)]
pub struct DriveArgs {
    /// Scenarios in order, comma-separated (default: every scenario).
    #[arg(long, env = "SCENARIOS")]
    pub scenarios: Option<String>,
}

/// The plan and fault knobs from the environment, with the target's defaults;
/// with a seed, the fault schedule is drawn from it.
pub fn plan(
    args: &DriveArgs,
    target: Target,
    seed: Option<u64>,
) -> anyhow::Result<(ScenarioPlan, Knobs)> {
    let list = args
        .scenarios
        .as_deref()
        .unwrap_or(scenario::default_scenarios(target));
    let mut plan = ScenarioPlan::from_env(list, target, |k| std::env::var(k).ok())?;
    if let Some(seed) = seed {
        plan = plan.drawn(seed);
    }
    let knobs = Knobs::from_env(|k| std::env::var(k).ok())?;
    Ok((plan, knobs))
}

/// The run's seed: the one given (`--seed`, `RESILIENCE_SEED`), else a fresh
/// one, fixed in `load` so that the workload and the fault schedule share it
/// and a replay reproduces both.
pub fn fix_seed(load: &mut LoadConfig) -> u64 {
    let seed = *load.workload.seed.get_or_insert_with(rand::random);
    eprintln!("seed {seed} (replay with --seed {seed})");
    seed
}

/// One platform's way of doing each step. `scenarios` and `collect` may run as
/// separate commands: what one leaves for the next is in the run directory.
#[allow(async_fn_in_trait)] // used through generics inside this crate only
pub trait Driver {
    /// Refuses a plan this driver's settings cannot run, before anything is
    /// stood up.
    fn check_plan(&self, _plan: &ScenarioPlan) -> anyhow::Result<()> {
        Ok(())
    }
    /// Stands the topology up to steady state. On failure it leaves what it built
    /// for [`Driver::capture_state`] and [`Driver::down`].
    async fn up(&self) -> anyhow::Result<()>;
    /// Every planned scenario under one continuous load window, then settling
    /// and verification; leaves the chaos outcome and what `collect` needs of
    /// the load in the run directory. Whether the load's own verdicts held; an
    /// error means the scenarios could not run as planned.
    async fn scenarios(
        &self,
        plan: &ScenarioPlan,
        knobs: &Knobs,
        load: &LoadConfig,
    ) -> anyhow::Result<bool>;
    /// The topology's evidence into the run directory (state, every log), the
    /// load's own summary, and the PostgreSQL logs to search for one-node
    /// commits.
    async fn collect(&self, plan: &ScenarioPlan, load: &LoadConfig) -> anyhow::Result<Collected>;
    /// What the topology looks like now, into `dir`, best effort: after a failed
    /// `up` this is all the evidence there is.
    async fn capture_state(&self, dir: &Path);
    /// Removes what `up` created; idempotent.
    async fn down(&self) -> anyhow::Result<()>;
}

/// What `collect` gathered for the final verdicts.
pub struct Collected {
    /// The load's own summary.
    pub load: Summary,
    /// PostgreSQL logs in the run directory, with the instance each is of (a
    /// log of several instances names each on its lines).
    pub postgres_logs: Vec<(String, std::path::PathBuf)>,
    /// What each database instance holds of the erased pseudonyms, asked
    /// directly (`None`: not asked, or nothing erased; the kind platform
    /// does not ask yet).
    pub erased_rows: Option<Vec<crate::history::erasures::DatabaseRows>>,
    /// The HA manager's logs (Patroni's, locally), with the member each is
    /// of: where a failover's leader race is told.
    pub ha_logs: Vec<(String, std::path::PathBuf)>,
    /// P11's search of every byte at rest (`None`: the platform cannot
    /// search; the kind platform does not yet).
    pub at_rest: Option<crate::checker::at_rest::Search>,
}

/// `collect`, then the final verdicts and every report. Whether the run passed.
pub async fn collect<D: Driver>(
    driver: &D,
    plan: &ScenarioPlan,
    load: &LoadConfig,
) -> anyhow::Result<bool> {
    let collected = driver.collect(plan, load).await?;
    finish::finish(load.dir(), plan, collected)
}

/// up, scenarios, collect, down. `down` runs whatever happened; after a failed
/// `up` the platform's state is captured first; a scenario failure still
/// collects what evidence there is; a harness failure is written to
/// `failures.txt` (the report of a scheduled run quotes it).
pub async fn all<D: Driver>(
    driver: &D,
    plan: &ScenarioPlan,
    knobs: &Knobs,
    load: &LoadConfig,
) -> anyhow::Result<bool> {
    let dir = load.dir();
    driver.check_plan(plan)?;
    let result = async {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        if let Err(e) = driver.up().await {
            driver.capture_state(dir).await;
            return Err(e.context("up"));
        }
        let chaos = driver.scenarios(plan, knobs, load).await;
        let collected = collect(driver, plan, load).await;
        match (chaos, collected) {
            (Err(e), _) => Err(e.context("scenarios")),
            (Ok(_), collected) => collected.context("collect"),
        }
    }
    .await;
    if let Err(e) = driver.down().await {
        eprintln!("down: {e:#}");
    }
    if let Err(e) = &result {
        artifacts::append_failure(dir, &format!("harness failure: {e:#}"))?;
    }
    result
}

/// `up` as a step of its own: on failure the state is captured into `dir` and
/// what was built is left for inspection (`down` removes it).
pub async fn up<D: Driver>(driver: &D, dir: &Path) -> anyhow::Result<()> {
    if let Err(e) = driver.up().await {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        driver.capture_state(dir).await;
        eprintln!(
            "up failed: its state is in {}; what it built is left for inspection (`down` removes it)",
            dir.display()
        );
        return Err(e);
    }
    Ok(())
}
