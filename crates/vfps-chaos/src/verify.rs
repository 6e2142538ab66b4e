//! The verification pass, after settling: every ledger entry re-Created and
//! looked up through each replica separately (a replica-local cache or a replica
//! on a stale connection shows up as a disagreement), every listed pseudonym
//! looked up, and every side namespace's pair checked against its lifecycle.
//! Its own retry policy and bounded concurrency.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use futures::StreamExt;
use tonic::Code;
use vfps_client::{Client, Outcome};

use crate::{
    checker::{Answer, FinalChecks, Observation, ReplicaAnswer},
    history::{Entry, Leftovers, Status},
    redact,
};

fn answer<T>(o: Outcome<T>, value: impl FnOnce(T) -> String) -> Answer {
    match o {
        Outcome::Ok(v) => Answer::Value(value(v)),
        Outcome::Fail(Code::NotFound) => Answer::NotFound,
        other => Answer::Error(format!("{:?}", other.code())),
    }
}

async fn through(client: &Client, namespace: &str, e: &Entry, deadline: Duration) -> ReplicaAnswer {
    let recreated = answer(client.create(namespace, &e.original, deadline).await, |p| {
        p.pseudonym_value
    });
    let lookup = match (&e.status, &recreated) {
        (Status::Ok, _) => e.pseudonym.clone(),
        (Status::Indeterminate, Answer::Value(p)) => Some(p.clone()),
        _ => None,
    };
    let reverse = match lookup {
        Some(p) => Some(answer(client.get(namespace, &p, deadline).await, |p| {
            p.original_value.unwrap_or_default()
        })),
        None => None,
    };
    ReplicaAnswer { recreated, reverse }
}

/// Observes every entry through every replica (`replicas`: one client each);
/// `progress` prints a line every 1,000 entries.
pub async fn observe(
    replicas: &[Client],
    namespace: &str,
    ledger: &[Entry],
    concurrency: usize,
    deadline: Duration,
    progress: bool,
) -> Vec<Observation> {
    let total = ledger.len();
    let done = Arc::new(AtomicUsize::new(0));
    futures::stream::iter(ledger.iter().cloned())
        .map(|e| {
            let done = done.clone();
            async move {
                let mut answers = Vec::with_capacity(replicas.len());
                for client in replicas {
                    answers.push(through(client, namespace, &e, deadline).await);
                }
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if progress && (n.is_multiple_of(1000) || n == total) {
                    eprintln!("verify {n}/{total} (through {} replicas)", replicas.len());
                }
                Observation { replicas: answers }
            }
        })
        .buffered(concurrency.max(1))
        .collect()
        .await
}

/// Looks up every listed pseudonym and every side namespace's pair.
pub async fn leftovers(
    client: &Client,
    namespace: &str,
    leftovers: &Leftovers,
    concurrency: usize,
    deadline: Duration,
) -> FinalChecks {
    let listed = futures::stream::iter(leftovers.listed.iter().cloned())
        .map(|p| async move {
            let outcome = client.get(namespace, &p, deadline).await;
            (p, outcome.code())
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>();
    let side = futures::stream::iter(leftovers.side.iter().cloned())
        .map(|s| async move {
            let outcome = client.get(&s.namespace, &s.pseudonym, deadline).await;
            let code = outcome.code();
            let wrong_original = matches!(&outcome, Outcome::Ok(p)
                if p.original_value.as_deref() != Some(s.original.as_str()));
            (s, code, wrong_original)
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>();
    let (listed, side) = tokio::join!(listed, side);
    let mut checks = FinalChecks {
        checked: listed.len() + side.len(),
        ..FinalChecks::default()
    };
    for (p, code) in listed {
        match code {
            Code::Ok => {}
            Code::NotFound => checks.listed_unresolved.push(format!(
                "listed pseudonym {}… does not resolve",
                p.chars().take(8).collect::<String>()
            )),
            _ => checks.undecided += 1,
        }
    }
    for (s, code, wrong_original) in side {
        let what = format!(
            "pair {} of side namespace {}",
            redact(&s.original),
            s.namespace
        );
        match (s.must_resolve, code) {
            (true, Code::Ok) if wrong_original => checks
                .side_violations
                .push(format!("{what} resolves to another original")),
            (true, Code::Ok) | (false, Code::NotFound) => {}
            (true, Code::NotFound) => checks.side_violations.push(format!(
                "{what} does not resolve, and its namespace was never deleted"
            )),
            (false, Code::Ok) => checks
                .side_violations
                .push(format!("{what} resolves after its delete was acknowledged")),
            _ => checks.undecided += 1,
        }
    }
    checks
}
