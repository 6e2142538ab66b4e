//! Continuous backup of the local platform's database (docs/backup.md), on
//! with `--backup`: a bucket of its own on the object store (`vfps-backup`,
//! with a key allowed on it alone: vfps's replicas cannot reach it), every
//! Patroni member's PostgreSQL archiving WAL there through its own zone's
//! node, a base backup once the application database exists, and the
//! archiver's counters read from the primary (a failing `archive_command` is
//! reported, not a silent gap).

use std::path::PathBuf;

use anyhow::{bail, Context};

use super::{
    faults::zone_of,
    objects::{s3_url, REGION},
    Local, ZONES,
};
use crate::backup::{ArchiverStatus, Bucket};

/// The backup bucket: not the CSV jobs' one.
pub const BACKUP_BUCKET: &str = "vfps-backup";
/// The cluster's name inside the bucket (barman's server name).
pub const BACKUP_CLUSTER: &str = "vfps-local";

impl Local {
    fn backup_key_file(&self) -> PathBuf {
        self.opts.base.join("s3-backup-key")
    }

    fn backup_credentials_dir(&self, zone: &str) -> PathBuf {
        self.opts.base.join(format!("db-{zone}/backup"))
    }

    /// The bucket and its own key (run after the object store is up).
    pub(super) async fn create_backup_bucket(&self) -> anyhow::Result<()> {
        let z = ZONES[0];
        self.garage(z, &["bucket", "create", BACKUP_BUCKET]).await?;
        let key = self.garage(z, &["key", "create", "vfps-backup"]).await?;
        let field = |name: &str| {
            key.lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == name).then(|| v.trim().to_owned())
                })
                .with_context(|| format!("no {name:?} in Garage's answer"))
        };
        let (id, secret) = (field("Key ID")?, field("Secret key")?);
        self.garage(
            z,
            &[
                "bucket",
                "allow",
                "--read",
                "--write",
                "--owner",
                BACKUP_BUCKET,
                "--key",
                "vfps-backup",
            ],
        )
        .await?;
        std::fs::write(self.backup_key_file(), format!("{id}\n{secret}\n"))
            .context("cannot write the backup key")?;
        Ok(())
    }

    /// The bucket as seen from `zone` (its own object store node).
    pub fn backup_bucket(&self, zone: &str) -> anyhow::Result<Bucket> {
        let text = std::fs::read_to_string(self.backup_key_file())
            .context("the backup bucket's key (is the platform up with --backup?)")?;
        let mut lines = text.lines();
        let (Some(id), Some(secret)) = (lines.next(), lines.next()) else {
            bail!("{} is not a key", self.backup_key_file().display());
        };
        Ok(Bucket {
            endpoint: s3_url(zone),
            bucket: BACKUP_BUCKET.to_owned(),
            region: REGION.to_owned(),
            cluster: BACKUP_CLUSTER.to_owned(),
            access_key: id.to_owned(),
            secret_key: secret.to_owned(),
        })
    }

    /// The `postgresql.parameters` lines (YAML, indented for Patroni's
    /// local section) that archive a zone's WAL; empty without `--backup`.
    /// The credentials go into files only `postgres` reads.
    pub(super) fn archive_parameters(&self, zone: &str) -> anyhow::Result<String> {
        let Some(archiving) = self.opts.backup else {
            return Ok(String::new());
        };
        let bucket = self.backup_bucket_for(zone, &self.backup_cluster())?;
        let env = bucket.write_credentials(&self.backup_credentials_dir(zone), Some("postgres"))?;
        Ok(bucket
            .archive_settings(&env, archiving)
            .into_iter()
            .map(|(k, v)| {
                format!(
                    "    {k}: \"{}\"\n",
                    v.replace('\\', "\\\\").replace('"', "\\\"")
                )
            })
            .collect())
    }

    /// A base backup of the current leader; its id.
    pub async fn base_backup(&self) -> anyhow::Result<String> {
        let leader = self.leader().await?.context("no leader to back up")?;
        let zone = zone_of(&leader.name)?;
        let socket = self.opts.base.join(format!("db-{zone}"));
        self.backup_bucket_for(zone, &self.backup_cluster())?
            .base_backup(&socket.display().to_string(), 5432, "postgres")
            .await
    }

    /// The leader's archiver counters.
    pub async fn archiver(&self) -> anyhow::Result<ArchiverStatus> {
        let leader = self.leader().await?.context("no leader")?;
        let zone = zone_of(&leader.name)?;
        ArchiverStatus::parse(&self.query_instance(zone, ArchiverStatus::SQL).await?)
    }
}

/// What a restore of the local cluster did, for the operator and the drill.
#[derive(Debug, Clone)]
pub struct LocalRestore {
    pub backup_id: String,
    /// The last WAL segment the archive held without a gap.
    pub last_wal: String,
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

    /// Restores the database cluster in place from the bucket alone: every
    /// member and its storage destroyed, the DCS state removed, a fresh
    /// Patroni cluster bootstrapped from the base backup and the archived WAL
    /// (Patroni's custom bootstrap), the replicas cloned from it, the restore
    /// hold written (`vfps restore hold`), the vfps replicas (kept down from
    /// the start: none writes before the hold, and none keeps a cache of
    /// mappings the restored database lacks) started again, and a first
    /// base backup of the new history under a new cluster name.
    /// Refused before anything is destroyed if the bucket cannot restore.
    pub async fn restore(&self, to: crate::backup::RestoreTo) -> anyhow::Result<LocalRestore> {
        let old = self.backup_bucket_for(ZONES[0], &self.backup_cluster())?;
        let plan = old.plan(to).await?;
        let started = std::time::Instant::now();
        // No replica may write to the restored database before its hold is
        // written: a Create of an original the restore forgot would mint it
        // a second pseudonym. They stay down until then.
        for z in ZONES {
            self.keep_replica_down(z).await?;
        }
        for z in ZONES {
            // A member already dead is as good as killed.
            let _ = self.kill_db(z).await;
        }
        let destroyed = std::time::Instant::now();
        for z in ZONES {
            let data = self.opts.base.join(format!("db-{z}/data"));
            if data.exists() {
                std::fs::remove_dir_all(&data)
                    .with_context(|| format!("cannot remove {}", data.display()))?;
            }
        }
        crate::platform::net::cmd(
            "etcdctl",
            &[
                "--endpoints",
                super::ETCD,
                "del",
                "--prefix",
                "/service/vfps/",
            ],
        )
        .await
        .context("cannot remove the old cluster's state from etcd")?;
        let new_cluster = format!(
            "{BACKUP_CLUSTER}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default()
        );
        std::fs::write(self.cluster_name_file(), &new_cluster)?;
        for z in ZONES {
            let method = self.restore_bootstrap(z, &old, &plan.backup_id, to)?;
            self.write_patroni_config(z, &method).await?;
        }
        for z in ZONES {
            self.start_db(z).await?;
        }
        self.wait_db_healthy(std::time::Duration::from_secs(600))
            .await?;
        // The next restart is an ordinary one: no bootstrap method left.
        for z in ZONES {
            self.write_patroni_config(z, "").await?;
        }
        crate::backup::cli::hold(&self.opts.vfps_bin, to, &super::connection_string()).await?;
        for z in ZONES {
            self.uncordon_replica(z).await;
        }
        self.wait_replicas_ready(std::time::Duration::from_secs(60))
            .await?;
        let took = started.elapsed();
        self.base_backup().await?;
        Ok(LocalRestore {
            backup_id: plan.backup_id,
            last_wal: plan.last_wal,
            new_cluster,
            took,
            destroyed,
        })
    }

    fn backup_bucket_for(&self, zone: &str, cluster: &str) -> anyhow::Result<Bucket> {
        let mut b = self.backup_bucket(zone)?;
        cluster.clone_into(&mut b.cluster);
        Ok(b)
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

#[cfg(test)]
mod tests {
    use std::{path::PathBuf, time::Duration};

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
        let parsed = std::process::Command::new(super::super::database::patroni_tool("python3"))
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
}
