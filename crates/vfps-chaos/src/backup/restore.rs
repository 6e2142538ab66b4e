//! A fresh PostgreSQL instance from the bucket alone: the plan's base backup
//! copied into an empty data directory, recovery to the target from the WAL
//! archive, promotion. The restored instance archives nothing: it is a new
//! cluster, and archiving it into the old cluster's prefix would mix two
//! histories (docs/backup.md says how to archive it under a new name).

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context};

use super::{plan::format_utc, Bucket, Plan, RestoreTo};

/// Where the restored instance lives and how it is started.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Must not exist or be empty: a restore never overwrites data.
    pub data_dir: PathBuf,
    /// The Unix socket directory (also its `-h` for clients).
    pub socket_dir: PathBuf,
    pub port: u16,
    /// `listen_addresses`; empty for sockets only.
    pub listen: String,
    /// PostgreSQL's binaries (`pg_ctl`, `psql`).
    pub bindir: PathBuf,
    /// The user PostgreSQL runs as (it refuses root); `None` runs as this
    /// process's user.
    pub run_as: Option<String>,
    /// The longest recovery may take before the restore gives up.
    pub recovery_timeout: Duration,
}

/// What a restore did.
#[derive(Debug, Clone)]
pub struct Restored {
    pub plan: Plan,
    /// From the first copied byte to a promoted, writable instance.
    pub took: Duration,
}

/// Restores `instance` from `bucket` to `to`; returns once it is promoted.
/// `credentials_dir` receives the S3 credentials its `restore_command` reads.
pub async fn restore(
    bucket: &Bucket,
    to: RestoreTo,
    instance: &Instance,
    credentials_dir: &Path,
) -> anyhow::Result<Restored> {
    let data = &instance.data_dir;
    if std::fs::read_dir(data).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "{} is not empty: a restore only fills a fresh data directory",
            data.display()
        );
    }
    // Every path the instance's user needs, before anything is copied: a
    // data directory it cannot reach failed late with a bare "Permission
    // denied".
    if let Some(user) = &instance.run_as {
        use crate::platform::run_as::{check, Access, Need};
        let need = |path: &Path, setting: &'static str| Need {
            path: path.to_owned(),
            access: Access::Reach,
            elsewhere: setting,
        };
        check(
            user,
            &[
                need(data, "choose a --data-dir the instance's user can reach"),
                need(
                    &instance.socket_dir,
                    "choose a --socket-dir the instance's user can reach",
                ),
                need(
                    credentials_dir,
                    "choose a --credentials-dir the instance's user can reach",
                ),
            ],
        )
        .await?;
    }
    let plan = bucket.plan(to).await?;
    // The cluster whose history holds the target (an earlier one of the
    // chain, perhaps).
    let bucket = &Bucket {
        cluster: plan.cluster.clone(),
        ..bucket.clone()
    };
    let started = Instant::now();
    let data_text = data.display().to_string();
    bucket
        .tool(
            "barman-cloud-restore",
            &[&bucket.url(), &bucket.cluster, &plan.backup_id, &data_text],
        )
        .await
        .context("copying the base backup")?;
    let env = bucket.write_credentials(credentials_dir, instance.run_as.as_deref())?;
    let mut settings = vec![
        format!("port = {}", instance.port),
        format!("listen_addresses = '{}'", instance.listen),
        format!(
            "unix_socket_directories = '{}'",
            instance.socket_dir.display()
        ),
        // The source's paths (a Patroni member's log and configuration
        // files) are not this instance's.
        format!("hba_file = '{}'", data.join("pg_hba.conf").display()),
        format!("ident_file = '{}'", data.join("pg_ident.conf").display()),
        "logging_collector = off".to_owned(),
        // The source's synchronous standbys are not this instance's: a commit
        // would wait for them for ever (measured: `vfps restore hold` hung on
        // a restored Patroni member). Replicas brought back later set it anew.
        "synchronous_standby_names = ''".to_owned(),
        "archive_mode = off".to_owned(),
        format!(
            "restore_command = '{}'",
            bucket.restore_command(&env).replace('\'', "''")
        ),
        "recovery_target_timeline = 'latest'".to_owned(),
    ];
    if to == RestoreTo::BackupOnly {
        settings.push("recovery_target = 'immediate'".to_owned());
        settings.push("recovery_target_action = 'promote'".to_owned());
    }
    if let RestoreTo::Time(t) = to {
        // PostgreSQL's own form: it refuses ISO 8601's `T…Z`.
        let iso = format_utc(t);
        let pg_time = format!("{}+00", iso.trim_end_matches('Z').replacen('T', " ", 1));
        settings.push(format!("recovery_target_time = '{pg_time}'"));
        settings.push("recovery_target_action = 'promote'".to_owned());
    }
    append(&data.join("postgresql.auto.conf"), &settings.join("\n"))?;
    std::fs::write(data.join("recovery.signal"), "").context("cannot write recovery.signal")?;
    if let Some(user) = &instance.run_as {
        run("chown", &["-R", &format!("{user}:{user}"), &data_text]).await?;
    }
    run("chmod", &["700", &data_text]).await?;
    // Inside the data directory (PostgreSQL's own `log/`), which the
    // instance's user owns: docs/backup.md names it.
    let log_dir = data.join("log");
    std::fs::create_dir_all(&log_dir)
        .with_context(|| format!("cannot create {}", log_dir.display()))?;
    if let Some(user) = &instance.run_as {
        run(
            "chown",
            &[&format!("{user}:{user}"), &log_dir.display().to_string()],
        )
        .await?;
    }
    let log = log_dir.join("restore.log");
    let log_text = log.display().to_string();
    instance
        .as_owner(
            "pg_ctl",
            &[
                "-D", &data_text, "-l", &log_text, "-w", "-t", "600", "start",
            ],
        )
        .await
        .with_context(|| format!("the restored instance did not start: {}", tail(&log)))?;
    let deadline = Instant::now() + instance.recovery_timeout;
    loop {
        match instance.psql("SELECT pg_is_in_recovery()").await {
            Ok(r) if r.trim() == "f" => break,
            Ok(_) => {}
            Err(e) if Instant::now() >= deadline => {
                bail!(
                    "the restored instance stopped answering: {e:#}; {}",
                    tail(&log)
                )
            }
            // PostgreSQL gave up (the target not reached, a segment that
            // cannot be had): waiting will not bring it back.
            Err(_) if !postmaster_alive(data) => {
                bail!("PostgreSQL stopped during recovery: {}", tail(&log))
            }
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            bail!(
                "recovery did not finish within {:?}: {}",
                instance.recovery_timeout,
                tail(&log)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(Restored {
        plan,
        took: started.elapsed(),
    })
}

impl Instance {
    async fn as_owner(&self, tool: &str, args: &[&str]) -> anyhow::Result<String> {
        let bin = self.bindir.join(tool).display().to_string();
        match &self.run_as {
            Some(user) => {
                let mut c = crate::platform::run_as::command(user, Path::new("/"), &bin);
                c.args(args);
                run_command(c, &format!("{tool} {}", args.join(" "))).await
            }
            None => run(&bin, args).await,
        }
    }

    /// One query as `postgres` over the socket; its unaligned rows.
    pub async fn psql(&self, sql: &str) -> anyhow::Result<String> {
        self.psql_in("postgres", sql).await
    }

    /// One query in `database` as `postgres` over the socket.
    pub async fn psql_in(&self, database: &str, sql: &str) -> anyhow::Result<String> {
        let socket = self.socket_dir.display().to_string();
        let port = self.port.to_string();
        self.as_owner(
            "psql",
            &[
                "-X", "-A", "-t", "-h", &socket, "-p", &port, "-U", "postgres", "-d", database,
                "-c", sql,
            ],
        )
        .await
    }
}

async fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut c = tokio::process::Command::new(program);
    c.args(args);
    run_command(c, &format!("{program} {}", args.join(" "))).await
}

/// Runs `c` to its end (killed if the future is dropped); its stdout, or a
/// failure naming `what` with everything it printed.
async fn run_command(mut c: tokio::process::Command, what: &str) -> anyhow::Result<String> {
    let out = c
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("cannot run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The newest PostgreSQL's binaries under `/usr/lib/postgresql` (Debian's
/// layout), else version 15's.
pub fn pg_bindir() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|es| {
            es.flatten()
                .map(|e| e.path().join("bin"))
                .filter(|p| p.join("pg_ctl").exists())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"))
}

fn append(path: &Path, lines: &str) -> anyhow::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| writeln!(f, "\n# vfps-chaos backup restore\n{lines}"))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The last lines of the instance's log, for an error.
/// Whether the postmaster of `data` is running (its `postmaster.pid`'s
/// process exists).
fn postmaster_alive(data: &Path) -> bool {
    std::fs::read_to_string(data.join("postmaster.pid"))
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<u32>().ok()))
        .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!(
        "its log ({}) ends:\n{}",
        log.display(),
        lines[lines.len().saturating_sub(8)..].join("\n")
    )
}
