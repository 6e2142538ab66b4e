//! P11's search on the local platform (`checker::at_rest`): every database
//! instance dumped (`pg_dump`) and its data directory read, the backup
//! bucket's and the CSV jobs' objects fetched (decompressed where gzip'd),
//! PostgreSQL's, Patroni's and vfps's logs read — all searched for the
//! run's originals by `search_at_rest.py`. The dumps are written under the
//! base directory (0700, its owner's) and removed after.

use std::path::PathBuf;

use anyhow::Context;
use serde_json::json;

use super::{backups::BACKUP_BUCKET, objects, Local, ZONES};
use crate::checker::at_rest::{Place, RestClass, Search};

#[derive(serde::Deserialize)]
struct Said {
    places: Vec<SaidPlace>,
    notes: Vec<String>,
}

#[derive(serde::Deserialize)]
struct SaidPlace {
    class: RestClass,
    place: String,
    bytes: u64,
    objects: u64,
    found: Vec<String>,
}

impl Local {
    /// Every byte at rest searched for `originals`.
    pub async fn search_at_rest(&self, originals: &[String]) -> anyhow::Result<Search> {
        let dumps = self.opts.base.join("at-rest");
        std::fs::create_dir_all(&dumps)?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dumps, std::fs::Permissions::from_mode(0o700))?;
        }
        let mut notes = Vec::new();
        let mut files = Vec::new();
        for z in ZONES {
            let dump = dumps.join(format!("db-{z}.sql"));
            match self.dump(z).await {
                Ok(bytes) => {
                    std::fs::write(&dump, bytes)?;
                    files.push(
                        json!({"class": RestClass::Dump, "place": format!("db-{z} dump"),
                                      "paths": [dump]}),
                    );
                }
                Err(e) => notes.push(format!("db-{z} dump: {e:#}")),
            }
            let db = self.opts.base.join(format!("db-{z}"));
            files.push(
                json!({"class": RestClass::DataDirectory, "place": format!("db-{z} data"),
                              "paths": [db.join("data")]}),
            );
            files.push(
                json!({"class": RestClass::Log, "place": format!("db-{z} logs"),
                              "paths": [db.join("log"), db.join("patroni.log")]}),
            );
            files.push(
                json!({"class": RestClass::Log, "place": format!("vfps-{z} log"),
                              "paths": [self.opts.base.join(format!("vfps-{z}.log"))]}),
            );
        }
        let mut buckets = Vec::new();
        let endpoint = objects::s3_url(ZONES[0]);
        if let Ok(key) = self.s3_key() {
            buckets.push(
                json!({"class": RestClass::JobObject, "place": "jobs bucket",
                                "endpoint": endpoint, "bucket": objects::BUCKET,
                                "key_id": key.id, "secret": key.secret, "region": objects::REGION}),
            );
        }
        if let Ok(text) = std::fs::read_to_string(self.opts.base.join("s3-backup-key")) {
            let mut lines = text.lines();
            if let (Some(id), Some(secret)) = (lines.next(), lines.next()) {
                buckets.push(json!({"class": RestClass::Backup, "place": "backup bucket",
                                    "endpoint": endpoint, "bucket": BACKUP_BUCKET,
                                    "key_id": id, "secret": secret, "region": objects::REGION}));
            }
        }
        let input = json!({"originals": originals, "files": files, "buckets": buckets});
        let said = run_search(&input).await;
        let _ = std::fs::remove_dir_all(&dumps);
        let said = said?;
        notes.extend(said.notes);
        Ok(Search {
            originals: originals.len(),
            places: said
                .places
                .into_iter()
                .map(|p| Place {
                    class: p.class,
                    place: p.place,
                    bytes: p.bytes,
                    objects: p.objects,
                    found: p.found.iter().map(|o| crate::redact(o)).collect(),
                })
                .collect(),
            notes,
        })
    }

    /// `pg_dump` of the vfps database on `zone`'s instance (a standby
    /// dumps too).
    async fn dump(&self, zone: &str) -> anyhow::Result<Vec<u8>> {
        let socket = self.opts.base.join(format!("db-{zone}"));
        let out = self
            .as_postgres("timeout")
            .arg("120")
            .arg(super::patroni::pg_bindir().join("pg_dump"))
            .arg("-h")
            .arg(socket)
            .args(["-U", "postgres", "-d", "vfps"])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .context("cannot run pg_dump")?;
        if !out.status.success() {
            anyhow::bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(out.stdout)
    }
}

/// `search_at_rest.py` with `input` on its stdin.
async fn run_search(input: &serde_json::Value) -> anyhow::Result<Said> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("/usr/bin/python3")
        .args(["-c", include_str!("search_at_rest.py")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("cannot run the search's Python")?;
    let mut stdin = child.stdin.take().context("no stdin")?;
    stdin.write_all(input.to_string().as_bytes()).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        anyhow::bail!(
            "the search failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("the search's answer is not JSON")
}

/// The originals of a run directory: the ledger's and the MII side's
/// (answers, multi creates).
pub fn originals_of(dir: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let mut out: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let ledger: PathBuf = dir.join("ledger.jsonl");
    if ledger.exists() {
        for e in crate::history::load_ledger(&ledger)?.entries {
            out.insert(e.original);
        }
    }
    if let Some(h) = crate::checker::erasure::read_history(dir)? {
        out.extend(h.answers.into_iter().map(|a| a.original));
        if let Some(m) = h.multi {
            out.extend(m.creates.into_iter().map(|c| c.original));
        }
    }
    Ok(out.into_iter().collect())
}
