//! The jobs table's contract: claims, fencing, takeovers, cancel and delete.

use std::time::{Duration, SystemTime};

use vfps_store::jobs::{Claim, Deleted, Finish, JobRecord, JobState, Progress};

use super::*;

fn job(id: &str, by: &str) -> JobRecord {
    JobRecord::new(id.into(), by.into(), "{}".into(), SystemTime::now())
}

fn progress(rows: i64, takeover: Option<&str>) -> Progress {
    Progress {
        checkpoint: format!("{{\"rows\":{rows}}}"),
        rows_done: rows,
        bytes_done: rows * 10,
        takeover: takeover.map(str::to_owned),
    }
}

fn claim(runner: &str, lease: Duration) -> Claim<'_> {
    Claim {
        runner,
        lease,
        stalled: Duration::from_secs(3600),
    }
}

/// Until the clock has moved past `d` (leases are compared with it).
async fn pass(d: Duration) {
    tokio::time::sleep(d + Duration::from_millis(20)).await;
}

async fn a_job_is_queued_claimed_checkpointed_and_finished(store: Arc<dyn Store>) {
    store.insert_job(&job("j1", "alice")).await.unwrap();
    assert!(store.insert_job(&job("j1", "alice")).await.is_err());
    store.insert_job(&job("j2", "bob")).await.unwrap();
    // Nothing runs before its upload is there.
    assert!(store
        .claim_job(claim("r1", Duration::from_secs(60)))
        .await
        .unwrap()
        .is_none());
    assert!(store.queue_job("j1", 1234, "{\"plan\":1}").await.unwrap());
    assert!(
        !store.queue_job("j1", 1234, "{}").await.unwrap(),
        "queued once"
    );
    let claimed = store
        .claim_job(claim("r1", Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((claimed.id.as_str(), claimed.epoch), ("j1", 1));
    assert_eq!(claimed.state, JobState::Running);
    assert_eq!(claimed.runner.as_deref(), Some("r1"));
    assert_eq!(claimed.input_bytes, Some(1234));
    assert_eq!(claimed.plan.as_deref(), Some("{\"plan\":1}"));
    // A live lease keeps the job from other runners.
    assert!(store
        .claim_job(claim("r2", Duration::from_secs(60)))
        .await
        .unwrap()
        .is_none());
    assert!(store
        .checkpoint_job("j1", 1, &progress(5000, None), Duration::from_secs(60))
        .await
        .unwrap());
    assert!(store
        .renew_job_lease("j1", 1, Duration::from_secs(60))
        .await
        .unwrap());
    let seen = store.get_job("j1").await.unwrap().unwrap();
    assert_eq!((seen.rows_done, seen.bytes_done), (5000, 50000));
    assert_eq!(seen.checkpoint.as_deref(), Some("{\"rows\":5000}"));
    assert!(store
        .finish_job(
            "j1",
            1,
            Finish::Completed,
            &progress(9000, Some(r#"{"resumed_rows":9000}"#))
        )
        .await
        .unwrap());
    let done = store.get_job("j1").await.unwrap().unwrap();
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(done.rows_done, 9000);
    // A runner that resumes straight into completion still notes its takeover.
    let takeovers: serde_json::Value = serde_json::from_str(&done.takeovers).unwrap();
    assert_eq!(takeovers, serde_json::json!([{"resumed_rows": 9000}]));
    assert!(done.finished_at.is_some() && done.lease_until.is_none());
    assert!(!store
        .renew_job_lease("j1", 1, Duration::from_secs(60))
        .await
        .unwrap());
    let alices: Vec<String> = store
        .list_jobs(Some("alice"))
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(alices, ["j1"]);
    assert_eq!(store.list_jobs(None).await.unwrap().len(), 2);
    assert_eq!(
        store.delete_job("j2").await.unwrap(),
        Deleted::Unfinished(JobState::AwaitingUpload)
    );
    assert_eq!(store.delete_job("j1").await.unwrap(), Deleted::Deleted);
    assert_eq!(store.delete_job("j1").await.unwrap(), Deleted::NotFound);
    assert!(store.get_job("j1").await.unwrap().is_none());
}

async fn an_expired_lease_is_taken_over_and_the_old_runner_is_fenced(store: Arc<dyn Store>) {
    store.insert_job(&job("j", "alice")).await.unwrap();
    store.queue_job("j", 10, "{}").await.unwrap();
    let lease = Duration::from_millis(200);
    let first = store.claim_job(claim("r1", lease)).await.unwrap().unwrap();
    assert!(store
        .checkpoint_job("j", first.epoch, &progress(100, None), lease)
        .await
        .unwrap());
    pass(lease).await;
    let second = store
        .claim_job(claim("r2", Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.epoch, first.epoch + 1);
    assert_eq!(second.rows_done, 100, "the checkpoint is handed over");
    assert_eq!(second.checkpoint.as_deref(), Some("{\"rows\":100}"));
    // Whatever the first runner writes now changes nothing.
    assert!(!store
        .checkpoint_job("j", first.epoch, &progress(900, None), lease)
        .await
        .unwrap());
    assert!(!store
        .renew_job_lease("j", first.epoch, lease)
        .await
        .unwrap());
    assert!(!store
        .finish_job(
            "j",
            first.epoch,
            Finish::Failed("late"),
            &progress(900, None)
        )
        .await
        .unwrap());
    let takeover = r#"{"epoch":2,"resumed_rows":100}"#;
    assert!(store
        .checkpoint_job(
            "j",
            second.epoch,
            &progress(200, Some(takeover)),
            Duration::from_secs(60)
        )
        .await
        .unwrap());
    let seen = store.get_job("j").await.unwrap().unwrap();
    assert_eq!(seen.rows_done, 200);
    assert_eq!(seen.runner.as_deref(), Some("r2"));
    let takeovers: serde_json::Value = serde_json::from_str(&seen.takeovers).unwrap();
    assert_eq!(
        takeovers,
        serde_json::json!([{"epoch": 2, "resumed_rows": 100}])
    );
}

async fn a_stalled_job_is_taken_over_under_a_live_lease(store: Arc<dyn Store>) {
    store.insert_job(&job("j", "alice")).await.unwrap();
    store.queue_job("j", 10, "{}").await.unwrap();
    let long = Duration::from_secs(3600);
    let first = store.claim_job(claim("r1", long)).await.unwrap().unwrap();
    let stalled = Duration::from_millis(200);
    let eager = Claim {
        runner: "r2",
        lease: long,
        stalled,
    };
    assert!(
        store.claim_job(eager).await.unwrap().is_none(),
        "not stalled yet"
    );
    pass(stalled).await;
    // Renewing the lease is not progress.
    assert!(store.renew_job_lease("j", first.epoch, long).await.unwrap());
    let second = store.claim_job(eager).await.unwrap().unwrap();
    assert_eq!(second.epoch, first.epoch + 1);
}

async fn racing_runners_claim_a_job_once(store: Arc<dyn Store>) {
    store.insert_job(&job("j", "alice")).await.unwrap();
    store.queue_job("j", 10, "{}").await.unwrap();
    let runners: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let name = format!("r{i}");
                store
                    .claim_job(claim(&name, Duration::from_secs(60)))
                    .await
                    .unwrap()
                    .map(|j| j.epoch)
            })
        })
        .collect();
    let mut epochs = Vec::new();
    for r in runners {
        epochs.extend(r.await.unwrap());
    }
    assert_eq!(epochs, [1]);
}

async fn cancel_stops_a_job_and_leaves_a_finished_one_alone(store: Arc<dyn Store>) {
    store.insert_job(&job("a", "alice")).await.unwrap();
    store.queue_job("a", 10, "{}").await.unwrap();
    let running = store
        .claim_job(claim("r1", Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    let cancelled = store.cancel_job("a").await.unwrap().unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert!(!store
        .checkpoint_job(
            "a",
            running.epoch,
            &progress(1, None),
            Duration::from_secs(60)
        )
        .await
        .unwrap());
    assert!(store
        .claim_job(claim("r2", Duration::ZERO))
        .await
        .unwrap()
        .is_none());
    store.insert_job(&job("b", "alice")).await.unwrap();
    store.queue_job("b", 10, "{}").await.unwrap();
    let b = store
        .claim_job(claim("r1", Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    store
        .finish_job(
            "b",
            b.epoch,
            Finish::Failed("line 3: bad"),
            &progress(2, None),
        )
        .await
        .unwrap();
    let after = store.cancel_job("b").await.unwrap().unwrap();
    assert_eq!(after.state, JobState::Failed);
    assert_eq!(after.error.as_deref(), Some("line 3: bad"));
    assert!(store.cancel_job("nope").await.unwrap().is_none());
    store.insert_job(&job("c", "bob")).await.unwrap();
    let mut cleared = store.delete_finished_jobs(Some("alice")).await.unwrap();
    cleared.sort();
    assert_eq!(cleared, ["a", "b"]);
    assert_eq!(store.list_jobs(None).await.unwrap().len(), 1);
}

contract!(
    a_job_is_queued_claimed_checkpointed_and_finished,
    an_expired_lease_is_taken_over_and_the_old_runner_is_fenced,
    a_stalled_job_is_taken_over_under_a_live_lease,
    racing_runners_claim_a_job_once,
    cancel_stops_a_job_and_leaves_a_finished_one_alone,
);
