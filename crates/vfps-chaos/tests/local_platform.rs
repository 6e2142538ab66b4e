//! The local platform's faults, proven on the real topology (Patroni, etcd,
//! network namespaces, nftables). Needs root; `scripts/test.sh` runs it.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use vfps_chaos::{
    nemesis,
    platform::local::{self, db_ip, Local, Options},
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
