//! The local platform's faults, proven on the real topology (Patroni, etcd,
//! network namespaces, nftables). Needs root; `scripts/test.sh` runs it.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use vfps_chaos::{
    nemesis::{self, Faults, Instance, Pod},
    platform::local::{self, db_ip, Local, Options},
    scenario::{events::EventKind, Draw, Planned, Scenario, ScenarioPlan},
};

/// One topology at a time: its bridge, namespaces and addresses are fixed.
static TOPOLOGY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn vfps_bin() -> std::path::PathBuf {
    // target/<profile>/deps/<this test> → target/<profile>/vfps
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("vfps")
}

/// Exit status of a TCP connect from a vfps pod to a database pod, bounded by 2 s:
/// 0 connected, 124 timed out (dropped), anything else refused or failed.
async fn connect_from_app(zone: &str, ip: &str) -> i32 {
    let script = format!("exec 3<>/dev/tcp/{ip}/5432");
    tokio::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("vfps-app-{zone}"),
            "timeout",
            "2",
            "bash",
            "-c",
            &script,
        ])
        .status()
        .await
        .unwrap()
        .code()
        .unwrap_or(-1)
}

/// The browser tests' folder (the identity provider's script).
fn ui_tests_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/ui")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, Patroni and etcd (creates network namespaces): scripts/test.sh runs it with --include-ignored"]
async fn the_faults_apply_and_heal_on_the_real_topology() {
    let _one_at_a_time = TOPOLOGY.lock().await;
    let base =
        std::env::temp_dir().join(format!("vfps-chaos-platform-test-{}", std::process::id()));
    let bin = vfps_bin();
    assert!(bin.exists(), "{} must be built first", bin.display());
    let opts = Options {
        base: base.clone(),
        vfps_bin: bin,
        restart_backoff: Duration::from_secs(1),
        grace_period: Duration::from_secs(10),
        profile: local::DatabaseProfile::Safe,
        // The front door too: the faults below are also seen through it.
        ui: true,
        ui_tests_dir: ui_tests_dir(),
        backup: None,
        sealed: true,
    };
    let l = Local::up(opts, &|e| eprintln!("up: {e}")).await.unwrap();
    // Tear down whatever happens, then report the failure.
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(faults(&l))).await;
    l.shutdown().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    let namespaces = vfps_chaos::platform::net::cmd("ip", &["netns", "list"])
        .await
        .unwrap();
    assert!(
        !namespaces.contains("vfps-"),
        "namespaces left behind: {namespaces}"
    );
    assert!(!base.exists());
}

async fn faults(l: &Local) {
    // The front door: the balancer serves the UI (a visitor not signed in is
    // sent to sign in, at the provider the replicas were given).
    let ingress = format!("{}:{}", "10.213.0.1", local::front::INGRESS_PORT);
    let (status, _) =
        vfps_chaos::platform::net::http_get(&ingress, "/ui/namespaces", Duration::from_secs(5))
            .await
            .unwrap();
    assert_eq!(status, 303, "the balancer does not serve the UI");
    let idp = format!("10.213.0.1:{}", local::front::IDP_PORT);
    let (status, discovery) = vfps_chaos::platform::net::http_get(
        &idp,
        "/.well-known/openid-configuration",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert!(
        status == 200 && discovery.contains("authorization_endpoint"),
        "{status} {discovery}"
    );
    // A killed primary is replaced by a promoted standby and rejoins as a standby.
    let old = l
        .leader()
        .await
        .unwrap()
        .expect("a primary at steady state");
    let zone = old.name.trim_start_matches("db-").to_owned();
    l.kill_db(&zone).await.unwrap();
    vfps_chaos::platform::net::wait_for("promotion", Duration::from_secs(30), || async {
        l.leader()
            .await
            .ok()
            .flatten()
            .is_some_and(|m| m.name != old.name)
    })
    .await
    .unwrap();
    l.start_db(&zone).await.unwrap();
    l.wait_db_healthy(Duration::from_secs(60)).await.unwrap();
    let rejoined = l
        .members()
        .await
        .unwrap()
        .into_iter()
        .find(|m| m.name == old.name)
        .unwrap();
    assert_ne!(
        rejoined.role, "leader",
        "the old primary rejoins as a standby: {rejoined:?}"
    );

    // A partition makes connections time out (not reset), and is gone after heal.
    assert_eq!(
        connect_from_app("a", &db_ip("b")).await,
        0,
        "reachable before the partition"
    );
    l.partition().await.unwrap();
    assert!(l.partitioned().await);
    assert_eq!(
        connect_from_app("a", &db_ip("b")).await,
        124,
        "a dropped connect times out"
    );
    l.heal_partition().await.unwrap();
    assert!(!l.partitioned().await);
    // Reachable at once: the cluster was healthy before the partition, so no
    // instance may be restarting (a rejoined primary's rewind happens before
    // the cluster counts as healthy).
    assert_eq!(
        connect_from_app("a", &db_ip("b")).await,
        0,
        "reachable after healing"
    );

    // Drain refuses to take a second database instance down.
    let leader = l.leader().await.unwrap().unwrap();
    let victim = local::ZONES
        .into_iter()
        .find(|z| format!("db-{z}") != leader.name)
        .unwrap();
    l.kill_db(victim).await.unwrap();
    let refused = nemesis::Faults::drain_target(l).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("disruption budget")),
        "drain must refuse while an instance is down: {refused:?}"
    );
    l.start_db(victim).await.unwrap();
    l.wait_db_healthy(Duration::from_secs(60)).await.unwrap();

    paused_primary_timed_when_stopped(l).await;
}

/// The paused primary's fault is on the timeline when its processes stopped,
/// not when the proof that it answers nothing ended (a probe's 800 ms
/// timeout later): the failover breakdown counts the seconds from it.
async fn paused_primary_timed_when_stopped(l: &Local) {
    let zone = l.leader().await.unwrap().unwrap().name;
    let netns = format!("vfps-{zone}");
    let start = tokio::time::Instant::now();
    // When every process of the pod was first seen stopped, on the
    // recorder's clock.
    let watcher = tokio::spawn(async move {
        loop {
            let pids = vfps_chaos::platform::net::cmd("ip", &["netns", "pids", &netns])
                .await
                .unwrap_or_default();
            let pids: Vec<u32> = pids
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if !pids.is_empty() && pids.iter().all(|p| vfps_chaos::platform::net::stopped(*p)) {
                return start.elapsed().as_secs_f64();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let rec = nemesis::Recorder::new(start);
    nemesis::run(
        l,
        &gray_plan(&[(Scenario::DbPrimaryPause, 10)]),
        &gray_knobs(),
        &rec,
    )
    .await
    .unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(1), watcher)
        .await
        .expect("the watcher saw the pod stopped")
        .unwrap();
    let events = rec.events().await;
    let fault = events
        .iter()
        .find(|e| e.kind == EventKind::Fault)
        .expect("the pause recorded its fault");
    assert!(
        (fault.at_seconds - stopped).abs() < 0.3,
        "fault recorded at {:.2} s, the pod stopped at {stopped:.2} s",
        fault.at_seconds
    );
    assert!(
        events
            .windows(2)
            .all(|w| w[0].at_seconds <= w[1].at_seconds),
        "the timeline is in time order: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, Patroni and etcd (creates network namespaces): scripts/test.sh runs it with --include-ignored"]
async fn all_keeps_the_state_of_a_failed_up_and_leaves_nothing_behind() {
    let _one_at_a_time = TOPOLOGY.lock().await;
    use vfps_chaos::{
        config::LoadConfig,
        driver::{self, DriveArgs},
        platform::local::driver::{LocalArgs, LocalDriver},
        target::Target,
    };
    let scratch = vfps_testkit::scratch_dir("failed-up");
    // A vfps whose migration always fails: up gets as far as the database.
    let broken = scratch.join("vfps");
    std::fs::write(
        &broken,
        "#!/bin/sh\necho 'migration refused on purpose' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    let base = std::env::temp_dir().join(format!("vfps-chaos-failed-up-{}", std::process::id()));
    let d = LocalDriver::new(&LocalArgs {
        base: base.clone(),
        vfps_bin: Some(broken),
        database_profile: local::DatabaseProfile::Safe,
        ui: false,
        ui_dir: ui_tests_dir(),
        backup: false,
        archive_timeout: 10,
        keys: true,
    });
    let dir = scratch.join("run");
    let load = {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            load: LoadConfig,
        }
        let mut c = Cli::parse_from(["x"]).load;
        c.output.output_dir = dir.clone();
        c
    };
    let (plan, knobs) = driver::plan(
        &DriveArgs {
            scenarios: Some("baseline".into()),
        },
        Target::Local,
        None,
    )
    .unwrap();
    let e = driver::all(&d, &plan, &knobs, &load).await.unwrap_err();
    assert!(
        format!("{e:#}").contains("migration refused on purpose"),
        "{e:#}"
    );
    let failures = std::fs::read_to_string(dir.join("failures.txt")).unwrap();
    assert!(failures.contains("harness failure"), "{failures}");
    for kept in [
        "logs/etcd.log",
        "logs/patroni-a.log",
        "patroni-list-failed-up.txt",
    ] {
        assert!(dir.join(kept).exists(), "{kept} was not kept");
    }
    let namespaces = vfps_chaos::platform::net::cmd("ip", &["netns", "list"])
        .await
        .unwrap();
    assert!(
        !namespaces.contains("vfps-"),
        "namespaces left behind: {namespaces}"
    );
    assert!(!base.exists(), "down ran");
}

/// The local platform with one fault made inert: the step reports success and
/// does nothing (a misconfigured or silently failing fault). Everything else
/// is the real platform.
struct Inert<'a> {
    local: &'a Local,
    fault: &'static str,
}

impl Inert<'_> {
    fn is(&self, fault: &str) -> bool {
        self.fault == fault
    }
}

impl nemesis::Faults for Inert<'_> {
    async fn wait_db_healthy(&self, t: Duration) -> anyhow::Result<()> {
        self.local.wait_db_healthy(t).await
    }
    async fn wait_replicas_ready(&self, t: Duration) -> anyhow::Result<()> {
        self.local.wait_replicas_ready(t).await
    }
    fn heal_timeout(&self) -> Duration {
        Duration::from_secs(20)
    }
    async fn pod_kill_begin(&self, i: Duration) -> anyhow::Result<()> {
        Faults::pod_kill_begin(self.local, i).await
    }
    fn paces_pod_kills(&self) -> bool {
        false
    }
    async fn pod_kill_next(
        &self,
        r: usize,
        u: tokio::time::Instant,
    ) -> anyhow::Result<Option<nemesis::Victim>> {
        Faults::pod_kill_next(self.local, r, u).await
    }
    async fn kill_named_replica(&self, r: &str) -> anyhow::Result<nemesis::Victim> {
        Faults::kill_named_replica(self.local, r).await
    }
    async fn wait_replaced(&self, v: &nemesis::Victim) -> anyhow::Result<()> {
        Faults::wait_replaced(self.local, v).await
    }
    async fn pod_kill_end(&self) -> anyhow::Result<()> {
        Ok(())
    }
    async fn primary(&self) -> anyhow::Result<Option<Instance>> {
        Faults::primary(self.local).await
    }
    async fn kill_primary(&self, p: &Instance) -> anyhow::Result<()> {
        if self.is("kill_primary") {
            return Ok(());
        }
        Faults::kill_primary(self.local, p).await
    }
    async fn restore_instance(&self, i: &Instance) -> anyhow::Result<()> {
        if self.is("kill_primary") || self.is("kill_standby") {
            return Ok(());
        }
        Faults::restore_instance(self.local, i).await
    }
    async fn partition(&self, b: Duration) -> anyhow::Result<()> {
        if self.is("partition") {
            return Ok(());
        }
        Faults::partition(self.local, b).await
    }
    async fn heal_partition(&self) -> anyhow::Result<()> {
        Faults::heal_partition(self.local).await
    }
    async fn rollout(
        &self,
        k: &nemesis::Knobs,
        r: &nemesis::Recorder,
        s: &vfps_chaos::scenario::ScenarioName,
    ) -> anyhow::Result<()> {
        Faults::rollout(self.local, k, r, s).await
    }
    async fn timeline(&self) -> anyhow::Result<Option<u64>> {
        Faults::timeline(self.local).await
    }
    async fn sync_standby(&self) -> anyhow::Result<Option<Instance>> {
        Faults::sync_standby(self.local).await
    }
    async fn kill_standby(&self, s: &Instance) -> anyhow::Result<()> {
        if self.is("kill_standby") {
            return Ok(());
        }
        Faults::kill_standby(self.local, s).await
    }
    async fn pause_instance(&self, i: &Instance) -> anyhow::Result<tokio::time::Instant> {
        if self.is("pause_instance") {
            return Ok(tokio::time::Instant::now());
        }
        Faults::pause_instance(self.local, i).await
    }
    async fn resume_instance(&self, i: &Instance) -> anyhow::Result<()> {
        if self.is("pause_instance") {
            return Ok(());
        }
        Faults::resume_instance(self.local, i).await
    }
    async fn isolate_instance(&self, i: &Instance, h: Duration) -> anyhow::Result<()> {
        if self.is("isolate_instance") {
            return Ok(());
        }
        Faults::isolate_instance(self.local, i, h).await
    }
    async fn heal_isolation(&self, i: &Instance) -> anyhow::Result<()> {
        Faults::heal_isolation(self.local, i).await
    }
    async fn wal_positions(&self) -> anyhow::Result<Vec<nemesis::WalPosition>> {
        Faults::wal_positions(self.local).await
    }
    async fn connect(&self, f: Pod<'_>, t: Pod<'_>) -> anyhow::Result<nemesis::Connect> {
        Faults::connect(self.local, f, t).await
    }
    async fn replicas(&self) -> anyhow::Result<Vec<String>> {
        Faults::replicas(self.local).await
    }
    async fn replica_ready(&self, r: &str) -> bool {
        Faults::replica_ready(self.local, r).await
    }
    async fn replica_answers(&self, r: &str) -> bool {
        Faults::replica_answers(self.local, r).await
    }
    async fn pause_replica(&self, r: &str) -> anyhow::Result<()> {
        if self.is("pause_replica") {
            return Ok(());
        }
        Faults::pause_replica(self.local, r).await
    }
    async fn resume_replica(&self, r: &str) -> anyhow::Result<()> {
        if self.is("pause_replica") {
            return Ok(());
        }
        Faults::resume_replica(self.local, r).await
    }
    async fn cut_replica(&self, r: &str, h: Duration) -> anyhow::Result<()> {
        if self.is("cut_replica") {
            return Ok(());
        }
        Faults::cut_replica(self.local, r, h).await
    }
    async fn heal_replica_cut(&self, r: &str) -> anyhow::Result<()> {
        Faults::heal_replica_cut(self.local, r).await
    }
    async fn delay_database(&self, d: Duration, j: Duration, h: Duration) -> anyhow::Result<()> {
        Faults::delay_database(self.local, d, j, h).await
    }
    async fn heal_delay(&self) -> anyhow::Result<()> {
        Faults::heal_delay(self.local).await
    }
    async fn drain_target(&self) -> anyhow::Result<String> {
        Faults::drain_target(self.local).await
    }
    async fn drain(&self, n: &str) -> anyhow::Result<()> {
        Faults::drain(self.local, n).await
    }
    async fn uncordon(&self, n: &str) -> anyhow::Result<()> {
        Faults::uncordon(self.local, n).await
    }
}

/// Writes a little WAL on whichever instance is primary, every 100 ms, so
/// that "the primary wrote past the standbys" can be seen without a load.
fn wal_writer(l: &Local) -> tokio::task::JoinHandle<()> {
    let local = Local {
        opts: l.opts.clone(),
    };
    tokio::spawn(async move {
        loop {
            if let Ok(Some(p)) = local.leader().await {
                let zone = p.name.trim_start_matches("db-").to_owned();
                let _ = local
                    .query_instance(&zone, "SELECT pg_logical_emit_message(false, 'test', 'x')")
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

fn gray_plan(scenarios: &[(Scenario, u64)]) -> ScenarioPlan {
    ScenarioPlan {
        scenarios: scenarios
            .iter()
            .map(|(s, d)| Planned {
                scenario: *s,
                name: vfps_chaos::scenario::ScenarioName::new(s.name()),
                duration_seconds: *d,
                max_outage_seconds: 0,
                gate: true,
                draw: Draw::undrawn(),
            })
            .collect(),
        margin_seconds: 0,
        seed: None,
        drill: None,
    }
}

fn gray_knobs() -> nemesis::Knobs {
    let mut k = nemesis::Knobs::from_env(|_| None).unwrap();
    k.db_pause = Duration::from_secs(10);
    k.isolation = Duration::from_secs(4);
    k.vfps_pause = Duration::from_secs(3);
    // Past the 3 s readiness grace the replicas of this test get.
    k.vfps_partition = Duration::from_secs(8);
    k
}

/// The safe database profile, three replicas, no front door or backups.
fn without_front_door(base: &std::path::Path) -> Options {
    Options {
        base: base.to_path_buf(),
        vfps_bin: vfps_bin(),
        restart_backoff: Duration::from_secs(1),
        grace_period: Duration::from_secs(10),
        profile: local::DatabaseProfile::Safe,
        ui: false,
        ui_tests_dir: ui_tests_dir(),
        backup: None,
        sealed: true,
    }
}

/// Copies every log of a failed test's topology (Patroni, PostgreSQL, etcd,
/// vfps) out of its directory, which `shutdown` removes, and says where.
fn keep_logs(base: &std::path::Path, test: &str) {
    let into = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("failed-{test}-{}", std::process::id()));
    fn walk(dir: &std::path::Path, base: &std::path::Path, into: &std::path::Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, base, into);
            } else if path.extension().is_some_and(|x| x == "log" || x == "csv")
                || path.parent().is_some_and(|p| p.ends_with("log"))
            {
                let rel = path.strip_prefix(base).unwrap_or(&path);
                let to = into.join(rel);
                let _ = std::fs::create_dir_all(to.parent().unwrap_or(into));
                let _ = std::fs::copy(&path, &to);
            }
        }
    }
    walk(base, base, &into);
    eprintln!("the topology's logs are kept in {}", into.display());
}

/// Every gray fault on the real topology: each proves by behaviour that it
/// applied and healed; then each made inert fails its scenario.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, Patroni and etcd (creates network namespaces): scripts/test.sh runs it with --include-ignored"]
async fn the_gray_faults_prove_themselves_and_an_inert_one_fails() {
    let _one_at_a_time = TOPOLOGY.lock().await;
    let base = std::env::temp_dir().join(format!("vfps-chaos-gray-test-{}", std::process::id()));
    let bin = vfps_bin();
    assert!(bin.exists(), "{} must be built first", bin.display());
    // The replicas inherit the environment: a short readiness grace.
    std::env::set_var("VFPS_READINESS_DATABASE_GRACE", "3s");
    let l = Local::up(without_front_door(&base), &|e| eprintln!("up: {e}"))
        .await
        .unwrap();
    let writer = wal_writer(&l);
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(gray(&l))).await;
    writer.abort();
    if outcome.is_err() {
        keep_logs(&base, "gray");
    }
    l.shutdown().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn gray(l: &Local) {
    let plan = gray_plan(&[
        (Scenario::DbPrimaryPause, 25),
        (Scenario::DbPrimaryIsolation, 20),
        (Scenario::DbSyncStandbyKill, 10),
        (Scenario::VfpsPodPause, 6),
        (Scenario::VfpsPartition, 12),
        (Scenario::DbDoubleFailover, 30),
    ]);
    let rec = nemesis::Recorder::new(tokio::time::Instant::now());
    let tally = nemesis::run(l, &plan, &gray_knobs(), &rec).await;
    let events: Vec<String> = rec
        .events()
        .await
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e.scenario.as_ref().map_or("", |s| s.as_str()),
                e.text
            )
        })
        .collect();
    let tally = tally.unwrap_or_else(|e| panic!("{e:#}\n{events:#?}"));
    assert!(tally.failovers >= 4, "{tally:?}");
    for expected in [
        "db-primary-pause promoted",
        "db-primary-pause healed: ",
        "db-primary-isolation standbys' received WAL stood still",
        "db-primary-isolation promoted",
        "db-sync-standby-kill killed synchronous standby",
        "is the synchronous standby after",
        "vfps-pod-pause healed: vfps-app-a resumed and ready",
        "vfps-partition vfps-app-a not ready after",
        "db-double-failover killed db-",
        "db-double-failover healed: ",
    ] {
        assert!(
            events.iter().any(|e| e.contains(expected)),
            "missing {expected:?} in {events:#?}"
        );
    }
    assert!(!l.partitioned().await, "no cut left behind");

    // What a scenario stopped half way leaves is healed after the scenarios.
    Faults::pause_replica(l, "vfps-app-b").await.unwrap();
    Faults::cut_replica(l, "vfps-app-c", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!Faults::replica_answers(l, "vfps-app-b").await, "paused");
    assert!(l.partitioned().await, "cut");
    l.heal_everything().await.unwrap();
    assert!(!l.partitioned().await, "the cut is removed");
    l.wait_replicas_ready(Duration::from_secs(30))
        .await
        .unwrap();

    // Each fault made inert: its scenario fails on its proof, not later.
    for (fault, scenario, seconds, why) in [
        (
            "pause_instance",
            Scenario::DbPrimaryPause,
            15,
            "no standby was promoted while",
        ),
        (
            "isolate_instance",
            Scenario::DbPrimaryIsolation,
            10,
            "the isolation did not hold",
        ),
        (
            "kill_standby",
            Scenario::DbSyncStandbyKill,
            10,
            "no other instance became the synchronous standby",
        ),
        (
            "pause_replica",
            Scenario::VfpsPodPause,
            6,
            "the pause did not take effect",
        ),
        (
            "cut_replica",
            Scenario::VfpsPartition,
            6,
            "the cut did not hold",
        ),
        (
            "partition",
            Scenario::DbNetworkPartition,
            6,
            "the partition did not hold",
        ),
        (
            "kill_primary",
            Scenario::DbPrimaryKill,
            6,
            "no primary on a timeline above",
        ),
    ] {
        let inert = Inert { local: l, fault };
        let rec = nemesis::Recorder::new(tokio::time::Instant::now());
        let r = nemesis::run(
            &inert,
            &gray_plan(&[(scenario, seconds)]),
            &gray_knobs(),
            &rec,
        )
        .await;
        let e = format!("{:#}", r.expect_err(fault));
        assert!(e.contains(why), "{fault}: {e}");
        assert!(!l.partitioned().await, "{fault}: no cut left behind");
        l.wait_steady(Duration::from_secs(60)).await.unwrap();
    }
}

/// A standby that received WAL the other one did not: when the primary dies,
/// the leader race must take it (both standbys are synchronous), so the other
/// follows without a rewind and no commit of the new timeline is acknowledged
/// by an instance still on the old one. With one named synchronous standby
/// (Patroni's `FIRST 1`) the named one was promoted and the other, ahead of
/// it on the old timeline, acknowledged the new primary's first commits
/// without having them (docs/chaos.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, Patroni and etcd (creates network namespaces): scripts/test.sh runs it with --include-ignored"]
async fn the_standby_that_received_most_is_promoted() {
    let _one_at_a_time = TOPOLOGY.lock().await;
    let base = std::env::temp_dir().join(format!("vfps-chaos-diverged-{}", std::process::id()));
    let l = Local::up(without_front_door(&base), &|e| eprintln!("up: {e}"))
        .await
        .unwrap();
    let outcome =
        futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(ahead_standby(&l))).await;
    let _ = local::cuts::remove_all().await;
    if outcome.is_err() {
        keep_logs(&base, "ahead-standby");
    }
    l.shutdown().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn ahead_standby(l: &Local) {
    l.wait_db_healthy(Duration::from_secs(60)).await.unwrap();
    let zone = |name: &str| name.trim_start_matches("db-").to_owned();
    let primary = zone(&l.leader().await.unwrap().unwrap().name);
    // Behind: a synchronous standby (with one named, the one Patroni would
    // promote); ahead: the other.
    let behind = zone(&Faults::sync_standby(l).await.unwrap().unwrap().name);
    let ahead = local::ZONES
        .iter()
        .map(|z| (*z).to_owned())
        .find(|z| *z != primary && *z != behind)
        .unwrap();
    // Both standbys at the start of a WAL segment, with the table.
    l.query_instance(&primary, "CREATE TABLE IF NOT EXISTS ahead (v text)")
        .await
        .unwrap();
    l.query_instance(&primary, "SELECT pg_switch_wal()")
        .await
        .unwrap();
    l.query_instance(&primary, "INSERT INTO ahead VALUES ('both')")
        .await
        .unwrap();
    // One standby stops receiving (its packets from the primary dropped); the
    // primary writes ~300 kB that only the other one receives (committed
    // locally: nobody is told they are durable).
    local::cuts::apply(
        &format!("vfps-db-{behind}"),
        local::cuts::ISOLATION,
        &[db_ip(&primary)],
    )
    .await
    .unwrap();
    l.query_instance(
        &primary,
        "SET synchronous_commit TO local; \
         INSERT INTO ahead SELECT repeat('x', 100) FROM generate_series(1, 2000)",
    )
    .await
    .unwrap();
    let sent: u64 = l
        .written_lsn(&primary)
        .await
        .unwrap()
        .expect("the primary's WAL position");
    vfps_chaos::platform::net::wait_for("the ahead standby", Duration::from_secs(10), || async {
        l.received_lsn(&ahead).await.ok().flatten() >= Some(sent)
    })
    .await
    .unwrap();
    let behind_at = l.received_lsn(&behind).await.unwrap().unwrap();
    let behind_pid = l
        .postmaster_pid(&behind)
        .expect("the standby's postmaster.pid");
    assert!(
        behind_at < sent,
        "{behind_at} < {sent}: the cut did not hold"
    );
    // The cut stays: the dead primary's kernel would still deliver what its
    // sockets held (the other standby then follows the new primary).
    l.kill_db(&primary).await.unwrap();
    vfps_chaos::platform::net::wait_for("a promotion", Duration::from_secs(30), || async {
        l.leader()
            .await
            .ok()
            .flatten()
            .is_some_and(|m| m.name != format!("db-{primary}"))
    })
    .await
    .unwrap();
    let promoted = zone(&l.leader().await.unwrap().unwrap().name);
    assert_eq!(
        promoted, ahead,
        "db-{ahead} had received most ({sent} against {behind_at}), db-{promoted} was promoted"
    );
    // The other standby follows the new primary as it is: not stopped for a
    // rewind, streaming the new timeline, and it has a commit acknowledged
    // there.
    vfps_chaos::platform::net::wait_for(
        "the other standby streaming",
        Duration::from_secs(30),
        || async {
            l.streaming_standbys(&promoted)
                .await
                .is_ok_and(|s| s.contains(&format!("db-{behind}")))
        },
    )
    .await
    .unwrap();
    local::cuts::remove(&format!("vfps-db-{behind}"), local::cuts::ISOLATION)
        .await
        .unwrap();
    l.query_instance(&promoted, "INSERT INTO ahead VALUES ('after')")
        .await
        .unwrap();
    let timeline = l
        .query_instance(
            &promoted,
            "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int",
        )
        .await
        .unwrap();
    let received = l
        .query_instance(&behind, "SELECT received_tli FROM pg_stat_wal_receiver")
        .await
        .unwrap();
    assert_eq!(
        received, timeline,
        "db-{behind} streams timeline {received}, the primary writes {timeline}"
    );
    assert_eq!(
        l.query_instance(&behind, "SELECT count(*) FROM ahead WHERE v = 'after'")
            .await
            .unwrap(),
        "1",
        "db-{behind} does not have the acknowledged commit"
    );
    assert_eq!(
        l.postmaster_pid(&behind),
        Some(behind_pid),
        "db-{behind} was restarted (rewound) to follow db-{promoted}"
    );
    l.start_db(&primary).await.unwrap();
    l.wait_db_healthy(Duration::from_secs(90)).await.unwrap();
}
