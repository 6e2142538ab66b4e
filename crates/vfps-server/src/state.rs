//! State shared by every transport: the service, metrics and the replica's health.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use vfps_core::Error;
use vfps_store::health::DatabaseHealth;

use crate::{auth::Auth, jobs::JobApi, metrics::Metrics, service::Service};

#[derive(Clone)]
pub struct AppState {
    pub service: Service,
    pub metrics: Metrics,
    /// Who may call what (everyone, with authorization off).
    pub auth: Auth,
    /// CSV jobs (or why there are none).
    pub jobs: JobApi,
    /// The admin UI's sign-in and sessions.
    pub ui: Arc<crate::ui::settings::Ui>,
    pub health: Arc<Health>,
    /// Cap on any call's deadline, and the deadline of calls that set none.
    pub max_call_deadline: Duration,
    /// `VFPS_READINESS_DATABASE_GRACE`: how long the database may be unreachable
    /// from this replica before the replica leaves rotation.
    pub readiness_database_grace: Duration,
}

/// The replica's own view of whether it should receive traffic.
#[derive(Default)]
pub struct Health {
    /// Set on SIGTERM: the replica is leaving and must not be sent new work.
    draining: AtomicBool,
    /// Set once the configured initial namespaces exist.
    initialised: AtomicBool,
    /// Why the key source cannot open the namespaces' keys, while it cannot:
    /// a replica that cannot read its namespaces' originals is not ready.
    keys_problem: std::sync::Mutex<Option<String>>,
    /// Held while the gRPC health status is written, so a status computed before
    /// draining began is never written after the drain's `NOT_SERVING`.
    pub(crate) grpc_status: tokio::sync::Mutex<()>,
}

impl Health {
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
    pub fn mark_initialised(&self) {
        self.initialised.store(true, Ordering::SeqCst);
    }
    /// Records why the key source cannot open the namespaces' keys
    /// (`None`: it can).
    pub fn set_keys_problem(&self, why: Option<String>) {
        if let Ok(mut p) = self.keys_problem.lock() {
            *p = why;
        }
    }
}

impl AppState {
    /// The instant by which a call must be answered. A small margin is kept so an
    /// `UNAVAILABLE` reaches the caller before its own deadline fires.
    pub fn deadline(&self, asked: Option<Duration>) -> Instant {
        let d = asked.map_or(self.max_call_deadline, |a| a.min(self.max_call_deadline));
        let margin = (d / 10).min(Duration::from_millis(100));
        Instant::now() + d.saturating_sub(margin)
    }

    /// Ready = initialised, not draining, the database's schema migrated for
    /// this binary, and the database not unreachable from this replica for
    /// longer than the grace period. A failover (every replica
    /// loses the database for seconds) therefore leaves every replica in rotation
    /// to hold its callers' calls; a replica cut off on its own leaves it. Asks
    /// nothing of the database: the store reports what its own attempts found.
    pub fn readiness(&self) -> Result<(), String> {
        self.serving()?;
        if let Some(why) = self.service.store().schema_problem() {
            return Err(why);
        }
        match self.service.store().database_health() {
            DatabaseHealth::Reachable => Ok(()),
            DatabaseHealth::NotYetReached => Err("the database has not been reached yet".into()),
            DatabaseHealth::Unreachable { for_, why } if for_ > self.readiness_database_grace => {
                Err(format!(
                    "the database has been unreachable for {:.0?} (grace {:?}): {why}",
                    for_, self.readiness_database_grace
                ))
            }
            DatabaseHealth::Unreachable { .. } => Ok(()),
        }
    }

    /// `/healthz`: ready, and the database reachable from here right now.
    pub fn health(&self) -> Result<(), String> {
        self.readiness()?;
        match self.service.store().database_health() {
            DatabaseHealth::Reachable => Ok(()),
            DatabaseHealth::NotYetReached => Err("the database has not been reached yet".into()),
            DatabaseHealth::Unreachable { for_, why } => Err(format!(
                "the database has been unreachable for {for_:.0?}: {why}"
            )),
        }
    }

    fn serving(&self) -> Result<(), String> {
        if self.health.is_draining() {
            return Err("shutting down".into());
        }
        if let Some(why) = self.health.keys_problem.lock().ok().and_then(|p| p.clone()) {
            return Err(format!(
                "the key source cannot open the namespaces' keys: {why}"
            ));
        }
        if !self.health.initialised.load(Ordering::SeqCst) {
            return Err("initial namespaces are not created yet".into());
        }
        Ok(())
    }
}

impl AppState {
    /// Deletes namespace `name` for the caller of `credential`: an admin's
    /// call, and, when the namespace holds pseudonyms, an erasure of every
    /// one of them, so it needs the erase permission in it as well. Audited
    /// as a namespace delete and (when it held any) as an erasure, each with
    /// the number of mappings erased; answers that number.
    pub async fn delete_namespace(
        &self,
        credential: crate::auth::AuthHeader<'_>,
        name: &str,
        deadline: Instant,
    ) -> Result<u64, Error> {
        use crate::auth::{audit, Operation};
        let who = self.auth.authenticate(credential, deadline).await;
        let mut erased = 0;
        let result: Result<u64, Error> = async {
            let who = who.as_ref().map_err(Clone::clone)?;
            self.auth
                .authorize(who, Operation::DeleteNamespace, Some(name))?;
            erased = self.service.pseudonym_count(name, deadline).await?;
            if erased > 0 {
                self.auth
                    .authorize(who, Operation::ErasePseudonym, Some(name))
                    .map_err(|_| {
                        Error::permission_denied(format!(
                            "deleting namespace {name} erases its {erased} pseudonyms: it needs \
                             the erase permission in {name} as well as an admin role"
                        ))
                    })?;
            }
            self.service.delete_namespace(name, deadline).await?;
            Ok(erased)
        }
        .await;
        let principal = who.as_ref().ok().map(|p| &**p);
        let outcome = result.as_ref().copied().map_err(|e| e.kind);
        for operation in [Operation::DeleteNamespace, Operation::ErasePseudonym] {
            if operation == Operation::ErasePseudonym && erased == 0 {
                continue;
            }
            self.auth.record(&audit::Event {
                principal,
                operation,
                namespace: name,
                job: None,
                token: None,
                outcome,
            });
        }
        result
    }
}
