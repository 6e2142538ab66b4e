//! The service's CSV jobs on kind, against the simulated cluster: read from
//! vfps's database on the primary, strictly; and `vfps-job-runner-kill`, the
//! pod named by a running job's lease killed by name.

use std::time::Duration;

use super::{kube, planned, run_plan};
use crate::{
    nemesis::{Faults, RunningJob},
    platform::kind::jobs::{self, APP_DATABASE},
    scenario::Scenario,
};

#[tokio::test]
async fn jobs_now_reads_vfpss_database_on_the_primary() {
    let k = kube();
    k.runner.model().csv_jobs = vec![
        "j2|t|vfps-7d9f-abcde/1|3|20000|600000|1500000".into(),
        "j1|f||1|50000|1500000|1500000".into(),
    ];
    let jobs = k.jobs_now().await.unwrap();
    assert_eq!(
        jobs,
        [
            RunningJob {
                id: "j2".into(),
                running: true,
                runner: "vfps-7d9f-abcde/1".into(),
                epoch: 3,
                rows: 20000,
                bytes_done: 600_000,
                bytes_total: 1_500_000,
            },
            RunningJob {
                id: "j1".into(),
                running: false,
                runner: String::new(),
                epoch: 1,
                rows: 50000,
                bytes_done: 1_500_000,
                bytes_total: 1_500_000,
            },
        ]
    );
    let m = k.runner.model();
    let asked = m
        .commands
        .iter()
        .find(|c| c.contains("csv_jobs"))
        .expect("psql asked");
    assert!(
        asked.contains("exec -n vfps vfps-db-1 -c postgres -- psql")
            && asked.contains(&format!("-d {APP_DATABASE} ")),
        "{asked}"
    );
}

#[tokio::test]
async fn jobs_now_follows_the_primary_and_fails_without_one() {
    let k = kube();
    k.runner.model().csv_jobs = vec!["j1|t|vfps-a/1|2|10|20|30".into()];
    k.runner.model().primary = Some("vfps-db-2".into());
    assert_eq!(k.jobs_now().await.unwrap()[0].epoch, 2);
    k.runner.model().primary = None;
    let e = format!("{:#}", k.jobs_now().await.unwrap_err());
    assert!(e.contains("no database primary"), "{e}");
}

#[test]
fn the_jobs_psql_prints_are_read_strictly() {
    assert!(jobs::jobs_of("\n").unwrap().is_empty());
    for bad in [
        "j1|t|r/1|2|10|20",
        "j1|t|r/1|2|10|20|30|40",
        "j1|yes|r/1|2|10|20|30",
        "j1|t|r/1|two|10|20|30",
        "|t|r/1|2|10|20|30",
        "ERROR:  relation \"csv_jobs\" does not exist",
    ] {
        assert!(jobs::jobs_of(bad).is_err(), "{bad:?} read as a job");
    }
}

/// A job running on `vfps-1` at epoch 1, taken over by `vfps-2` once its
/// runner is killed.
fn job_on_vfps_1(k: &super::Kube<super::FakeKubectl>) {
    let mut m = k.runner.model();
    m.csv_jobs = vec!["j1|t|vfps-1/1|1|5000|150000|1500000".into()];
    m.csv_jobs_after_kill = Some(vec!["j1|t|vfps-2/1|2|5000|150000|1500000".into()]);
}

/// The kill hits the pod the job's lease names — not one Chaos Mesh picks —
/// and the scenario heals when another replica holds the job under a higher
/// epoch and the pod is replaced.
#[tokio::test]
async fn job_runner_kill_kills_the_pod_holding_the_jobs_lease_on_kubernetes() {
    let k = kube();
    job_on_vfps_1(&k);
    let before: Vec<(String, u64)> = k
        .runner
        .model()
        .vfps
        .iter()
        .map(|p| (p.name.clone(), p.uid))
        .collect();
    let (r, events) = run_plan(
        &k,
        vec![planned(Scenario::JobRunnerKill, "vfps-job-runner-kill", 2)],
    )
    .await;
    r.unwrap();
    let has = |s: &str| events.iter().any(|e| e.contains(s));
    for expected in [
        "vfps-job-runner-kill killed pod vfps-1 on vfps-ha-worker2 running job j1 (epoch 1, 5000 rows checkpointed)",
        "vfps-job-runner-kill healed: job j1 taken over by vfps-2/1 (epoch 2); pod vfps-1 on vfps-ha-worker2 replaced",
    ] {
        assert!(has(expected), "missing event {expected:?} in {events:#?}");
    }
    let m = k.runner.model();
    let now: Vec<(String, u64)> = m.vfps.iter().map(|p| (p.name.clone(), p.uid)).collect();
    assert!(!now.contains(&before[1]), "vfps-1 was killed: {now:?}");
    assert!(
        now.contains(&before[0]) && now.contains(&before[2]),
        "the other replicas untouched: {now:?}"
    );
    assert_eq!(now.len(), 3, "the Deployment re-created the pod: {now:?}");
    assert!(!m.runner_kill, "the spent PodChaos is removed");
    assert!(m.violations.is_empty(), "{:?}", m.violations);
}

/// A PodChaos that kills nothing fails the scenario, and the object is
/// removed anyway.
#[tokio::test]
async fn job_runner_kill_fails_on_kubernetes_when_the_runner_was_not_killed() {
    let (k, e) = failed_runner_kill(|m| m.runner_kill_inert = true).await;
    assert!(e.contains("vfps pod vfps-1 killed"), "{e}");
    assert!(!k.runner.model().runner_kill, "the PodChaos is removed");
}

/// The job's holder is killed but nobody takes the job over: the scenario
/// fails rather than healing on the replacement alone.
#[tokio::test]
async fn job_runner_kill_fails_on_kubernetes_when_the_job_is_not_taken_over() {
    let (_, e) = failed_runner_kill(|m| m.csv_jobs_after_kill = None).await;
    assert!(e.contains("job j1 was not taken over"), "{e}");
}

/// `vfps-job-runner-kill` on the job of [`job_on_vfps_1`] in a cluster that
/// `breaks` (quick to give up): the cluster and the scenario's error, which
/// it must end with.
async fn failed_runner_kill(
    breaks: impl FnOnce(&mut super::Model),
) -> (super::Kube<super::FakeKubectl>, String) {
    let mut k = kube();
    k.heal_timeout = Duration::from_millis(300);
    job_on_vfps_1(&k);
    breaks(&mut k.runner.model());
    let (r, _) = run_plan(
        &k,
        vec![planned(Scenario::JobRunnerKill, "vfps-job-runner-kill", 1)],
    )
    .await;
    let e = format!("{:#}", r.unwrap_err());
    (k, e)
}

/// A job still held by a pod an earlier fault killed (until its lease runs
/// out) is passed over: the kill hits a job's holder that is there.
#[tokio::test]
async fn job_runner_kill_passes_over_a_job_whose_holder_is_gone() {
    let k = kube();
    job_on_vfps_1(&k);
    {
        let mut m = k.runner.model();
        let gone = "j0|t|vfps-7d9f-gone1/1|3|9000|100000|1500000".to_owned();
        m.csv_jobs.insert(0, gone.clone());
        if let Some(after) = m.csv_jobs_after_kill.as_mut() {
            after.insert(0, gone);
        }
    }
    let (r, events) = run_plan(
        &k,
        vec![planned(Scenario::JobRunnerKill, "vfps-job-runner-kill", 2)],
    )
    .await;
    r.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.contains("killed pod vfps-1 on vfps-ha-worker2 running job j1")),
        "{events:#?}"
    );
}
