//! The verification pass: re-Create every ledger original and Get every pseudonym,
//! with its own retry policy and bounded concurrency.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use tonic::Code;
use vfps_client::{Client, Outcome};

use crate::{
    checker::{Answer, Observation},
    history::{Entry, Status},
};

fn answer<T>(o: Outcome<T>, value: impl FnOnce(T) -> String) -> Answer {
    match o {
        Outcome::Ok(v) => Answer::Value(value(v)),
        Outcome::Fail(Code::NotFound) => Answer::NotFound,
        other => Answer::Error(format!("{:?}", other.code())),
    }
}

/// Observes every entry; `progress` prints a line every 1,000 entries.
pub async fn observe(
    client: &Client,
    namespace: &str,
    ledger: &[Entry],
    concurrency: usize,
    deadline: Duration,
    progress: bool,
) -> Vec<Observation> {
    let total = ledger.len();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    futures::stream::iter(ledger.iter().cloned())
        .map(|e| {
            let client = client.clone();
            let namespace = namespace.to_owned();
            let done = done.clone();
            async move {
                let recreated = answer(
                    client.create(&namespace, &e.original, deadline).await,
                    |p| p.pseudonym_value,
                );
                let lookup = match (&e.status, &recreated) {
                    (Status::Ok, _) => e.pseudonym.clone(),
                    (Status::Indeterminate, Answer::Value(p)) => Some(p.clone()),
                    _ => None,
                };
                let reverse = match lookup {
                    Some(p) => Some(answer(client.get(&namespace, &p, deadline).await, |p| {
                        p.original_value.unwrap_or_default()
                    })),
                    None => None,
                };
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if progress && (n.is_multiple_of(1000) || n == total) {
                    eprintln!("verify {n}/{total}");
                }
                Observation { recreated, reverse }
            }
        })
        .buffered(concurrency.max(1))
        .collect()
        .await
}
