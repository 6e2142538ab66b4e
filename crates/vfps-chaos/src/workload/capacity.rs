//! The capacity sweep's workload: Creates of fresh originals and Gets of
//! pseudonyms it was given, nothing else. It judges nothing but speed: every
//! answer other than OK is a failure (a Get that does not return the original
//! it was created for included), and its code is counted.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use futures::future::BoxFuture;
use rand::{rngs::StdRng, Rng, SeedableRng};
use tokio::time::Instant;
use vfps_client::{Client, Outcome, Until};

use super::Acked;
use super::{Served, Workload};
use crate::operation::Operation;

/// Most acknowledged pairs kept for Gets (a uniform sample).
const SAMPLE: usize = 10_000;

/// Counted for a Get answered with another original than its pseudonym's.
pub const WRONG_ORIGINAL: &str = "WRONG_ORIGINAL";

struct State {
    rng: StdRng,
    /// Acknowledged (original, pseudonym) pairs, a uniform sample.
    acked: Acked,
}

/// Creates and Gets against one namespace.
pub struct CreateGet {
    client: Client,
    namespace: String,
    state: Mutex<State>,
    /// Failures by code since the last [`CreateGet::take_failures`].
    failures: Mutex<BTreeMap<String, u64>>,
    /// The clock `last_ok_micros` counts on.
    epoch: Instant,
    /// When the latest successful answer arrived, in µs since `epoch`: the
    /// end of what a step sustained.
    last_ok_micros: AtomicU64,
}

impl CreateGet {
    pub fn new(client: Client, namespace: String, seed: u64) -> Arc<Self> {
        Arc::new(Self {
            client,
            namespace,
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed),
                acked: Acked::new(SAMPLE),
            }),
            failures: Mutex::new(BTreeMap::new()),
            epoch: Instant::now(),
            last_ok_micros: AtomicU64::new(0),
        })
    }

    /// Failures counted since the last call, by code.
    pub fn take_failures(&self) -> BTreeMap<String, u64> {
        self.failures
            .lock()
            .map(|mut f| std::mem::take(&mut *f))
            .unwrap_or_default()
    }

    /// When the latest successful answer arrived (`None` before the first).
    pub fn last_ok(&self) -> Option<Instant> {
        match self.last_ok_micros.load(Ordering::Relaxed) {
            0 => None,
            micros => Some(self.epoch + std::time::Duration::from_micros(micros)),
        }
    }

    fn answered_ok(&self) {
        let micros = u64::try_from(self.epoch.elapsed().as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        self.last_ok_micros.fetch_max(micros, Ordering::Relaxed);
    }

    fn failed(&self, code: &str) {
        if let Ok(mut f) = self.failures.lock() {
            *f.entry(code.to_owned()).or_default() += 1;
        }
    }

    fn next_original(&self) -> String {
        self.state
            .lock()
            .map(|mut s| format!("cap-{:032x}", s.rng.random::<u128>()))
            .unwrap_or_default()
    }

    fn acked_pair(&self) -> Option<(String, String)> {
        let mut s = self.state.lock().ok()?;
        let State { rng, acked, .. } = &mut *s;
        acked.pick(rng)
    }

    fn remember(&self, original: String, pseudonym: String) {
        if let Ok(mut s) = self.state.lock() {
            let State { rng, acked, .. } = &mut *s;
            acked.remember(rng, original, pseudonym);
        }
    }

    async fn create(&self, original: String, until: Until) -> Served {
        match self.client.create(&self.namespace, &original, until).await {
            Outcome::Ok(p) => {
                self.answered_ok();
                self.remember(original, p.pseudonym_value);
                Served::Yes
            }
            other => {
                self.failed(&format!("{:?}", other.code()));
                Served::No
            }
        }
    }

    async fn get(&self, (original, pseudonym): (String, String), until: Until) -> Served {
        match self.client.get(&self.namespace, &pseudonym, until).await {
            Outcome::Ok(p) if p.original_value.as_deref() == Some(original.as_str()) => {
                self.answered_ok();
                Served::Yes
            }
            Outcome::Ok(_) => {
                self.failed(WRONG_ORIGINAL);
                Served::No
            }
            other => {
                self.failed(&format!("{:?}", other.code()));
                Served::No
            }
        }
    }
}

impl Workload for CreateGet {
    fn start(self: Arc<Self>, op: Operation, _: u64, until: Until) -> BoxFuture<'static, Served> {
        // The sweep's settings admit create and get only; anything else is
        // sent as a Create, so that every slot still calls.
        let pair = (op == Operation::Get).then(|| self.acked_pair()).flatten();
        match pair {
            Some(pair) => Box::pin(async move { self.get(pair, until).await }),
            // Before anything was acknowledged, a Get slot Creates.
            None => {
                let original = self.next_original();
                Box::pin(async move { self.create(original, until).await })
            }
        }
    }
}
