//! The service's CSV jobs on kind, against the simulated cluster: read from
//! vfps's database on the primary, strictly.

use super::kube;
use crate::{
    nemesis::{Faults, RunningJob},
    platform::kind::jobs::{self, APP_DATABASE},
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
