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
    objects::{s3_url, REGION},
    zone_of, Local, ZONES,
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

    pub(super) fn backup_credentials_dir(&self, zone: &str) -> PathBuf {
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
        super::write_secret(
            &self.backup_key_file(),
            format!("{id}\n{secret}\n").as_bytes(),
        )
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
    pub(super) fn archive_parameters(&self, zone: &str, cluster: &str) -> anyhow::Result<String> {
        let Some(archiving) = self.opts.backup else {
            return Ok(String::new());
        };
        let bucket = self.backup_bucket_for(zone, cluster)?;
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

impl Local {
    pub(super) fn backup_bucket_for(&self, zone: &str, cluster: &str) -> anyhow::Result<Bucket> {
        let mut b = self.backup_bucket(zone)?;
        cluster.clone_into(&mut b.cluster);
        Ok(b)
    }
}
