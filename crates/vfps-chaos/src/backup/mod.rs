//! Continuous backup of PostgreSQL to an S3 bucket with the Barman cloud tools
//! (`barman-cloud-*`, the family CloudNativePG runs on the kind path), and a
//! point-in-time restore from the bucket alone (docs/backup.md).
//!
//! # Layout
//! - [`plan`]: pure — which base backup a target needs and whether the WAL
//!   archive after it is whole; the refusals.
//! - [`restore`]: a fresh data directory from the bucket, started and
//!   recovered to the target.
//! - [`cli`]: `vfps-chaos backup plan|base-backup|restore`.
//! - here: the bucket, its credentials as files PostgreSQL's
//!   `archive_command` reads, the settings that archive WAL, a base backup,
//!   the bucket's catalog, and the archiver's own counters.

use std::{path::Path, time::Duration};

use anyhow::{bail, Context};
use serde::Deserialize;

pub mod cli;
pub mod plan;
pub mod restore;

pub use plan::{Catalog, Plan, Refusal, RestoreTo};

/// Newest archived segments searched for the last commit: `archive_timeout`
/// closes segments with little in them, so the last commit is in the newest
/// few.
const LAST_COMMIT_SEGMENTS: usize = 8;

/// Where one cluster's backups go: a bucket of its own, and the cluster's
/// name (barman's "server name", the prefix of its objects).
#[derive(Clone)]
pub struct Bucket {
    /// The S3 endpoint (path-style addressing), e.g. `http://10.213.0.31:3900`.
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    /// Names the cluster inside the bucket; a restore refuses any other.
    pub cluster: String,
    pub access_key: String,
    /// Never logged; written only to files readable by their owner.
    pub secret_key: String,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

/// How WAL is archived.
#[derive(Debug, Clone, Copy)]
pub struct Archiving {
    /// `archive_timeout`: the longest a committed transaction waits in an
    /// unfinished segment before the segment is switched and archived —
    /// the RPO bound in seconds when writes are rare.
    pub timeout: Duration,
}

impl Default for Archiving {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
        }
    }
}

impl Bucket {
    /// `s3://bucket/`, as the tools take it.
    fn url(&self) -> String {
        format!("s3://{}/", self.bucket)
    }

    /// The environment a tool run by this process gets.
    fn env(&self) -> [(&'static str, &str); 4] {
        [
            ("AWS_ACCESS_KEY_ID", self.access_key.as_str()),
            ("AWS_SECRET_ACCESS_KEY", self.secret_key.as_str()),
            ("AWS_DEFAULT_REGION", self.region.as_str()),
            // barman lists times in the local zone; the plan reads UTC.
            ("TZ", "UTC"),
        ]
    }

    /// Writes the credentials and region as AWS shared files into `dir`
    /// (readable by `owner` only), for commands PostgreSQL runs itself.
    /// Returns the prefix such a command starts with.
    pub fn write_credentials(&self, dir: &Path, owner: Option<&str>) -> anyhow::Result<String> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let credentials = dir.join("s3-credentials");
        let config = dir.join("s3-config");
        write_private(
            &credentials,
            &format!(
                "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
                self.access_key, self.secret_key
            ),
        )?;
        write_private(&config, &format!("[default]\nregion = {}\n", self.region))?;
        if let Some(owner) = owner {
            for f in [&credentials, &config] {
                let status = std::process::Command::new("chown")
                    .arg(owner)
                    .arg(f)
                    .status()
                    .context("cannot run chown")?;
                if !status.success() {
                    bail!("chown {owner} {} failed", f.display());
                }
            }
        }
        Ok(format!(
            "AWS_SHARED_CREDENTIALS_FILE='{}' AWS_CONFIG_FILE='{}'",
            credentials.display(),
            config.display()
        ))
    }

    /// The PostgreSQL settings that archive every WAL segment to the bucket.
    /// `env` is what [`Bucket::write_credentials`] returned. Compressed: a
    /// segment `archive_timeout` closes early is 16 MiB of mostly zeroes, and
    /// a platform run closes hundreds of them.
    pub fn archive_settings(&self, env: &str, archiving: Archiving) -> Vec<(&'static str, String)> {
        vec![
            ("archive_mode", "on".to_owned()),
            (
                "archive_command",
                format!(
                    "{env} barman-cloud-wal-archive --gzip --endpoint-url {} {} {} %p",
                    self.endpoint,
                    self.url(),
                    self.cluster
                ),
            ),
            (
                "archive_timeout",
                format!("{}s", archiving.timeout.as_secs().max(1)),
            ),
        ]
    }

    /// The `restore_command` that fetches archived WAL during recovery.
    pub fn restore_command(&self, env: &str) -> String {
        format!(
            "{env} barman-cloud-wal-restore --endpoint-url {} {} {} %f %p",
            self.endpoint,
            self.url(),
            self.cluster
        )
    }

    /// Takes a base backup of the server at `host`:`port` (a socket
    /// directory or an address) as `user`; must run where the server's data
    /// directory is readable. Returns the new backup's id.
    pub async fn base_backup(&self, host: &str, port: u16, user: &str) -> anyhow::Result<String> {
        let before: Vec<String> = self
            .backups()
            .await?
            .into_iter()
            .map(|b| b.backup_id)
            .collect();
        self.tool(
            "barman-cloud-backup",
            &[
                // At once, not after a spread checkpoint (95 s measured on
                // the local platform).
                "--immediate-checkpoint",
                "-h",
                host,
                "-p",
                &port.to_string(),
                "-U",
                user,
                &self.url(),
                &self.cluster,
            ],
        )
        .await?;
        self.backups()
            .await?
            .into_iter()
            .find(|b| b.status == "DONE" && !before.contains(&b.backup_id))
            .map(|b| b.backup_id)
            .context("barman-cloud-backup succeeded, but no new completed backup is listed")
    }

    /// Deletes the base backups (and the WAL only they need) that
    /// `retention` no longer keeps (`barman-cloud-backup-delete`).
    pub async fn prune(&self, retention: Retention) -> anyhow::Result<()> {
        self.tool(
            "barman-cloud-backup-delete",
            &["-r", &retention.policy(), &self.url(), &self.cluster],
        )
        .await
        .map(|_| ())
    }

    /// The cluster's base backups.
    pub async fn backups(&self) -> anyhow::Result<Vec<plan::Backup>> {
        #[derive(Deserialize)]
        struct Listing {
            backups_list: Vec<plan::Backup>,
        }
        let out = self
            .tool(
                "barman-cloud-backup-list",
                &["--format", "json", &self.url(), &self.cluster],
            )
            .await?;
        Ok(serde_json::from_str::<Listing>(&out)
            .context("barman-cloud-backup-list printed no backup list")?
            .backups_list)
    }

    /// Runs `list_bucket.py` with `extra` arguments; its answer, or the
    /// bucket's refusal ([`Refusal::Bucket`]) or error, named.
    async fn bucket_script<T: serde::de::DeserializeOwned>(
        &self,
        extra: &[&str],
    ) -> anyhow::Result<T> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Said<T> {
            Refusal { refusal: String },
            Error { error: String },
            Answer(T),
        }
        let mut args = vec![
            "-c",
            include_str!("list_bucket.py"),
            &self.endpoint,
            &self.bucket,
            &self.cluster,
        ];
        args.extend_from_slice(extra);
        let out = self.run("/usr/bin/python3", &args).await?;
        match serde_json::from_str::<Said<T>>(&out).context("the bucket's answer is not JSON")? {
            Said::Refusal { refusal } => Err(Refusal::Bucket { what: refusal }.into()),
            Said::Error { error } => bail!("{error}"),
            Said::Answer(t) => Ok(t),
        }
    }

    /// What the bucket holds: clusters, this cluster's backups, WAL names
    /// and the cluster it was restored from.
    pub async fn catalog(&self) -> anyhow::Result<Catalog> {
        #[derive(Deserialize)]
        struct Listing {
            clusters: Vec<String>,
            wals: Vec<String>,
            parent: Option<String>,
        }
        let listing: Listing = self.bucket_script(&[]).await?;
        let backups = if listing.clusters.contains(&self.cluster) {
            self.backups().await?
        } else {
            Vec::new()
        };
        Ok(Catalog {
            clusters: listing.clusters,
            backups,
            wals: listing.wals,
            parent: listing.parent,
        })
    }

    /// Records that this cluster was restored from `parent`, so that
    /// `parent`'s history stays reachable through it.
    pub async fn chain_to(&self, parent: &str) -> anyhow::Result<()> {
        #[derive(Deserialize)]
        struct Chained {
            #[allow(dead_code)]
            chained: String,
        }
        let _: Chained = self.bucket_script(&["--set-parent", parent]).await?;
        Ok(())
    }

    /// The plan for `to`, or why there is none. A target before this
    /// cluster's first base backup is looked for in the cluster a restore
    /// made it from, and so on back: every archived point stays reachable.
    pub async fn plan(&self, to: RestoreTo) -> anyhow::Result<Plan> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut chain: Vec<String> = Vec::new();
        let mut at = self.clone();
        loop {
            chain.push(at.cluster.clone());
            let catalog = at.catalog().await?;
            let last_commit = match to {
                RestoreTo::Time(_) => at.last_commit(&catalog).await?,
                _ => None,
            };
            let reach = plan::Reach { last_commit, now };
            match plan::plan(&at.bucket, &at.cluster, &catalog, to, reach) {
                Ok(p) => return Ok(Plan { chain, ..p }),
                Err(Refusal::TargetBeforeFirstBackup { .. })
                    if catalog.parent.as_ref().is_some_and(|p| !chain.contains(p)) =>
                {
                    at.cluster = catalog.parent.clone().unwrap_or_default();
                }
                Err(refusal) => return Err(refusal.into()),
            }
        }
    }

    /// The newest commit the archive holds: `pg_waldump` of its newest
    /// segments (fetched one by one, newest first, until one holds a
    /// commit).
    async fn last_commit(&self, catalog: &Catalog) -> anyhow::Result<Option<i64>> {
        let dir = std::env::temp_dir().join(format!(
            "vfps-chaos-last-commit-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir)?;
        let result = async {
            for segment in plan::newest_segments(catalog, LAST_COMMIT_SEGMENTS) {
                let file = dir.join(&segment);
                let path = file.display().to_string();
                self.tool(
                    "barman-cloud-wal-restore",
                    &[&self.url(), &self.cluster, &segment, &path],
                )
                .await
                .with_context(|| {
                    format!("cannot fetch WAL segment {segment} to find the last commit")
                })?;
                let out = tokio::process::Command::new(restore::pg_bindir().join("pg_waldump"))
                    .args(["--rmgr=Transaction", &path])
                    .env("TZ", "UTC")
                    .stdin(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .output()
                    .await
                    .context("cannot run pg_waldump")?;
                // It ends with an error at the segment's end: its output is read whatever the status.
                if let Some(t) = plan::last_commit_in(&String::from_utf8_lossy(&out.stdout)) {
                    return Ok(Some(t));
                }
                let _ = std::fs::remove_file(&file);
            }
            Ok(None)
        }
        .await;
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    async fn tool(&self, tool: &str, args: &[&str]) -> anyhow::Result<String> {
        let mut all = vec!["--endpoint-url", self.endpoint.as_str()];
        all.extend_from_slice(args);
        self.run(tool, &all).await
    }

    async fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = tokio::process::Command::new(program)
            .args(args)
            .envs(self.env())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| {
                format!("cannot run {program} (scripts/install-deps.sh installs barman-cli-cloud)")
            })?;
        if !out.status.success() {
            bail!(
                "{program} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// How long backups are kept: a recovery window (CloudNativePG's form, `30d`,
/// `4w`, `3m`: every instant of it stays restorable) or a number of base
/// backups (`3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    Window { count: u32, unit: WindowUnit },
    Backups(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowUnit {
    Days,
    Weeks,
    Months,
}

impl Retention {
    /// Barman's retention policy text.
    fn policy(self) -> String {
        match self {
            Self::Backups(n) => format!("REDUNDANCY {n}"),
            Self::Window { count, unit } => format!(
                "RECOVERY WINDOW OF {count} {}",
                match unit {
                    WindowUnit::Days => "DAYS",
                    WindowUnit::Weeks => "WEEKS",
                    WindowUnit::Months => "MONTHS",
                }
            ),
        }
    }
}

impl std::str::FromStr for Retention {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("retention {s:?} is neither a window such as 30d, 4w, 3m nor a number of base backups such as 3")
        };
        let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
        let count: u32 = digits.parse().map_err(|_| bad())?;
        if count == 0 {
            return Err(bad());
        }
        let unit = match unit {
            "" => return Ok(Self::Backups(count)),
            "d" => WindowUnit::Days,
            "w" => WindowUnit::Weeks,
            "m" => WindowUnit::Months,
            _ => return Err(bad()),
        };
        Ok(Self::Window { count, unit })
    }
}

/// The archiver's counters (`pg_stat_archiver`): a failing `archive_command`
/// is a growing `failed_count`, not a silent gap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchiverStatus {
    pub archived_count: u64,
    pub failed_count: u64,
    pub last_archived_wal: Option<String>,
    pub last_failed_wal: Option<String>,
}

impl ArchiverStatus {
    /// The query whose one `|`-separated row [`ArchiverStatus::parse`] reads
    /// (`psql -A -t`).
    pub const SQL: &'static str =
        "SELECT archived_count, failed_count, coalesce(last_archived_wal, ''), \
         coalesce(last_failed_wal, '') FROM pg_stat_archiver";

    pub fn parse(row: &str) -> anyhow::Result<Self> {
        let f: Vec<&str> = row.trim().split('|').collect();
        let [archived, failed, last_archived, last_failed] = f.as_slice() else {
            bail!("pg_stat_archiver row {row:?} does not have 4 fields");
        };
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Ok(Self {
            archived_count: archived
                .parse()
                .with_context(|| format!("archived_count {archived:?}"))?,
            failed_count: failed
                .parse()
                .with_context(|| format!("failed_count {failed:?}"))?,
            last_archived_wal: some(last_archived),
            last_failed_wal: some(last_failed),
        })
    }

    /// Whether archiving is failing now: the last failure is later than the
    /// last success (segment names order by position).
    pub fn failing(&self) -> bool {
        match (&self.last_failed_wal, &self.last_archived_wal) {
            (Some(f), Some(a)) => f > a,
            (Some(_), None) => true,
            _ => false,
        }
    }
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archivers_row_is_read_and_a_failure_after_the_last_success_is_failing() {
        let ok = ArchiverStatus::parse("7|0|000000010000000000000006|\n").unwrap();
        assert_eq!(ok.archived_count, 7);
        assert!(!ok.failing());
        let failing =
            ArchiverStatus::parse("7|3|000000010000000000000006|000000010000000000000007").unwrap();
        assert!(failing.failing());
        let recovered =
            ArchiverStatus::parse("8|3|000000010000000000000008|000000010000000000000007").unwrap();
        assert!(!recovered.failing());
        assert!(ArchiverStatus::parse("7|x|a|b")
            .unwrap_err()
            .to_string()
            .contains("\"x\""));
    }

    #[test]
    fn retention_takes_cloudnativepgs_windows_or_a_count_and_names_a_bad_one() {
        assert_eq!(
            "30d".parse::<Retention>().unwrap().policy(),
            "RECOVERY WINDOW OF 30 DAYS"
        );
        assert_eq!(
            "4w".parse::<Retention>().unwrap().policy(),
            "RECOVERY WINDOW OF 4 WEEKS"
        );
        assert_eq!("3".parse::<Retention>().unwrap().policy(), "REDUNDANCY 3");
        for bad in ["", "0d", "7days", "d", "-1"] {
            let e = bad.parse::<Retention>().unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn the_secret_never_shows_in_debug() {
        let b = Bucket {
            endpoint: "http://127.0.0.1:1".into(),
            bucket: "b".into(),
            region: "garage".into(),
            cluster: "vfps".into(),
            access_key: "GK1".into(),
            secret_key: "very-secret".into(),
        };
        assert!(!format!("{b:?}").contains("very-secret"));
        let cmd = b.archive_settings("ENV=1", Archiving::default());
        assert_eq!(cmd[2].1, "10s");
        assert!(!cmd[1].1.contains("very-secret"));
    }
}
