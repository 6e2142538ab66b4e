//! Every scenario's fault applied, proven and healed on the simulated
//! cluster, and the ways a fault that does not bite fails its scenario.

use super::*;

#[tokio::test]
async fn every_scenario_applies_proves_and_heals_its_fault_on_kubernetes() {
    let k = kube();
    let (r, events) = run_plan(
        &k,
        vec![
            planned(Scenario::Baseline, "baseline", 1),
            planned(Scenario::VfpsPodKill, "vfps-pod-kill", 6),
            planned(Scenario::DbPrimaryKill, "cnpg-primary-kill", 1),
            planned(Scenario::DbNetworkPartition, "db-network-partition", 2),
            planned(Scenario::Rollout, "rollout", 1),
            planned(Scenario::Drain, "drain", 1),
        ],
    )
    .await;
    let tally = r.unwrap();
    let events: Vec<String> = events.into_iter().map(|e| e + "\n").collect();
    assert!(
        tally.replica_kills >= 2,
        "the schedule killed repeatedly: {tally:?}"
    );
    assert_eq!(tally.failovers, 1);
    assert!(
        tally.partitions >= 2,
        "bursts repeat within the window: {tally:?}"
    );
    let has = |s: &str| events.iter().any(|e| e.contains(s));
    for expected in [
        "vfps-pod-kill killed pod vfps-",
        "vfps-pod-kill healed: pod vfps-",
        "cnpg-primary-kill killed primary vfps-db-1",
        "cnpg-primary-kill promoted vfps-db-2",
        "cnpg-primary-kill healed: vfps-db-1 back",
        "db-network-partition applied",
        "db-network-partition healed",
        "rollout restarted deployment/vfps",
        "rollout rollout complete",
        // The failover moved the primary to vfps-db-2 on worker2: not that node.
        "drain drained node vfps-ha-worker\n",
        "drain healed: node vfps-ha-worker uncordoned",
        "drain end",
    ] {
        assert!(has(expected), "missing event {expected:?} in {events:#?}");
    }
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert!(
        !m.pod_kill_schedule && !m.primary_chaos && m.partition.is_none(),
        "no chaos object left"
    );
    assert!(m.cordoned.is_empty(), "every node back in service");
    assert!(
        m.commands
            .iter()
            .any(|c| c.contains("drain vfps-ha-worker ") && c.contains("--timeout=120s")),
        "kubectl drain with the 120 s timeout"
    );
}

#[tokio::test]
async fn every_gray_fault_applies_proves_and_heals_on_kubernetes() {
    let k = kube();
    k.runner.model().second_kill_expected = true;
    let (r, events) = run_plan(
        &k,
        vec![
            planned(Scenario::DbPrimaryIsolation, "db-primary-isolation", 1),
            planned(Scenario::DbSyncStandbyKill, "db-sync-standby-kill", 1),
            planned(Scenario::VfpsPartition, "vfps-partition", 1),
            planned(Scenario::DbNetworkDelay, "db-network-delay", 1),
            planned(Scenario::DbDoubleFailover, "db-double-failover", 1),
        ],
    )
    .await;
    let tally = r.unwrap();
    assert_eq!(tally.failovers, 1 + 2, "{tally:?}");
    let has = |s: &str| events.iter().any(|e| e.contains(s));
    for expected in [
        "db-primary-isolation isolated vfps-db-1 from the other instances",
        "db-primary-isolation standbys' received WAL stood still; the primary wrote",
        "db-primary-isolation killed the isolated primary vfps-db-1",
        "db-primary-isolation promoted vfps-db-2 on timeline 2",
        "db-sync-standby-kill killed synchronous standby vfps-db-1",
        "db-sync-standby-kill vfps-db-3 is the synchronous standby",
        "vfps-partition cut vfps-0 off from the database",
        "vfps-partition vfps-0 not ready after",
        "vfps-partition healed: vfps-0 reaches the database and is ready",
        "db-network-delay database traffic delayed 200ms ± 50ms",
        "db-network-delay healed: delay removed",
        "db-double-failover killed primary vfps-db-2 (timeline 2)",
        "db-double-failover killed vfps-db-1 just promoted (timeline 3)",
        "db-double-failover healed",
    ] {
        assert!(has(expected), "missing event {expected:?} in {events:#?}");
    }
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert!(
        m.commands
            .iter()
            .any(|c| c.ends_with("-c vfps -- vfps migrate --check")),
        "the delay is measured on vfps's own path to the database"
    );
    assert!(
        m.isolation.is_none()
            && m.replica_cut.is_none()
            && m.delay.is_none()
            && m.standby_chaos.is_none()
            && !m.primary_chaos,
        "no chaos object left"
    );
}

/// A Chaos Mesh that reports every object injected but does nothing: each
/// gray fault's behavioural proof fails its scenario.
#[tokio::test]
async fn an_inert_gray_fault_fails_its_scenario() {
    for (scenario, name, why) in [
        (
            Scenario::DbPrimaryIsolation,
            "db-primary-isolation",
            "the isolation did not hold",
        ),
        (
            Scenario::VfpsPartition,
            "vfps-partition",
            "the cut did not hold",
        ),
    ] {
        let inert = Overriding(FakeKubectl::new(), |_: &str, args: &[&str]| {
            let probe = args.first() == Some(&"exec") && args.contains(&"bash");
            probe.then(|| Ok("connected\n".to_owned()))
        });
        let mut k = Kube::new(inert, &assets());
        k.poll = Duration::from_millis(5);
        k.heal_timeout = Duration::from_secs(5);
        let plan = Plan {
            scenarios: vec![planned(scenario, name, 1)],
            margin_seconds: 0,
            seed: None,
            drill: None,
        };
        let rec = Recorder::new(tokio::time::Instant::now());
        let e = format!(
            "{:#}",
            nemesis::run(&k, &plan, &knobs(), &rec).await.unwrap_err()
        );
        assert!(e.contains(why), "{name}: {e}");
        let m = k.runner.0.model();
        assert!(
            m.isolation.is_none() && m.replica_cut.is_none(),
            "{name}: the fault is removed even when its proof failed"
        );
    }
}

#[tokio::test]
async fn the_synchronous_standby_is_one_the_primary_streams_to() {
    let k = kube();
    // vfps-db-2 is Ready, first by name, but catching up: it confirms nothing.
    k.runner.model().not_streaming = vec!["vfps-db-2".into()];
    let (r, events) = run_plan(
        &k,
        vec![planned(
            Scenario::DbSyncStandbyKill,
            "db-sync-standby-kill",
            1,
        )],
    )
    .await;
    let e = r.map(|_| ()).map_err(|e| format!("{e:#}"));
    assert!(
        events
            .iter()
            .any(|e| e.ends_with("killed synchronous standby vfps-db-3")),
        "{events:#?} {e:?}"
    );
    let m = k.runner.model();
    assert!(
        m.commands.iter().any(|c| c.contains("pg_stat_replication")),
        "the primary was asked"
    );
}

#[tokio::test]
async fn a_standby_kill_fails_when_no_other_standby_streams_meanwhile() {
    let mut k = kube();
    k.heal_timeout = Duration::from_secs(1);
    // The other standby is Ready but does not stream: with the streaming one
    // killed, no standby confirms commits, and the proof must say so.
    k.runner.model().not_streaming = vec!["vfps-db-3".into()];
    let (r, events) = run_plan(
        &k,
        vec![planned(
            Scenario::DbSyncStandbyKill,
            "db-sync-standby-kill",
            1,
        )],
    )
    .await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("no other instance became the synchronous standby"),
        "{e} {events:#?}"
    );
    assert!(
        k.runner.model().standby_chaos.is_none(),
        "the kill is removed even when its proof failed"
    );
}

/// Chaos Mesh reports the delay injected, but its netem matches none of
/// vfps's database packets (`direction: to`, toward pods vfps reaches only
/// through a ClusterIP): the measured round trip fails the scenario.
#[tokio::test]
async fn a_delay_that_misses_vfpss_database_traffic_fails_its_scenario() {
    let dir = vfps_testkit::scratch_dir("kind-delay-to");
    std::fs::create_dir_all(dir.join("chaos")).unwrap();
    let asset = std::fs::read_to_string(assets().join(gray::DELAY.asset)).unwrap();
    assert!(asset.contains("  direction: from\n"), "{asset}");
    std::fs::write(
        dir.join(gray::DELAY.asset),
        asset.replace("  direction: from\n", "  direction: to\n"),
    )
    .unwrap();
    let mut k = Kube::new(FakeKubectl::new(), &dir);
    k.poll = Duration::from_millis(5);
    k.heal_timeout = Duration::from_secs(5);
    let (r, _) = run_plan(
        &k,
        vec![planned(Scenario::DbNetworkDelay, "db-network-delay", 1)],
    )
    .await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("the delay did not reach vfps's database traffic"),
        "{e}"
    );
    assert!(
        k.runner.model().delay.is_none(),
        "the delay is removed even when its proof failed"
    );
}

#[tokio::test]
async fn a_primary_kill_without_a_labelled_primary_fails_loudly() {
    let k = kube();
    k.runner.model().no_primary = true;
    let (r, events) = run_plan(
        &k,
        vec![planned(Scenario::DbPrimaryKill, "cnpg-primary-kill", 1)],
    )
    .await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("no pod is labelled as the database primary"),
        "{e}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains("error: no pod is labelled")),
        "{events:?}"
    );
    assert!(!k.runner.model().primary_chaos, "nothing was applied");
}

#[tokio::test]
async fn a_drain_waits_until_every_replica_is_ready() {
    let k = kube();
    // A replica still starting (after a rollout, say): draining now would
    // take a second one out.
    k.runner.model().vfps[1].warming = 8;
    let (r, _) = run_plan(&k, vec![planned(Scenario::Drain, "drain", 1)]).await;
    r.unwrap();
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert!(m.commands.iter().any(|c| c.starts_with("kubectl drain")));
}

#[tokio::test]
async fn a_drain_that_times_out_fails_and_the_node_is_uncordoned_anyway() {
    let k = kube();
    k.runner.model().drain_times_out = true;
    let (r, _) = run_plan(&k, vec![planned(Scenario::Drain, "drain", 1)]).await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(e.contains("drain did not finish within 120s"), "{e}");
    let m = k.runner.model();
    assert!(m.cordoned.is_empty(), "uncordoned after the failed drain");
    assert!(m.commands.last().unwrap().starts_with("kubectl uncordon"));
}

#[tokio::test]
async fn a_pod_kill_schedule_that_never_kills_is_a_failure() {
    // A schedule Chaos Mesh ignores (no pod ever goes): the fault never took effect.
    let mut k = Kube::new(answering("apply", String::new()), &assets());
    k.poll = Duration::from_millis(5);
    let plan = Plan {
        scenarios: vec![planned(Scenario::VfpsPodKill, "vfps-pod-kill", 6)],
        margin_seconds: 0,
        seed: None,
        drill: None,
    };
    let rec = Recorder::new(tokio::time::Instant::now());
    let e = format!(
        "{:#}",
        nemesis::run(&k, &plan, &knobs(), &rec).await.unwrap_err()
    );
    assert!(e.contains("never took effect"), "{e}");
}

#[tokio::test]
async fn database_faults_wait_for_a_healthy_cluster() {
    let k = kube();
    k.runner.model().db_recovering = 6;
    let (r, _) = run_plan(
        &k,
        vec![
            planned(Scenario::DbNetworkPartition, "db-network-partition", 1),
            planned(Scenario::DbPrimaryKill, "cnpg-primary-kill", 1),
        ],
    )
    .await;
    r.unwrap();
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    // The checks of the model itself can fire: a fault on a recovering cluster.
    drop(m);
    let mut m = k.runner.model();
    m.db_recovering = 5;
    m.apply("kind: NetworkChaos\naction: partition\ndirection: to\n")
        .unwrap();
    assert!(
        !m.violations.is_empty(),
        "the model catches a fault on an unhealthy cluster"
    );
}
