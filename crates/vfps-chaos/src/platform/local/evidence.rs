//! Evidence of a local run: the HA manager's view (member list and failover
//! history) and every log — etcd, Patroni, PostgreSQL, vfps, the identity
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
            files.push((base.join(format!("vfps-{z}.log")), format!("vfps-{z}.log")));
        }
        for (from, name) in files.into_iter().filter(|(from, _)| from.exists()) {
            std::fs::copy(&from, logs.join(&name))
                .with_context(|| format!("cannot copy {}", from.display()))?;
        }
        Ok(())
    }
}
