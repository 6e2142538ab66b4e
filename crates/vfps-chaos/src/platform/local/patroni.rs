//! The database's control plane and its members' programs: etcd (Patroni's
//! DCS), each member's Patroni configuration, the pinned Patroni's launcher
//! and tools, and PostgreSQL's binaries.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;

use super::{db_ip, network::write_pid, DatabaseProfile, ETCD};
use crate::platform::net::{http_get, wait_for};

pub(super) fn patroni_config(
    base: &Path,
    zone: &str,
    profile: DatabaseProfile,
    archive: &str,
    bootstrap_method: &str,
) -> String {
    let dir = base.join(format!("db-{zone}"));
    let ip = db_ip(zone);
    // The only difference between the profiles: whether a commit waits for a
    // standby.
    let synchronous = match profile {
        DatabaseProfile::Safe => "true",
        DatabaseProfile::UnsafeAsync => "false",
    };
    format!(
        r#"scope: vfps
name: db-{zone}
restapi:
  listen: {ip}:8008
  connect_address: {ip}:8008
etcd3:
  hosts: {ETCD}
bootstrap:
  dcs:
    ttl: 5
    loop_wait: 1
    retry_timeout: 2
    # A standby may be promoted however far it is behind the WAL the primary
    # reported: in synchronous mode the standby holds every acknowledged
    # commit, and what it lacks is WAL nobody was told is committed. At
    # Patroni's 1 MiB default, the WAL a CSV job's batches write on an
    # isolated primary (while they wait for the standby) kept any failover
    # from happening.
    maximum_lag_on_failover: 134217728
    synchronous_mode: {synchronous}
    synchronous_mode_strict: {synchronous}
    # Both standbys synchronous (`FIRST 2`; one while the other is away), so
    # either may be promoted and the leader race takes the one that received
    # most. With one named standby (`FIRST 1`) the other could hold WAL the
    # promoted one never received: it needed pg_rewind (6 s more of commits
    # waiting) and, until then, its feedback reported a flush position from
    # the old timeline that released commits of the new timeline it did not
    # have (docs/chaos.md, "A diverged standby acknowledges commits").
    synchronous_node_count: 2
    # A standby joins the synchronous set only once within 16 MiB of the
    # other: commits then wait for it a fraction of a second, not for a
    # rejoining instance's whole catch-up.
    maximum_lag_on_syncnode: 16777216
    # Never promote an instance whose timeline is behind the cluster's: a
    # diverged instance's feedback can get it named synchronous standby.
    check_timeline: true
    postgresql:
      use_pg_rewind: true
      use_slots: false
      parameters:
        # Without slots, keep enough WAL for a rewound or lagging standby to
        # catch up by streaming.
        wal_keep_size: 512MB
        wal_retrieve_retry_interval: 500ms
        shared_buffers: 32MB
        max_connections: 200
        wal_log_hints: 'on'
        # A killed primary replays the WAL since its last checkpoint (a
        # standby's, its last restartpoint) before it can serve or be
        # promoted. At the 5 min default that was 167 MB after a CSV job's
        # writes, 39 s of single-user crash recovery that left a double
        # failover's only candidate unable to take over in time; 30 s (the
        # least PostgreSQL allows) bounds the redo to a few seconds here.
        checkpoint_timeout: 30s
  initdb:
    - encoding: UTF8
    - locale: C
    - auth: md5
{bootstrap_method}postgresql:
  listen: {ip}:5432
  connect_address: {ip}:5432
  data_dir: {dir}/data
  bin_dir: {bindir}
  pgpass: {dir}/pgpass
  authentication:
    superuser: {{username: postgres, password: local-superuser}}
    replication: {{username: replicator, password: local-replicator}}
    rewind: {{username: rewinder, password: local-rewinder}}
  # A replica re-created from the leader (when a rewind cannot bring it back)
  # asks for an immediate checkpoint: the default, spread one took 28 s here,
  # most of a failover scenario's wait for a healthy cluster.
  basebackup:
    - checkpoint: 'fast'
  parameters:
    unix_socket_directories: '{dir}'
    logging_collector: 'on'
    log_directory: '{dir}/log'
    log_filename: 'postgresql.log'
    # The failover breakdown reads these times beside Patroni's (UTC too).
    log_timezone: 'UTC'
{archive}  pg_hba:
    - local all all trust
    - host replication replicator 10.213.0.0/24 md5
    - host all all 10.213.0.0/24 md5
"#,
        dir = dir.display(),
        bindir = pg_bindir().display(),
    )
}

/// The program each member runs: the pinned Patroni, started from
/// [`LAUNCHER`] by the installation's Python.
pub(crate) fn patroni_launcher(base: &Path) -> PathBuf {
    base.join(LAUNCHER_FILE)
}

/// The launcher's file name: a process running it is Patroni (the harness's
/// CPU accounting knows it by this name).
pub const LAUNCHER_FILE: &str = "patroni-launcher.py";

/// Patroni with PostgreSQL's parameter list read once per process. Patroni
/// 3.0.4 reads it (`postgres --describe-config`, a process each time) for
/// every parameter whenever it writes `postgresql.conf`, ~31 processes; the
/// winner of a leader race writes it before it promotes and the other
/// standby when it follows the new leader. Under load that was 1.2-2.0 s of
/// an isolation's failover; Patroni 3.2.1 and later read it once, as this
/// does (they also refuse a leader TTL under 20 s).
const LAUNCHER: &str = r#"# Written by vfps-chaos: Patroni, with PostgreSQL's parameter list read
# once per process (Patroni 3.0.4 runs `postgres --describe-config` for
# every parameter each time it writes postgresql.conf).
import sys

from patroni.postgresql import Postgresql

if not hasattr(Postgresql, "_get_gucs"):
    sys.exit("patroni-launcher: this Patroni has no Postgresql._get_gucs to read once")


def _available_gucs(self):
    gucs = self.__dict__.get("_launcher_gucs")
    if gucs is None:
        gucs = self.__dict__["_launcher_gucs"] = self._get_gucs()
    return gucs


Postgresql.available_gucs = property(_available_gucs)

if __name__ == "__main__":
    from patroni.__main__ import main

    sys.exit(main())
"#;

/// Writes [`patroni_launcher`] (readable by `postgres`).
pub(super) fn write_patroni_launcher(base: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let launcher = patroni_launcher(base);
    std::fs::write(&launcher, LAUNCHER)?;
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o644))?;
    Ok(())
}

/// A Patroni tool (`patroni`, `patronictl`) from the pinned installation
/// `scripts/install-deps.sh` makes: `$VFPS_PATRONI_DIR/bin`, by default
/// `/opt/vfps-chaos/patroni/bin`. Not the distribution's Patroni: Debian's 3.0.2
/// can split the brain after a paused leader resumes (docs/chaos.md).
pub(crate) fn patroni_tool(tool: &str) -> PathBuf {
    let dir = std::env::var_os("VFPS_PATRONI_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/vfps-chaos/patroni"));
    dir.join("bin").join(tool)
}

pub(super) fn pg_bindir() -> PathBuf {
    crate::backup::restore::pg_bindir()
}

/// Starts etcd in the control plane and waits until it is healthy.
pub(super) async fn start_etcd(base: &Path) -> anyhow::Result<()> {
    let etcd_log = std::fs::File::create(base.join("etcd.log"))?;
    let etcd = tokio::process::Command::new("etcd")
        .args([
            "--name",
            "cp",
            "--data-dir",
            &base.join("etcd").display().to_string(),
        ])
        .args([
            "--listen-client-urls",
            &format!("http://{ETCD}"),
            "--advertise-client-urls",
            &format!("http://{ETCD}"),
        ])
        // Peers on the bridge address too: an etcd the distribution may have
        // started on localhost keeps its ports.
        .args([
            "--listen-peer-urls",
            "http://10.213.0.1:2380",
            "--initial-advertise-peer-urls",
            "http://10.213.0.1:2380",
        ])
        .args([
            "--initial-cluster",
            "cp=http://10.213.0.1:2380",
            "--heartbeat-interval",
            "100",
            "--election-timeout",
            "1000",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(etcd_log.try_clone()?)
        .stderr(etcd_log)
        .spawn()
        .context("cannot start etcd (apt-get install etcd-server)")?;
    write_pid("etcd", etcd.id().unwrap_or_default())?;
    wait_for("etcd", Duration::from_secs(20), || async {
        http_get(ETCD, "/health", Duration::from_secs(1))
            .await
            .is_ok_and(|(s, b)| s == 200 && b.contains("true"))
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list is read once per member process, however often Patroni
    /// asks: the launcher run by the pinned Patroni's Python, its
    /// `_get_gucs` counted.
    #[test]
    fn the_launcher_reads_the_parameter_list_once() {
        let dir = vfps_testkit::scratch_dir("patroni-launcher");
        write_patroni_launcher(&dir).unwrap();
        let check = format!(
            "import runpy, sys\n\
             runpy.run_path({path:?})\n\
             from patroni.postgresql import Postgresql\n\
             pg = Postgresql.__new__(Postgresql)\n\
             calls = []\n\
             pg._get_gucs = lambda: calls.append(1) or {{'max_connections'}}\n\
             seen = [pg.available_gucs for _ in range(31)]\n\
             assert all(s == {{'max_connections'}} for s in seen), seen\n\
             print(len(calls))\n",
            path = patroni_launcher(&dir).display().to_string()
        );
        let out = std::process::Command::new(patroni_tool("python3"))
            .args(["-c", &check])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    }

    #[test]
    fn patroni_runs_postgres_from_the_bin_dir() {
        let base = Path::new("/tmp/vfps-chaos-test-base");
        let yaml = patroni_config(base, "a", DatabaseProfile::Safe, "", "");
        assert!(
            yaml.contains(&format!("\n  bin_dir: {}\n", pg_bindir().display())),
            "{yaml}"
        );
        assert!(!yaml.contains("bin_name"), "{yaml}");
    }
}
