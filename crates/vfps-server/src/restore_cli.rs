//! `vfps restore …`: the hold that keeps a restored database from minting a
//! second pseudonym for an original it forgot, and the checks vfps makes of a
//! restored database (docs/backup.md).
//!
//! A restore to an earlier point forgets every pseudonym issued after it. A
//! Create of such an original would mint a different one, silently splitting
//! one subject in two. So the restore ends with `vfps restore hold`: from then
//! on the database refuses Creates of originals it does not know (the API
//! answers FAILED_PRECONDITION, HTTP 400 with the reason), while every read and
//! every re-Create of a known original goes on. The operator replays what the
//! restore lost (docs/backup.md) and then runs `vfps restore confirm`, which
//! checks the database and lifts the hold.

use clap::Subcommand;
use vfps_store::postgres::{Finding, PgStore};

#[derive(Subcommand)]
pub enum RestoreAction {
    /// Show the restore holds and what the checks of the database find.
    Status,
    /// Refuse Creates of new originals until `confirm`: the last step of a
    /// restore (the restore commands run it).
    Hold {
        /// What the restore recovered to: `latest` or the target time.
        #[arg(long = "to")]
        restored_to: String,
    },
    /// Check the restored database and lift the hold. Refused while a check
    /// fails.
    Confirm,
}

/// Runs one action against the store `serve` would use (its schema migrated
/// first: a restored database may predate this binary).
pub async fn run(store: &PgStore, action: RestoreAction) -> anyhow::Result<()> {
    store.migrate().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let err = |e: vfps_core::Error| anyhow::anyhow!("{}", e.message);
    match action {
        RestoreAction::Status => {
            let holds = store.restore_holds().await.map_err(err)?;
            if holds.is_empty() {
                println!("no restore recorded");
            }
            for h in holds {
                println!(
                    "restore {} at {} to {}: {}",
                    h.id,
                    h.restored_at,
                    h.restored_to,
                    if h.confirmed {
                        "confirmed"
                    } else {
                        "HOLD: new originals are refused until `vfps restore confirm`"
                    }
                );
            }
            print_findings(&store.restore_findings().await.map_err(err)?);
        }
        RestoreAction::Hold { restored_to } => {
            store.hold_after_restore(&restored_to).await.map_err(err)?;
            println!(
                "hold written: Creates of new originals are refused until `vfps restore confirm`"
            );
            print_findings(&store.restore_findings().await.map_err(err)?);
        }
        RestoreAction::Confirm => {
            let findings = store.restore_findings().await.map_err(err)?;
            print_findings(&findings);
            let failed: Vec<&str> = findings.iter().filter(|f| !f.ok).map(|f| f.check).collect();
            if !failed.is_empty() {
                anyhow::bail!(
                    "not confirmed: the checks {failed:?} failed; the hold stays until they pass"
                );
            }
            let confirmed = store.confirm_restore().await.map_err(err)?;
            println!("confirmed {confirmed} restore hold(s): new originals are accepted again");
        }
    }
    Ok(())
}

fn print_findings(findings: &[Finding]) {
    for f in findings {
        println!(
            "check {}: {} ({})",
            f.check,
            if f.ok { "ok" } else { "FAILED" },
            f.detail
        );
    }
}

/// At start-up, once the database answers: if it was restored and the hold
/// is still open, says so and what the checks find, so an operator reading
/// the log knows why new originals are refused. Gives up quietly after a
/// minute of an unreachable database (readiness reports that) and on a
/// schema without the holds table (not migrated yet: `vfps migrate` says so).
pub fn report_at_start(store: std::sync::Arc<PgStore>) {
    tokio::spawn(async move {
        let mut holds = None;
        for _ in 0..30 {
            match store.restore_holds().await {
                Ok(h) => {
                    holds = Some(h);
                    break;
                }
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await
                }
                Err(_) => return,
            }
        }
        let Some(holds) = holds else { return };
        let open: Vec<_> = holds.iter().filter(|h| !h.confirmed).collect();
        if open.is_empty() {
            return;
        }
        for h in &open {
            tracing::warn!(
                hold = h.id,
                restored_at = %h.restored_at,
                restored_to = %h.restored_to,
                "the database was restored and awaits `vfps restore confirm`: Creates of new originals are refused"
            );
        }
        match store.restore_findings().await {
            Ok(findings) => {
                for f in findings {
                    if f.ok {
                        tracing::info!(check = f.check, found = %f.detail, "restored database: check passed");
                    } else {
                        tracing::warn!(check = f.check, found = %f.detail, "restored database: check FAILED");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "restored database: the checks could not run"),
        }
    });
}
