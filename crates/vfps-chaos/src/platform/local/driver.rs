//! `vfps-chaos local …`: the driver steps on this machine. The generator runs in
//! this process, so the chaos shares its clock.

use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Context};

use super::{grpc_endpoints, require_root, DatabaseProfile, Local, Options, DEFAULT_BASE};
use crate::{
    config::LoadConfig,
    driver::{artifacts, Collected, Driver},
    nemesis::{self, Knobs, Recorder},
    run,
    scenario::{Scenario, ScenarioPlan},
};

/// Rows of each CSV job when the plan faults jobs and `RESILIENCE_JOB_ROWS`
/// is not set: a job runs for seconds here (several checkpoints to fault),
/// and the run's jobs do not fill the database.
const DEFAULT_JOB_ROWS: u64 = 50_000;

/// Settings of a local run beyond the load's.
#[derive(Debug, Clone, clap::Args)]
pub struct LocalArgs {
    /// Where the topology's state lives (recreated by `up`, removed by `down`).
    #[arg(long, env = "VFPS_CHAOS_BASE", default_value = DEFAULT_BASE)]
    pub base: PathBuf,
    /// The vfps binary (default: next to this one).
    #[arg(long, env = "VFPS_BIN")]
    pub vfps_bin: Option<PathBuf>,
    /// How the database replicates: `unsafe-async` is the harness's self-test
    /// (a run under it must fail on lost writes).
    #[arg(
        long,
        env = "VFPS_CHAOS_DATABASE_PROFILE",
        value_enum,
        default_value = "safe"
    )]
    pub database_profile: DatabaseProfile,
    /// Stand up the web UI's identity provider and load balancer and run the
    /// browser probe beside the load (`false`: the API alone).
    #[arg(long, env = "VFPS_CHAOS_UI", default_value_t = true, action = clap::ArgAction::Set)]
    pub ui: bool,
    /// The browser tests' folder (the provider's and the probe's scripts,
    /// their installed packages); the load's probe runs from it too.
    #[arg(long, env = "VFPS_CHAOS_UI_DIR", default_value_os_t = crate::checkout::default(crate::checkout::UI_TESTS))]
    pub ui_dir: PathBuf,
    /// Archive the database's WAL to the object store's backup bucket and
    /// take a base backup at `up` (docs/backup.md).
    #[arg(long, env = "VFPS_CHAOS_BACKUP", default_value_t = false, action = clap::ArgAction::Set)]
    pub backup: bool,
    /// archive_timeout in seconds: how long a commit may wait in an
    /// unfinished WAL segment before it is archived.
    #[arg(long, env = "VFPS_CHAOS_ARCHIVE_TIMEOUT", default_value_t = 10)]
    pub archive_timeout: u64,
    /// Seal the originals at rest: `up` writes a key file (`vfps keys
    /// init`) and every replica gets `VFPS_KEYS` (docs/privacy.md).
    /// `false` is P11's unsafe mode: originals stored as they are.
    #[arg(long, env = "VFPS_CHAOS_KEYS", default_value_t = true, action = clap::ArgAction::Set)]
    pub keys: bool,
}

/// The local platform's driver.
pub struct LocalDriver {
    options: Options,
}

impl LocalDriver {
    pub fn new(args: &LocalArgs) -> Self {
        let vfps_bin = args.vfps_bin.clone().unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("vfps")))
                .unwrap_or_else(|| PathBuf::from("vfps"))
        });
        Self {
            options: Options {
                base: args.base.clone(),
                vfps_bin,
                restart_backoff: Duration::from_secs(1),
                grace_period: Duration::from_secs(15),
                profile: args.database_profile,
                ui: args.ui,
                ui_tests_dir: args.ui_dir.clone(),
                backup: args.backup.then_some(crate::backup::Archiving {
                    timeout: Duration::from_secs(args.archive_timeout),
                }),
                sealed: args.keys,
            },
        }
    }

    /// `local restore`: the running topology's database restored in place
    /// from its bucket; what it did on stdout.
    pub async fn restore(&self, to: crate::backup::RestoreTo) -> anyhow::Result<()> {
        // The restored cluster archives as `up` made it archive (attach reads
        // its settings back), whatever flags this step got.
        let local = Local::attach(self.options.clone())?;
        if local.opts.backup.is_none() {
            bail!("the running topology was stood up without --backup: it has no WAL archive to restore from");
        }
        let r = local.restore(to).await?;
        let recovered = r.recovered_to.as_deref().map_or_else(
            || "no transaction replayed after the base backup".to_owned(),
            |t| format!("recovered to the last transaction committed at {t}"),
        );
        println!(
            "restored from base backup {} of cluster {} ({recovered}) in {:.1} s; the cluster now \
             archives as {}, chained to {}.\n\
             Creates of new originals are refused until the restore is confirmed:\n  \
             export ConnectionStrings__PostgreSQL='{}'\n  \
             vfps restore status\n  vfps restore confirm",
            r.backup_id,
            r.from_cluster,
            r.took.as_secs_f64(),
            r.new_cluster,
            r.chain.join(" ← "),
            super::connection_string(),
        );
        Ok(())
    }

    /// The topology as files and processes, whether or not it is all running.
    fn topology(&self) -> Local {
        Local {
            opts: self.options.clone(),
        }
    }

    fn steady_state_file(&self) -> PathBuf {
        self.options.base.join("steady-state-seconds.txt")
    }
}

/// The load settings of a local run: the local endpoints, the plan's window,
/// and the tokens `up` made (unless others were given).
fn load_config(load: &LoadConfig, plan: &ScenarioPlan, options: &Options) -> LoadConfig {
    let base = &options.base;
    let mut cfg = load.clone();
    cfg.service.address = grpc_endpoints();
    if options.ui && cfg.workload.ui_address.is_none() {
        cfg.workload.ui_address = Some(super::front::ingress_url());
        cfg.workload.ui_tests_dir = options.ui_tests_dir.clone();
    }
    cfg.workload.load_seconds = plan.load_seconds();
    // A plan with job scenarios needs jobs to fault.
    let faults_jobs = plan.scenarios.iter().any(|s| {
        matches!(
            s.scenario,
            Scenario::JobRunnerKill | Scenario::JobRunnerPause | Scenario::ObjectsNodeKill
        )
    });
    if faults_jobs && cfg.workload.job_rows == 0 {
        cfg.workload.job_rows = DEFAULT_JOB_ROWS;
    }
    cfg.workload.privacy_probe.get_or_insert(true);
    let tokens = super::tokens_dir(base);
    let c = &mut cfg.credentials;
    if c.bearer_token.is_none() && c.bearer_token_file.is_none() {
        c.bearer_token_file = Some(tokens.join(crate::platform::access::LOAD.file));
    }
    c.expired_token_file
        .get_or_insert_with(|| tokens.join(crate::platform::access::EXPIRED.file));
    c.read_only_token_file
        .get_or_insert_with(|| tokens.join(crate::platform::access::READ_ONLY.file));
    cfg
}

impl Driver for LocalDriver {
    fn check_plan(&self, plan: &ScenarioPlan) -> anyhow::Result<()> {
        if plan.drill.is_some() && self.options.backup.is_none() {
            bail!(
                "{} needs the WAL archive: stand the platform up with --backup (VFPS_CHAOS_BACKUP=true)",
                crate::scenario::drill::NAME
            );
        }
        Ok(())
    }

    async fn up(&self) -> anyhow::Result<()> {
        require_root()?;
        if !self.options.vfps_bin.exists() {
            bail!(
                "vfps binary {} not found (build it, or set VFPS_BIN)",
                self.options.vfps_bin.display()
            );
        }
        let started = std::time::Instant::now();
        Local::up(self.options.clone(), &|e| {
            eprintln!("up: {e} ({:.1} s)", started.elapsed().as_secs_f64())
        })
        .await?;
        let steady = started.elapsed().as_secs_f64();
        eprintln!("steady state after {steady:.1} s");
        print!("{}", super::summary::summary(&self.options));
        let file = self.steady_state_file();
        std::fs::write(&file, format!("{steady:.1}\n"))
            .with_context(|| format!("cannot write {}", file.display()))
    }

    async fn scenarios(
        &self,
        plan: &ScenarioPlan,
        knobs: &Knobs,
        load: &LoadConfig,
    ) -> anyhow::Result<bool> {
        self.check_plan(plan)?;
        let local = Local::attach(self.options.clone())?;
        let cfg = load_config(load, plan, &self.options);
        let dir = cfg.dir().to_owned();
        artifacts::write_plan(&dir, plan)?;
        if let Ok(steady) = std::fs::read_to_string(self.steady_state_file()) {
            crate::report::write_file(&dir, "steady-state-seconds.txt", steady)?;
        }
        eprintln!(
            "{} scenarios: load window {} s (sum of durations + {} s margin)",
            plan.scenarios.len(),
            cfg.workload.load_seconds,
            plan.margin_seconds
        );
        local.wait_steady(Duration::from_secs(60)).await?;
        local.snapshot_cluster(&dir, "before").await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let load_run = run::under_chaos(&cfg, true, Some(tx));
        let chaos = async {
            let Ok(start) = rx.await else {
                return (
                    Err(anyhow::anyhow!("the load never started")),
                    Vec::new(),
                    0.0,
                );
            };
            let rec = Recorder::new(start);
            let r = nemesis::run(&local, plan, knobs, &rec).await;
            let finished = rec.elapsed().as_secs_f64();
            (r, rec.events().await, finished)
        };
        let (summary, (chaos_result, events, finished)) = tokio::join!(load_run, chaos);
        // No cut and no stopped process may outlive the scenarios, whatever
        // happened to them.
        local.heal_everything().await?;
        artifacts::write_chaos(&dir, &events, &chaos_result, finished)?;
        // A scenario that failed is a finding, not a harness failure: chaos.json
        // has it, and `collect` fails the run on it.
        let summary = summary?;
        artifacts::write_load_summary(&dir, &summary)?;
        // After the window and its verification: the drill destroys what
        // they judged (scenario/drill.rs).
        let drill_passed = match &plan.drill {
            Some(d) => super::drill::run(&local, d, &cfg, &dir)
                .await?
                .verdict
                .passed(),
            None => true,
        };
        Ok(summary.passed && drill_passed)
    }

    async fn collect(&self, plan: &ScenarioPlan, load: &LoadConfig) -> anyhow::Result<Collected> {
        let dir = load_config(load, plan, &self.options).dir().to_owned();
        let mut erased_rows = None;
        let mut at_rest = None;
        if let Ok(local) = Local::attach(self.options.clone()) {
            local.snapshot_cluster(&dir, "after").await?;
            local.collect_logs(&dir)?;
            if let Some(history) = crate::checker::erasure::read_history(&dir)? {
                erased_rows = local.erased_rows(&history).await;
            }
            // P11: every byte at rest, for the run's originals.
            let originals = super::at_rest::originals_of(&dir)?;
            if !originals.is_empty() {
                eprintln!(
                    "at rest: searching every byte for {} originals",
                    originals.len()
                );
                let started = std::time::Instant::now();
                let search = local.search_at_rest(&originals).await?;
                eprintln!(
                    "at rest: {} places searched in {:.1} s",
                    search.places.len(),
                    started.elapsed().as_secs_f64()
                );
                crate::report::write_file(
                    &dir,
                    "at-rest.json",
                    serde_json::to_string_pretty(&search)?,
                )?;
                at_rest = Some(search);
            }
        }
        let postgres_logs = super::ZONES
            .iter()
            .map(|z| {
                (
                    format!("db-{z}"),
                    dir.join(format!("logs/postgresql-{z}.log")),
                )
            })
            .filter(|(_, path)| path.exists())
            .collect();
        let ha_logs = super::ZONES
            .iter()
            .map(|z| (format!("db-{z}"), dir.join(format!("logs/patroni-{z}.log"))))
            .filter(|(_, path)| path.exists())
            .collect();
        Ok(Collected {
            erased_rows,
            at_rest,
            load: artifacts::read_load_summary(&dir)?,
            postgres_logs,
            ha_logs,
        })
    }

    async fn capture_state(&self, dir: &std::path::Path) {
        let local = self.topology();
        if let Err(e) = local.snapshot_cluster(dir, "failed-up").await {
            eprintln!("capture: {e:#}");
        }
        if let Err(e) = local.collect_logs(dir) {
            eprintln!("capture: {e:#}");
        }
    }

    async fn down(&self) -> anyhow::Result<()> {
        require_root()?;
        super::down(&self.options.base).await;
        Ok(())
    }
}
