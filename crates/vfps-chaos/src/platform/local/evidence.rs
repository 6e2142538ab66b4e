//! Evidence of a local run: the HA manager's view (member list and failover
//! history), the WAL archiver's counters when backups are on, and every log —
//! etcd, Patroni, PostgreSQL, vfps, the Garage object store, the identity
//! provider and HAProxy — copied into the run directory.

use std::path::Path;

use anyhow::Context;

use super::{Local, ZONES};

impl Local {
    /// The HA manager's view (list and history) into `dir`, with a suffix; a
    /// view that cannot be read is written as its error.
    pub async fn snapshot_cluster(&self, dir: &Path, suffix: &str) -> anyhow::Result<()> {
        for what in ["list", "history"] {
            let out = self
                .patronictl(&[what])
                .await
                .unwrap_or_else(|e| format!("{e:#}"));
            crate::report::write_file(dir, &format!("patroni-{what}-{suffix}.txt"), out)?;
        }
        // With backups on: the leader's archiver counters, and a failing
        // archive said on stderr, not left for someone to find in a file.
        if self.opts.base.join("s3-backup-key").exists() {
            let text = match self.archiver().await {
                Ok(a) => {
                    if a.failing() {
                        eprintln!(
                            "backup: WAL archiving is failing ({} failures, last {}): the bucket misses every segment since {}",
                            a.failed_count,
                            a.last_failed_wal.as_deref().unwrap_or("?"),
                            a.last_archived_wal.as_deref().unwrap_or("the start")
                        );
                    }
                    format!("{a:?}\n")
                }
                Err(e) => format!("the archiver's counters cannot be read: {e:#}\n"),
            };
            crate::report::write_file(dir, &format!("archiver-{suffix}.txt"), text)?;
        }
        Ok(())
    }

    /// Copies every log there is into `dir/logs` (a component that never
    /// started has none).
    pub fn collect_logs(&self, dir: &Path) -> anyhow::Result<()> {
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)
            .with_context(|| format!("cannot create {}", logs.display()))?;
        let base = &self.opts.base;
        // The front door's too (the web UI's identity provider and balancer).
        let mut files: Vec<_> = ["etcd.log", "identity-provider.log", "haproxy.log"]
            .into_iter()
            .map(|name| (base.join(name), name.to_owned()))
            .collect();
        for z in ZONES {
            let d = base.join(format!("db-{z}"));
            files.push((d.join("patroni.log"), format!("patroni-{z}.log")));
            files.push((d.join("log/postgresql.log"), format!("postgresql-{z}.log")));
            for component in ["vfps", "garage"] {
                let name = format!("{component}-{z}.log");
                files.push((base.join(&name), name));
            }
        }
        for (from, name) in files.into_iter().filter(|(from, _)| from.exists()) {
            std::fs::copy(&from, logs.join(&name))
                .with_context(|| format!("cannot copy {}", from.display()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::{path::PathBuf, time::Duration};

    use super::super::{DatabaseProfile, Local, Options};

    fn at(base: PathBuf) -> Local {
        Local {
            opts: Options {
                base,
                vfps_bin: PathBuf::from("vfps"),
                restart_backoff: Duration::from_secs(1),
                grace_period: Duration::from_secs(1),
                profile: DatabaseProfile::Safe,
                ui: false,
                ui_tests_dir: PathBuf::new(),
                backup: None,
                sealed: true,
            },
        }
    }

    /// Every component's log is kept under its name, a zone's under the
    /// zone's; one that never started is skipped, not an error.
    #[test]
    fn every_log_there_is_is_kept_under_its_components_name() {
        let base = vfps_testkit::scratch_dir("evidence-base");
        let run = vfps_testkit::scratch_dir("evidence-run");
        std::fs::create_dir_all(base.join("db-b/log")).unwrap();
        for (file, text) in [
            ("etcd.log", "etcd"),
            ("db-b/patroni.log", "patroni b"),
            ("db-b/log/postgresql.log", "postgresql b"),
            ("vfps-c.log", "vfps c"),
            ("garage-a.log", "garage a"),
        ] {
            std::fs::write(base.join(file), text).unwrap();
        }
        at(base).collect_logs(&run).unwrap();
        for (kept, text) in [
            ("etcd.log", "etcd"),
            ("patroni-b.log", "patroni b"),
            ("postgresql-b.log", "postgresql b"),
            ("vfps-c.log", "vfps c"),
            ("garage-a.log", "garage a"),
        ] {
            let got = std::fs::read_to_string(run.join("logs").join(kept));
            assert_eq!(got.ok().as_deref(), Some(text), "{kept}");
        }
        assert!(!run.join("logs/haproxy.log").exists());
    }
}
