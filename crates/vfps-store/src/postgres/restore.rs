//! After a restore: the hold that refuses new originals until an operator
//! confirms (migration 7 explains why), and the checks vfps can make of a
//! restored database before it serves.

use vfps_core::Error;

use super::{classify, PgStore};

/// One restore hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreHold {
    pub id: i64,
    /// When the hold was written, as PostgreSQL prints it.
    pub restored_at: String,
    /// `latest` or the target time the restore was asked for.
    pub restored_to: String,
    pub confirmed: bool,
}

/// One check of a restored database: what was checked, and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub check: &'static str,
    pub ok: bool,
    /// Counts and names only: never an original or a pseudonym.
    pub detail: String,
}

/// Installs the triggers while a hold is open. `CREATE OR REPLACE`: a second
/// hold (a second restore) keeps one trigger per table. On a multi-pseudonym
/// namespace's table every insert is a new pseudonym, which the restore may
/// have forgotten issuing to someone else: the function finds no such
/// original in `pseudonyms` and refuses every one of them.
const CREATE_TRIGGER: &str =
    "CREATE OR REPLACE TRIGGER vfps_restore_hold BEFORE INSERT ON pseudonyms \
     FOR EACH ROW EXECUTE FUNCTION vfps_refuse_new_originals(); \
     CREATE OR REPLACE TRIGGER vfps_restore_hold BEFORE INSERT ON multi_pseudonyms \
     FOR EACH ROW EXECUTE FUNCTION vfps_refuse_new_originals()";

const DROP_TRIGGER: &str = "DROP TRIGGER IF EXISTS vfps_restore_hold ON pseudonyms; \
     DROP TRIGGER IF EXISTS vfps_restore_hold ON multi_pseudonyms";

impl PgStore {
    /// Every hold, oldest first (none on a database never restored).
    pub async fn restore_holds(&self) -> Result<Vec<RestoreHold>, Error> {
        let (lease, steps) = self.lease().await?;
        let rows = steps
            .run(lease.client().query(
                "SELECT id, restored_at::text, restored_to, confirmed_at IS NOT NULL \
                 FROM vfps_restore_holds ORDER BY id",
                &[],
            ))
            .await?;
        lease.finish();
        rows.iter()
            .map(|r| {
                Ok(RestoreHold {
                    id: r.try_get(0).map_err(|e| classify(&e))?,
                    restored_at: r.try_get(1).map_err(|e| classify(&e))?,
                    restored_to: r.try_get(2).map_err(|e| classify(&e))?,
                    confirmed: r.try_get(3).map_err(|e| classify(&e))?,
                })
            })
            .collect()
    }

    /// Opens a hold: from its commit on, a Create of an original this
    /// database does not know is refused (`FailedPrecondition`).
    pub async fn hold_after_restore(&self, restored_to: &str) -> Result<(), Error> {
        let (lease, steps) = self.lease().await?;
        let c = lease.client();
        steps.run(c.batch_execute("BEGIN")).await?;
        steps
            .run(c.execute(
                "INSERT INTO vfps_restore_holds (restored_to) VALUES ($1)",
                &[&restored_to],
            ))
            .await?;
        steps.run(c.batch_execute(CREATE_TRIGGER)).await?;
        steps.run(c.batch_execute("COMMIT")).await?;
        lease.finish();
        Ok(())
    }

    /// Confirms every open hold and drops the trigger; how many were open.
    pub async fn confirm_restore(&self) -> Result<u64, Error> {
        let (lease, steps) = self.lease().await?;
        let c = lease.client();
        steps.run(c.batch_execute("BEGIN")).await?;
        let confirmed = steps
            .run(c.execute(
                "UPDATE vfps_restore_holds SET confirmed_at = now() WHERE confirmed_at IS NULL",
                &[],
            ))
            .await?;
        steps.run(c.batch_execute(DROP_TRIGGER)).await?;
        steps.run(c.batch_execute("COMMIT")).await?;
        lease.finish();
        Ok(confirmed)
    }

    /// What a restored database looks like to vfps: its migrations, its
    /// namespaces' identities, and pseudonyms unique per namespace.
    pub async fn restore_findings(&self) -> Result<Vec<Finding>, Error> {
        let pending = self.pending_migrations().await?;
        let (lease, steps) = self.lease().await?;
        let c = lease.client();
        let row = steps
            .run(c.query_one(
                "SELECT (SELECT count(*) FROM namespaces), \
                        (SELECT count(*) FROM namespaces WHERE uid = 0), \
                        (SELECT count(*) FROM pseudonyms), \
                        (SELECT count(*) FROM (SELECT 1 FROM pseudonyms \
                            GROUP BY namespace, pseudonym_value HAVING count(*) > 1) d), \
                        (SELECT count(*) FROM pseudonyms p WHERE NOT EXISTS \
                            (SELECT 1 FROM namespaces n WHERE n.name = p.namespace))",
                &[],
            ))
            .await?;
        let get = |i: usize| row.try_get::<_, i64>(i).map_err(|e| classify(&e));
        let (namespaces, without_uid, pseudonyms, reused, orphans) =
            (get(0)?, get(1)?, get(2)?, get(3)?, get(4)?);
        lease.finish();
        Ok(vec![
            Finding {
                check: "migrations",
                ok: pending.is_empty(),
                detail: if pending.is_empty() {
                    "every migration of this binary is applied".to_owned()
                } else {
                    format!("migrations {pending:?} are not applied (run `vfps migrate`)")
                },
            },
            Finding {
                check: "namespace identities",
                ok: without_uid == 0,
                detail: format!("{namespaces} namespaces, {without_uid} without an identity (uid)"),
            },
            Finding {
                check: "pseudonyms unique per namespace",
                ok: reused == 0,
                detail: format!(
                    "{pseudonyms} pseudonyms, {reused} values held by more than one original"
                ),
            },
            Finding {
                check: "pseudonyms belong to a namespace",
                ok: orphans == 0,
                detail: format!("{orphans} pseudonyms of a namespace that does not exist"),
            },
        ])
    }
}
