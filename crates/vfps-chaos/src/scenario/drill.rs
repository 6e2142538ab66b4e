//! `db-restore-drill`: the restore drill as a planned scenario (P9). Unlike
//! the other scenarios it does not share the run's load window: it destroys
//! every database instance, and what a restore may lose (writes after the last
//! archived WAL) would read as lost writes to P2–P4. So it runs after the
//! window and its verification, under a load window of its own, in a
//! namespace of its own, judged by P9 alone; it must be the last scenario
//! listed. Its settings and budgets come from the environment, with defaults:
//!
//! - `DURATION_DB_RESTORE_DRILL`: the drill's load window (the drill takes as
//!   long as its restore; the window keeps the load on through the backup, the
//!   writes after it and the destruction);
//! - `RESTORE_WRITES_AFTER_BACKUP_SECONDS`: writes between the base backup and
//!   the destruction (only the archived WAL keeps them);
//! - `RESTORE_DRILL_TO`: `latest`, or `backup-only` — the unsafe setting, a
//!   restore that skips the WAL after the base backup: P9 must fail on it;
//! - `RESTORE_MAX_LOST_WRITES`, `RESTORE_MAX_LOST_SECONDS`,
//!   `RESTORE_MAX_RTO_SECONDS`: P9's budgets.

use serde::Serialize;

use super::{PlanError, ScenarioName};
use crate::checker::restore::RestoreBudgets;

/// The drill's name in `SCENARIOS`.
pub const NAME: &str = "db-restore-drill";

/// Where the drill restores to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrillTarget {
    /// Every archived WAL segment replayed: the safe restore.
    Latest,
    /// The base backup alone (`recovery_target = 'immediate'`): the unsafe
    /// setting the harness must catch.
    BackupOnly,
}

impl DrillTarget {
    pub fn restore_to(self) -> crate::backup::RestoreTo {
        match self {
            DrillTarget::Latest => crate::backup::RestoreTo::Latest,
            DrillTarget::BackupOnly => crate::backup::RestoreTo::BackupOnly,
        }
    }
}

/// The planned drill.
#[derive(Debug, Clone, Serialize)]
pub struct DrillPlan {
    pub name: ScenarioName,
    /// The drill's own load window.
    pub duration_seconds: u64,
    /// Load before the base backup starts.
    pub warmup_seconds: u64,
    /// Writes between the base backup and the destruction.
    pub writes_after_backup_seconds: u64,
    pub to: DrillTarget,
    pub budgets: RestoreBudgets,
}

impl DrillPlan {
    /// The drill's settings from `var`, every bad one named.
    pub fn from_env(var: &impl Fn(&str) -> Option<String>) -> Result<Self, PlanError> {
        let mut bad = Vec::new();
        let mut whole = |key: &str, default: u64, min: u64| -> u64 {
            match var(key) {
                None => default,
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n >= min => n,
                    _ => {
                        bad.push(format!("{key}={v:?} is not a whole number ≥ {min}"));
                        default
                    }
                },
            }
        };
        let duration = whole("DURATION_DB_RESTORE_DRILL", 90, 1);
        let warmup = whole("RESTORE_WARMUP_SECONDS", 5, 0);
        let after = whole("RESTORE_WRITES_AFTER_BACKUP_SECONDS", 20, 1);
        let lost_writes = whole("RESTORE_MAX_LOST_WRITES", 750, 0);
        let lost_seconds = whole("RESTORE_MAX_LOST_SECONDS", 15, 0);
        let rto = whole("RESTORE_MAX_RTO_SECONDS", 180, 1);
        let to = match var("RESTORE_DRILL_TO").as_deref().map(str::trim) {
            None | Some("" | "latest") => DrillTarget::Latest,
            Some("backup-only") => DrillTarget::BackupOnly,
            Some(other) => {
                bad.push(format!(
                    "RESTORE_DRILL_TO={other:?} is not latest or backup-only"
                ));
                DrillTarget::Latest
            }
        };
        if !bad.is_empty() {
            return Err(PlanError(bad.join("; ")));
        }
        Ok(DrillPlan {
            name: ScenarioName::new(NAME),
            duration_seconds: duration,
            warmup_seconds: warmup,
            writes_after_backup_seconds: after,
            to,
            budgets: RestoreBudgets {
                max_lost_writes: lost_writes,
                max_lost_seconds: lost_seconds as f64,
                max_rto_seconds: rto as f64,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drill_takes_its_budgets_from_the_environment_and_names_every_bad_one() {
        let d = DrillPlan::from_env(&|k| match k {
            "RESTORE_MAX_LOST_SECONDS" => Some("12".into()),
            "RESTORE_DRILL_TO" => Some("backup-only".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(d.to, DrillTarget::BackupOnly);
        assert_eq!(d.budgets.max_lost_seconds, 12.0);
        assert_eq!(d.duration_seconds, 90);
        let e = DrillPlan::from_env(&|k| match k {
            "RESTORE_MAX_RTO_SECONDS" => Some("soon".into()),
            "RESTORE_DRILL_TO" => Some("yesterday".into()),
            _ => None,
        })
        .unwrap_err();
        assert!(
            e.0.contains("RESTORE_MAX_RTO_SECONDS=\"soon\"") && e.0.contains("\"yesterday\""),
            "{e}"
        );
    }
}
