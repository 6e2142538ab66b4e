//! One connection per process, outside the pool, that watches the database:
//!
//! - a round trip every [`PROBE_INTERVAL`] (`SELECT pg_is_in_recovery()`, or the
//!   session read-only) tells
//!   [`Reachability`] whether a writable primary answers from here, without
//!   borrowing from the pool that serves requests;
//! - it `LISTEN`s for namespace deletions and renews the cache lease of
//!   [`Coherence`] after each round trip (see `coherence.rs` for why that keeps
//!   every replica's caches correct);
//! - after each (re)connect, until it finds them, it checks that this binary's
//!   migrations are applied ([`SchemaState`]): a replica started on a database
//!   nobody migrated says so in its readiness and its log, instead of being
//!   ready and failing every call;
//! - when the primary it found stops answering, it tells the pool to close
//!   its connections opened until then ([`Distrust`]).
//!
//! It runs until its store is dropped.

use std::{
    sync::{Arc, Weak},
    time::{Duration, Instant},
};

use super::{
    pool::{Distrust, Manager},
    with_sources,
};
use crate::{coherence::Coherence, health::Reachability};

/// Whether the database's schema has this binary's migrations, as the monitor
/// last found it.
#[derive(Debug, Default)]
pub struct SchemaState {
    problem: std::sync::Mutex<Option<String>>,
}

impl SchemaState {
    pub fn problem(&self) -> Option<String> {
        self.problem.lock().ok().and_then(|p| p.clone())
    }

    /// Records a finding; logs when it changes.
    fn set(&self, problem: Option<String>) {
        let Ok(mut current) = self.problem.lock() else {
            return;
        };
        match (&*current, &problem) {
            (None, Some(why)) => tracing::error!(reason = %why, "this replica is not ready"),
            (Some(_), None) => tracing::info!("the database schema is migrated; ready"),
            _ => {}
        }
        *current = problem;
    }
}

/// What is missing for this binary, or `None`: every migration it has is
/// applied (newer ones from a newer binary are fine, as in a rolling upgrade).
async fn check_schema(client: &tokio_postgres::Client) -> Result<Option<String>, String> {
    let applied = super::applied_migrations(client)
        .await
        .map_err(|e| super::classify(&e).message)?;
    Ok(match super::pending_migrations(&applied) {
        Ok(pending) if pending.is_empty() => None,
        Ok(pending)
            if pending.contains(&1) && super::adopt::is_upstream(client).await.unwrap_or(false) =>
        {
            Some(
                "the database holds the tables of upstream vfps, not adopted yet: \
                 run `vfps migrate` or set ForceRunDatabaseMigrations=true to adopt them"
                    .to_owned(),
            )
        }
        Ok(pending) => Some(format!(
            "the database schema is not migrated (migrations {pending:?} are not applied): \
             run `vfps migrate` or set ForceRunDatabaseMigrations=true"
        )),
        Err(e) => Some(format!(
            "the database schema does not match this binary: {}",
            e.message
        )),
    })
}

/// The channel a namespace deletion is announced on; the payload is its name.
pub const CHANNEL: &str = "vfps_namespace_deleted";
/// How often the monitor makes its round trip.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// How long a replica trusts its caches after a round trip started: a few probe
/// intervals, so one slow probe does not switch the caches off.
pub const CACHE_LEASE: Duration = Duration::from_secs(1);
/// A probe that takes longer counts as a failure.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub(super) struct Monitor {
    pub manager: Manager,
    /// The pool's: set whenever this monitor's connection fails.
    pub distrust: Arc<Distrust>,
    /// How long one connection attempt (over every host) may take.
    pub connect_budget: Duration,
    pub reachability: Arc<Reachability>,
    pub coherence: Arc<Coherence>,
    pub schema: Arc<SchemaState>,
    /// Gone once the store is dropped: the monitor stops.
    pub alive: Weak<()>,
}

impl Monitor {
    pub async fn run(self) {
        while self.alive.strong_count() > 0 {
            let mut answered = false;
            if let Err(why) = self.watch(&mut answered).await {
                // The primary that answered stopped answering (paused, cut
                // off, killed, demoted): the pool's connections to it would
                // each hold a call until its deadline. Not when it never
                // answered (down from the start, or no LISTEN behind a
                // pooler): that would close healthy connections for nothing.
                if answered {
                    self.distrust.until_now();
                }
                self.reachability.failed(&why);
                self.coherence.revoke();
                tracing::debug!(error = %why, "database monitor reconnects");
                tokio::time::sleep(PROBE_INTERVAL).await;
            }
        }
    }

    /// Connects, listens and probes until something fails (the reason) or the
    /// store is gone (`Ok`); `answered` once a probe found the primary.
    async fn watch(&self, answered: &mut bool) -> Result<(), String> {
        let coherence = self.coherence.clone();
        let connect = self.manager.connect(move |n| {
            if n.channel() == CHANNEL {
                coherence.deleted(n.payload());
            }
        });
        let conn = match tokio::time::timeout(self.connect_budget, connect).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                return Err(format!(
                    "cannot connect to the database: {}",
                    with_sources(&e)
                ))
            }
            Err(_) => return Err("connecting to the database timed out".into()),
        };
        let listening_since = Instant::now();
        match tokio::time::timeout(
            PROBE_TIMEOUT,
            conn.client.batch_execute(&format!("LISTEN {CHANNEL}")),
        )
        .await
        {
            Ok(Ok(())) => self.coherence.relisten(listening_since),
            Ok(Err(e)) => return Err(super::classify(&e).message),
            Err(_) => return Err("the database did not answer LISTEN in time".into()),
        }
        // Prepared once: each probe is then one round trip (a query by text
        // would parse, describe and close a statement every time: three).
        let probe = match tokio::time::timeout(
            PROBE_TIMEOUT,
            conn.client.prepare(
                "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'",
            ),
        )
        .await
        {
            Ok(Ok(statement)) => statement,
            Ok(Err(e)) => return Err(super::classify(&e).message),
            Err(_) => {
                return Err("the database did not answer the probe's preparation in time".into())
            }
        };
        let mut schema_checked = false;
        while self.alive.strong_count() > 0 {
            if !schema_checked {
                match tokio::time::timeout(PROBE_TIMEOUT, check_schema(&conn.client)).await {
                    Ok(Ok(problem)) => {
                        schema_checked = problem.is_none();
                        self.schema.set(problem);
                    }
                    Ok(Err(why)) => return Err(why),
                    Err(_) => {
                        return Err("the database did not answer the schema check in time".into())
                    }
                }
            }
            let started = Instant::now();
            match tokio::time::timeout(PROBE_TIMEOUT, conn.client.query_one(&probe, &[])).await {
                Ok(Ok(row)) => match row.try_get::<_, bool>(0) {
                    Ok(false) => {
                        *answered = true;
                        self.reachability.reached();
                        self.reachability.writable();
                        self.coherence.renew(started);
                    }
                    Ok(true) => {
                        let why = "the connected database accepts no writes (a standby, or \
                                   read-only): check Host and Target Session Attributes";
                        self.reachability.refuses_writes(why);
                        return Err(why.into());
                    }
                    Err(e) => return Err(super::classify(&e).message),
                },
                Ok(Err(e)) => return Err(super::classify(&e).message),
                Err(_) => {
                    return Err(format!(
                        "the database did not answer a probe within {PROBE_TIMEOUT:?}"
                    ))
                }
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
        Ok(())
    }
}
