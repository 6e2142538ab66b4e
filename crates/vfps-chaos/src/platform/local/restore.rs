//! `vfps-chaos local restore`: the database cluster restored in place from
//! its backup bucket, and put back as it was when the restore fails.
//!
//! Nothing is destroyed before the plan proves the target reachable (the
//! bucket's refusals, `crate::backup::plan`). Then the old members' data
//! directories and the cluster's state in etcd are kept aside, not deleted,
//! until the restored cluster is healthy and held; a restore that fails at
//! any step puts them back and starts the old cluster again, which serves
//! every write it acknowledged. An interrupted restore (the tool killed) is
//! put back by the next `local restore`, before it does anything else. The
//! cluster name archiving uses changes only once the restore succeeded, and
//! the new name is chained to the one it came from in the bucket, so every
//! point of every history stays reachable.

use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Context};

use super::{backups::BACKUP_CLUSTER, Local, ZONES};
use crate::backup::{Bucket, RestoreTo};

/// The Patroni scope's keys in etcd.
const SCOPE: &str = "/service/vfps/";
/// The scope's keys kept aside through a restore (the leased ones, the
/// leader's and the members', are not: a put-back cluster elects anew, and
/// the kept `sync` key lets only a synchronous standby or the old leader win).
const KEPT_KEYS: [&str; 5] = ["initialize", "config", "sync", "history", "failsafe"];
/// Where a member's data directory waits through a restore.
const ASIDE: &str = "data.before-restore";
/// How long the restored cluster may take to become healthy.
const RESTORE_HEALTHY: Duration = Duration::from_secs(600);

/// What a restore of the local cluster did, for the operator and the drill.
#[derive(Debug, Clone)]
pub struct LocalRestore {
    pub backup_id: String,
    /// The cluster whose backup and archive it used (an earlier one of the
    /// chain when the target was in that history), and the chain looked at.
    pub from_cluster: String,
    pub chain: Vec<String>,
    /// The commit time of the last transaction recovery replayed (UTC): where
    /// recovery stopped.
    pub recovered_to: Option<String>,
    /// The name the restored cluster archives under from now on.
    pub new_cluster: String,
    /// From the destruction of the old instances to a healthy cluster with
    /// the hold written.
    pub took: std::time::Duration,
    /// When the last old instance was gone: the drill's clock starts its
    /// RTO here, and a write acknowledged before it may have been lost.
    pub destroyed: std::time::Instant,
}

impl Local {
    fn cluster_name_file(&self) -> PathBuf {
        self.opts.base.join("backup-cluster")
    }

    /// The name the running cluster archives under: `vfps-local`, or the one
    /// its last restore gave it.
    pub fn backup_cluster(&self) -> String {
        std::fs::read_to_string(self.cluster_name_file())
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| BACKUP_CLUSTER.to_owned())
    }

    fn kept_dcs_file(&self) -> PathBuf {
        self.opts.base.join("restore-kept-dcs.json")
    }

    /// Whether an earlier restore left the old cluster aside (it was
    /// interrupted before it succeeded or put it back).
    pub fn restore_interrupted(&self) -> bool {
        ZONES
            .iter()
            .any(|z| self.opts.base.join(format!("db-{z}/{ASIDE}")).exists())
    }

    /// Restores the database cluster in place from the bucket alone (module
    /// docs): refused before anything is destroyed if the bucket cannot give
    /// the target; put back as it was if any step fails; a restore an
    /// earlier run left half done is put back first.
    pub async fn restore(&self, to: RestoreTo) -> anyhow::Result<LocalRestore> {
        if self.restore_interrupted() {
            self.put_back().await.context(
                "an earlier restore was interrupted and its cluster could not be put back",
            )?;
            bail!(
                "an earlier restore was interrupted: the cluster was put back as it was before \
                 it (every acknowledged write kept); run the restore again"
            );
        }
        let current = self.backup_bucket_for(ZONES[0], &self.backup_cluster())?;
        let plan = current.plan(to).await?;
        let old = self.backup_bucket_for(ZONES[0], &plan.cluster)?;
        let started = std::time::Instant::now();
        // No replica may write to the restored database before its hold is
        // written: a Create of an original the restore forgot would mint it
        // a second pseudonym. They stay down until then.
        for z in ZONES {
            self.keep_replica_down(z).await?;
        }
        let new_cluster = format!(
            "{}-{}",
            BACKUP_CLUSTER,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default()
        );
        let destroyed = match self.set_aside().await {
            Ok(at) => at,
            Err(e) => return Err(self.undo(e).await),
        };
        let restored = async {
            step("bootstrap")?;
            for z in ZONES {
                let method = self.restore_bootstrap(z, &old, &plan.backup_id, to)?;
                self.write_patroni_config_archiving(z, &method, &new_cluster)
                    .await?;
            }
            // What the members log from here on is this restore's.
            let marks = self.log_marks();
            for z in ZONES {
                self.start_db(z).await?;
            }
            self.wait_restored(&marks).await?;
            // The next restart is an ordinary one: no bootstrap method left.
            for z in ZONES {
                self.write_patroni_config_archiving(z, "", &new_cluster)
                    .await?;
            }
            step("hold")?;
            crate::backup::cli::hold(&self.opts.vfps_bin, to, &super::connection_string()).await?;
            anyhow::Ok(())
        }
        .await;
        if let Err(e) = restored {
            return Err(self.undo(e).await);
        }
        // Done: the new name is the one in use, chained to the old history;
        // the old cluster's data goes.
        std::fs::write(self.cluster_name_file(), &new_cluster)?;
        self.drop_aside();
        for z in ZONES {
            self.uncordon_replica(z).await;
        }
        self.wait_replicas_ready(Duration::from_secs(60)).await?;
        let took = started.elapsed();
        let recovered_to = self.recovered_to().await;
        self.base_backup().await?;
        self.backup_bucket_for(ZONES[0], &new_cluster)?
            .chain_to(&plan.cluster)
            .await?;
        Ok(LocalRestore {
            backup_id: plan.backup_id,
            from_cluster: plan.cluster,
            chain: plan.chain,
            recovered_to: (!recovered_to.trim().is_empty()).then(|| recovered_to.trim().to_owned()),
            new_cluster,
            took,
            destroyed,
        })
    }

    /// When the last transaction recovery replayed was committed (UTC), read
    /// on the leader: where recovery stopped.
    async fn recovered_to(&self) -> String {
        const SQL: &str =
            "SELECT coalesce(to_char(pg_last_xact_replay_timestamp() AT TIME ZONE 'UTC', \
                           'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '')";
        let Ok(Some(leader)) = self.leader().await else {
            return String::new();
        };
        let Ok(zone) = super::zone_of(&leader.name) else {
            return String::new();
        };
        self.query_instance(zone, SQL).await.unwrap_or_default()
    }

    /// Every member stopped, its data directory and the scope's durable
    /// etcd keys kept aside, the scope cleared for the restored cluster.
    /// Answers when the last old instance was gone.
    async fn set_aside(&self) -> anyhow::Result<std::time::Instant> {
        eprintln!("restore: setting the old cluster aside");
        let kept = self.dcs_keys().await?;
        super::write_secret(
            &self.kept_dcs_file(),
            serde_json::to_string(&kept)?.as_bytes(),
        )?;
        for z in ZONES {
            // A member already dead is as good as killed.
            let _ = self.kill_db(z).await;
            clear_stale_socket_locks(&self.opts.base.join(format!("db-{z}")))?;
        }
        let destroyed = std::time::Instant::now();
        for z in ZONES {
            let dir = self.opts.base.join(format!("db-{z}"));
            if dir.join("data").exists() {
                std::fs::rename(dir.join("data"), dir.join(ASIDE))
                    .with_context(|| format!("cannot set {} aside", dir.join("data").display()))?;
            }
        }
        self.etcd(&["del", "--prefix", SCOPE]).await?;
        step("set-aside")?;
        Ok(destroyed)
    }

    /// The restore failed with `cause`: the old cluster put back (and the
    /// replicas started on it); answers the error to report.
    async fn undo(&self, cause: anyhow::Error) -> anyhow::Error {
        eprintln!("restore: {cause:#}; putting the cluster back as it was");
        match self.put_back().await {
            Ok(()) => cause.context("the restore failed; the cluster was put back as it was before it, with every write it had acknowledged"),
            Err(e) => cause.context(format!(
                "the restore failed, and putting the cluster back failed too ({e:#}): its old data directories are under {}/db-<zone>/{ASIDE}",
                self.opts.base.display()
            )),
        }
    }

    /// The cluster as it was before the restore: restored members stopped
    /// and their data removed, the kept data directories and etcd keys put
    /// back, the old configuration (archiving under the name in use), the
    /// members started, the replicas uncordoned.
    async fn put_back(&self) -> anyhow::Result<()> {
        eprintln!("restore: putting the old cluster back");
        for z in ZONES {
            let _ = self.kill_db(z).await;
            clear_stale_socket_locks(&self.opts.base.join(format!("db-{z}")))?;
        }
        for z in ZONES {
            let dir = self.opts.base.join(format!("db-{z}"));
            if dir.join(ASIDE).exists() {
                if dir.join("data").exists() {
                    std::fs::remove_dir_all(dir.join("data"))
                        .with_context(|| format!("cannot remove {}", dir.join("data").display()))?;
                }
                std::fs::rename(dir.join(ASIDE), dir.join("data"))
                    .with_context(|| format!("cannot put {} back", dir.join(ASIDE).display()))?;
            }
        }
        self.etcd(&["del", "--prefix", SCOPE]).await?;
        if let Ok(text) = std::fs::read_to_string(self.kept_dcs_file()) {
            let kept: Vec<(String, String)> = serde_json::from_str(&text)?;
            for (key, value) in kept {
                self.etcd(&["put", &key, &value]).await?;
            }
        }
        for z in ZONES {
            self.write_patroni_config(z, "").await?;
        }
        for z in ZONES {
            self.start_db(z).await?;
        }
        self.wait_db_healthy(Duration::from_secs(120)).await?;
        let _ = std::fs::remove_file(self.kept_dcs_file());
        for z in ZONES {
            self.uncordon_replica(z).await;
        }
        self.wait_replicas_ready(Duration::from_secs(60)).await
    }

    /// The kept-aside old cluster gone for good (the restore succeeded).
    fn drop_aside(&self) {
        for z in ZONES {
            let aside = self.opts.base.join(format!("db-{z}/{ASIDE}"));
            if let Err(e) = std::fs::remove_dir_all(&aside) {
                eprintln!("restore: cannot remove {}: {e}", aside.display());
            }
        }
        let _ = std::fs::remove_file(self.kept_dcs_file());
    }

    /// The scope's durable keys (see [`KEPT_KEYS`]) and their values.
    async fn dcs_keys(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut kept = Vec::new();
        for key in KEPT_KEYS {
            let path = format!("{SCOPE}{key}");
            let out = self.etcd(&["get", &path, "--print-value-only"]).await?;
            let value = out.strip_suffix('\n').unwrap_or(&out);
            if !value.is_empty() {
                kept.push((path, value.to_owned()));
            }
        }
        Ok(kept)
    }

    async fn etcd(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut all = vec!["--endpoints", super::ETCD];
        all.extend_from_slice(args);
        crate::platform::net::cmd("etcdctl", &all)
            .await
            .context("etcd of the local platform")
    }

    /// Where each member's PostgreSQL and Patroni logs end now.
    fn log_marks(&self) -> Vec<(PathBuf, u64)> {
        ZONES
            .iter()
            .flat_map(|z| {
                let dir = self.opts.base.join(format!("db-{z}"));
                [dir.join("log/postgresql.log"), dir.join("patroni.log")]
            })
            .map(|path| {
                let len = std::fs::metadata(&path).map_or(0, |m| m.len());
                (path, len)
            })
            .collect()
    }

    /// Waits for the restored cluster to be healthy; ends at once, with
    /// PostgreSQL's or Patroni's own message, when recovery failed on a
    /// member (it will not succeed by waiting: "recovery ended before
    /// configured recovery target was reached", a segment that cannot be
    /// fetched, a bootstrap Patroni gave up). Only what was logged after
    /// `marks` counts.
    async fn wait_restored(&self, marks: &[(PathBuf, u64)]) -> anyhow::Result<()> {
        step("recovery")?;
        let deadline = tokio::time::Instant::now() + RESTORE_HEALTHY;
        loop {
            if self.db_healthy().await {
                return Ok(());
            }
            if let Some(why) = recovery_failed(marks) {
                bail!("the restored cluster could not start: {why}");
            }
            if tokio::time::Instant::now() >= deadline {
                return self.wait_db_healthy(Duration::ZERO).await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Patroni's custom bootstrap (YAML under `bootstrap:`): the base backup
    /// copied into the member's data directory, recovery from the archive.
    fn restore_bootstrap(
        &self,
        zone: &str,
        bucket: &Bucket,
        backup_id: &str,
        to: crate::backup::RestoreTo,
    ) -> anyhow::Result<String> {
        let env = bucket.write_credentials(&self.backup_credentials_dir(zone), Some("postgres"))?;
        let data = self.opts.base.join(format!("db-{zone}/data"));
        // Patroni runs the command without a shell: `env` sets the files.
        let files = env.replace('\'', "");
        let command = format!(
            "env {files} barman-cloud-restore --endpoint-url {} s3://{}/ {} {backup_id} {}",
            bucket.endpoint,
            bucket.bucket,
            bucket.cluster,
            data.display()
        );
        let target = match to {
            crate::backup::RestoreTo::Latest => String::new(),
            crate::backup::RestoreTo::BackupOnly => {
                "      recovery_target: immediate\n      recovery_target_action: promote\n"
                    .to_owned()
            }
            crate::backup::RestoreTo::Time(t) => {
                let iso = crate::backup::plan::format_utc(t);
                format!(
                    "      recovery_target_time: \"{}+00\"\n      recovery_target_action: promote\n",
                    iso.trim_end_matches('Z').replacen('T', " ", 1)
                )
            }
        };
        Ok(format!(
            "  method: vfps_restore\n  vfps_restore:\n    command: \"{command}\"\n    no_params: true\n    \
             keep_existing_recovery_conf: false\n    recovery_conf:\n      restore_command: \"{}\"\n      \
             recovery_target_timeline: latest\n{target}",
            bucket.restore_command(&env).replace('"', "\\\"")
        ))
    }
}

/// The step a restore is at, on stderr: what an operator watching it sees,
/// and where a test kills it. `VFPS_CHAOS_RESTORE_FAIL_AT=<step>` makes it
/// fail there (tests).
fn step(name: &str) -> anyhow::Result<()> {
    eprintln!("restore: {name}");
    if std::env::var("VFPS_CHAOS_RESTORE_FAIL_AT").is_ok_and(|at| at == name) {
        bail!("failed on purpose at the step {name} (VFPS_CHAOS_RESTORE_FAIL_AT)");
    }
    Ok(())
}

/// Removes PostgreSQL's socket lock files in `dir` (and their sockets) whose
/// postmaster is gone or a zombie not reaped yet: answers how many. A killed
/// postmaster stays a zombie until its new parent reaps it, and PostgreSQL's
/// check counts a zombie as running, so a member started at once refused to
/// ("lock file … already exists") though nothing could use the socket.
fn clear_stale_socket_locks(dir: &std::path::Path) -> anyhow::Result<usize> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(0);
    };
    let mut cleared = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with(".s.PGSQL.") && name.ends_with(".lock")) {
            continue;
        }
        let pid = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|t| t.lines().next()?.trim().parse::<u32>().ok());
        if pid.is_some_and(crate::platform::net::alive) {
            continue;
        }
        std::fs::remove_file(entry.path())
            .with_context(|| format!("cannot remove {}", entry.path().display()))?;
        let _ = std::fs::remove_file(dir.join(name.trim_end_matches(".lock")));
        cleared += 1;
    }
    Ok(cleared)
}

/// A line logged after `marks` saying a member's restore failed for good:
/// PostgreSQL's FATAL about recovery, or Patroni giving up its bootstrap.
fn recovery_failed(marks: &[(PathBuf, u64)]) -> Option<String> {
    const FATAL: [&str; 4] = [
        "recovery ended before configured recovery target was reached",
        "requested timeline",
        "could not locate required checkpoint record",
        "lock file",
    ];
    marks.iter().find_map(|(path, from)| {
        let text = std::fs::read(path).ok()?;
        let new = String::from_utf8_lossy(text.get(*from as usize..)?).into_owned();
        let member = path
            .parent()
            .and_then(|p| p.file_name().or_else(|| p.parent()?.file_name()))
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        new.lines().find_map(|l| {
            if l.contains("FATAL") && FATAL.iter().any(|f| l.contains(f)) {
                Some(format!(
                    "{member}: {}",
                    l.split("FATAL:").nth(1).unwrap_or(l).trim()
                ))
            } else if l.contains("Failed to bootstrap cluster") {
                Some(format!(
                    "{member}: Patroni gave up its bootstrap (see its patroni.log)"
                ))
            } else {
                None
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use std::{path::PathBuf, time::Duration};

    /// A socket lock whose postmaster is gone goes (with its socket); one
    /// whose process runs stays.
    #[test]
    fn only_socket_locks_of_dead_postmasters_are_cleared() {
        let dir = vfps_testkit::scratch_dir("socket-locks");
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        gone.wait().unwrap();
        std::fs::write(dir.join(".s.PGSQL.5432.lock"), format!("{gone_pid}\n/x\n")).unwrap();
        std::fs::write(dir.join(".s.PGSQL.5432"), "").unwrap();
        let running = format!("{}\n/x\n", std::process::id());
        std::fs::write(dir.join(".s.PGSQL.5433.lock"), running).unwrap();
        std::fs::write(dir.join("postgresql.conf"), "").unwrap();
        assert_eq!(super::clear_stale_socket_locks(&dir).unwrap(), 1);
        assert!(!dir.join(".s.PGSQL.5432.lock").exists());
        assert!(!dir.join(".s.PGSQL.5432").exists());
        assert!(dir.join(".s.PGSQL.5433.lock").exists());
        assert!(dir.join("postgresql.conf").exists());
        assert_eq!(
            super::clear_stale_socket_locks(&dir.join("absent")).unwrap(),
            0
        );
    }

    use super::super::{DatabaseProfile, Local, Options};
    use crate::backup::{plan::parse_utc, Archiving, RestoreTo};

    fn at(base: PathBuf) -> Local {
        std::fs::write(base.join("s3-backup-key"), "GKid\nsecret\n").unwrap();
        Local {
            opts: Options {
                base,
                vfps_bin: PathBuf::from("vfps"),
                restart_backoff: Duration::from_secs(1),
                grace_period: Duration::from_secs(1),
                profile: DatabaseProfile::Safe,
                ui: false,
                ui_tests_dir: PathBuf::new(),
                backup: Some(Archiving::default()),
                sealed: true,
            },
        }
    }

    /// The Patroni configuration of a member that restores: the bootstrap
    /// method under `bootstrap:`, the archive settings under the local
    /// `postgresql.parameters`, no secret in it; read back as YAML by the
    /// Python Patroni itself runs on.
    #[test]
    fn a_restoring_members_configuration_names_the_backup_and_holds_no_secret() {
        if !is_root() {
            return; // the credentials are chowned to postgres
        }
        let local = at(vfps_testkit::scratch_dir("restore-config"));
        let bucket = local.backup_bucket_for("a", "vfps-local").unwrap();
        let to = RestoreTo::Time(parse_utc("2026-12-05T09:30:00Z").unwrap());
        let method = local
            .restore_bootstrap("a", &bucket, "20261205T085010", to)
            .unwrap();
        let yaml = super::super::database::patroni_config_for_tests(&local, "a", &method);
        assert!(yaml.contains("\n  method: vfps_restore\n  vfps_restore:\n    command: \"env AWS_SHARED_CREDENTIALS_FILE="), "{yaml}");
        assert!(
            yaml.contains("s3://vfps-backup/ vfps-local 20261205T085010 "),
            "{yaml}"
        );
        assert!(
            yaml.contains("      recovery_target_time: \"2026-12-05 09:30:00+00\"\n"),
            "{yaml}"
        );
        assert!(yaml.contains("\n    archive_mode: \"on\"\n"), "{yaml}");
        assert!(
            !yaml.contains("secret\n") && !yaml.contains("'secret'"),
            "{yaml}"
        );
        std::fs::write(local.opts.base.join("patroni.yml"), yaml).unwrap();
        let parsed = std::process::Command::new(super::super::patroni::patroni_tool("python3"))
            .args(["-c", "import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); \
                 b = d['bootstrap']; assert b['method'] == 'vfps_restore', b; \
                 assert b['vfps_restore']['no_params'] is True; \
                 assert 'barman-cloud-wal-restore' in b['vfps_restore']['recovery_conf']['restore_command']; \
                 assert d['postgresql']['parameters']['archive_timeout'] == '10s'"])
            .arg(local.opts.base.join("patroni.yml"))
            .output()
            .unwrap();
        assert!(
            parsed.status.success(),
            "{}",
            String::from_utf8_lossy(&parsed.stderr)
        );
    }

    fn is_root() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    }

    /// Only what a member logged after the marks counts, and both
    /// PostgreSQL's FATAL and Patroni's giving up end the wait.
    #[test]
    fn a_failed_restore_is_read_from_what_was_logged_since() {
        let dir = std::env::temp_dir().join(format!("vfps-restore-marks-{}", std::process::id()));
        let member = dir.join("db-a");
        std::fs::create_dir_all(member.join("log")).unwrap();
        let pg = member.join("log/postgresql.log");
        let patroni = member.join("patroni.log");
        std::fs::write(
            &pg,
            "FATAL:  recovery ended before configured recovery target was reached\n",
        )
        .unwrap();
        std::fs::write(&patroni, "").unwrap();
        let marks = vec![
            (pg.clone(), std::fs::metadata(&pg).unwrap().len()),
            (patroni.clone(), 0),
        ];
        assert_eq!(
            super::recovery_failed(&marks),
            None,
            "an earlier restore's failure"
        );
        std::fs::write(
            &patroni,
            "patroni.exceptions.PatroniFatalException: Failed to bootstrap cluster\n",
        )
        .unwrap();
        let why = super::recovery_failed(&marks).unwrap();
        assert!(why.starts_with("db-a: Patroni gave up"), "{why}");
        let mut text = std::fs::read_to_string(&pg).unwrap();
        text.push_str("2026 FATAL:  lock file \"x/.s.PGSQL.5432.lock\" already exists\n");
        std::fs::write(&pg, text).unwrap();
        let first = vec![(pg.clone(), marks[0].1)];
        assert!(super::recovery_failed(&first)
            .unwrap()
            .contains("lock file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
