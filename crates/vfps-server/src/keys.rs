//! A replica's background work on the namespaces' keys (docs/privacy.md):
//! at start, not ready until the key source opens every stored key; then,
//! every `VFPS_KEYS_REFRESH_INTERVAL`, taking up a namespace's new key
//! version (a rotation, `vfps keys rotate`) for new seals and, two
//! intervals later — when every other replica seals under it too —
//! re-sealing the older versions' originals under it.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;
use vfps_core::ErrorKind;
use vfps_store::Store;

use crate::{config::Settings, state::AppState};

/// The keyring of `settings`: `source` (`VFPS_KEYS`) and, while keys are
/// rewrapped, `VFPS_KEYS_PREVIOUS`.
pub fn keyring(
    settings: &Settings,
    source: &vfps_keys::KeySource,
    store: Arc<dyn Store>,
) -> Result<vfps_keys::Keyring, vfps_core::Error> {
    let mut keyring = vfps_keys::Keyring::new(source.open()?, store);
    if let Some(previous) = &settings.keys_previous {
        keyring = keyring.with_previous(previous.open()?);
    }
    Ok(keyring)
}

/// Until the key source opens every namespace's stored keys: not ready,
/// saying why (a key file of another deployment, a KMS key refused), and
/// checked again every few seconds, so a fixed source is taken up.
pub async fn check(state: &AppState, keyring: &vfps_keys::Keyring, shutdown: &CancellationToken) {
    let mut said: Option<String> = None;
    loop {
        let wait = match keyring.check().await {
            Ok(opened) => {
                state.health.set_keys_problem(None);
                tracing::info!(namespaces = opened, source = %keyring.describe(), "the key source opens every namespace's keys");
                return;
            }
            // Unreachable (the database, a KMS): soon again; refused: later.
            Err(e) => {
                if said.as_deref() != Some(e.message.as_str()) {
                    tracing::error!(error = %e, source = %keyring.describe(), "the key source cannot open the namespaces' keys; not ready");
                    said = Some(e.message.clone());
                }
                let wait = match e.kind {
                    ErrorKind::Unavailable => Duration::from_secs(1),
                    _ => Duration::from_secs(5),
                };
                state.health.set_keys_problem(Some(e.message));
                wait
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Every `every`: each sealed namespace's newest key version read anew;
/// once a version has been known for two intervals, one pass re-seals the
/// originals still under older ones. A pass is a run of independent
/// compare-and-set pages, so this replica's stop (or `shutdown`) at any
/// await leaves nothing half-done, and another replica's pass at the same
/// time only skips what this one did. After a start, each rotated
/// namespace gets one pass (rows a replica paused through the rotation
/// sealed late are found then).
pub async fn refresh_and_reseal(
    keyring: Arc<vfps_keys::Keyring>,
    store: Arc<dyn Store>,
    every: Duration,
    shutdown: CancellationToken,
) {
    // The newest version each incarnation was re-sealed to, and when this
    // replica learnt of each version.
    let mut resealed: HashMap<i64, u32> = HashMap::new();
    let mut learnt: HashMap<(i64, u32), Instant> = HashMap::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let pass = async {
            let Ok(namespaces) = store.list_namespaces().await else {
                return;
            };
            // Rows being moved between plain and sealed: a pass moves them.
            for ns in namespaces.iter().filter(|ns| ns.settings.moving) {
                match keyring.move_rows(ns, |_| {}).await {
                    Ok(done) if done.moved > 0 || done.finished => {
                        tracing::info!(
                            namespace = %ns.name,
                            sealed = ns.settings.sealed,
                            rows = done.moved,
                            finished = done.finished,
                            "moved a namespace's originals to its form"
                        );
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(namespace = %ns.name, error = %e, "moving a namespace's originals stopped; the next interval goes on");
                    }
                }
            }
            for ns in namespaces.iter().filter(|ns| ns.settings.sealed) {
                let newest = match keyring.refresh(ns.uid).await {
                    Ok(Some(v)) => v,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(namespace = %ns.name, error = %e, "cannot read a namespace's key versions");
                        continue;
                    }
                };
                let since = *learnt
                    .entry((ns.uid.0, newest))
                    .or_insert_with(Instant::now);
                // Version 1 has nothing older; a version is re-sealed to once.
                if newest == 1
                    || resealed.get(&ns.uid.0) == Some(&newest)
                    || since.elapsed() < 2 * every
                {
                    continue;
                }
                let started = Instant::now();
                match keyring.reseal(ns, |_| {}).await {
                    Ok(done) => {
                        resealed.insert(ns.uid.0, newest);
                        if done != vfps_keys::keyring::Resealing::default() {
                            tracing::info!(
                                namespace = %ns.name,
                                version = newest,
                                resealed = done.resealed,
                                skipped = done.skipped,
                                unopened = done.unopened,
                                seconds = started.elapsed().as_secs_f64(),
                                "re-sealed a namespace's originals under its newest key version"
                            );
                        }
                        if done.unopened > 0 {
                            tracing::error!(namespace = %ns.name, rows = done.unopened, "sealed originals that open under no stored key version: left as they are");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(namespace = %ns.name, error = %e, "re-sealing stopped; the next interval goes on");
                    }
                }
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = pass => {}
        }
    }
}
