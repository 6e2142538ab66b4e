//! Behavioural proofs on the local platform: a TCP connect from inside a pod
//! (a cut address times out, a healed one answers), and the database's WAL
//! positions read over its Unix socket (which no network fault can cut).

use std::time::Duration;

use anyhow::{bail, Context};

use super::{patroni::pg_bindir, Local};
pub use crate::nemesis::Connect;

/// How long one connect may take before it counts as timed out.
const CONNECT_TIMEOUT: &str = "1.5";

/// A TCP connect from inside network namespace `ns` to `addr:port`.
pub async fn connect_from(ns: &str, addr: &str, port: u16) -> anyhow::Result<Connect> {
    let out = tokio::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "timeout",
            CONNECT_TIMEOUT,
            "bash",
            "-c",
        ])
        .arg(format!("exec 3<>/dev/tcp/{addr}/{port}"))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("cannot run a TCP probe (ip netns exec … bash)")?;
    Ok(match out.status.code() {
        Some(0) => Connect::Connected,
        // timeout(1): the command timed out.
        Some(124) => Connect::TimedOut,
        Some(1) => Connect::Refused,
        other => bail!(
            "TCP probe from {ns} to {addr}:{port} failed ({other:?}): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}

impl Local {
    /// A single value from an instance, over its Unix socket, bounded in time
    /// (a paused instance never answers).
    pub async fn query_instance(&self, zone: &str, sql: &str) -> anyhow::Result<String> {
        self.query_database(zone, "postgres", sql).await
    }

    /// [`Local::query_instance`] in another database of the instance.
    pub async fn query_database(
        &self,
        zone: &str,
        database: &str,
        sql: &str,
    ) -> anyhow::Result<String> {
        Ok(self
            .psql(zone, database, sql, Duration::from_secs(3))
            .await?
            .trim()
            .to_owned())
    }

    /// What `sql` returns (unaligned, tuples only) from `database` on the
    /// instance of `zone`, as `postgres` over its Unix socket, within
    /// `within`. A failure says psql's first line of complaint, never the
    /// query (queries name pseudonyms).
    pub async fn psql(
        &self,
        zone: &str,
        database: &str,
        sql: &str,
        within: Duration,
    ) -> anyhow::Result<String> {
        let socket = self.opts.base.join(format!("db-{zone}"));
        let out = self
            .as_postgres("timeout")
            .arg(within.as_secs().max(1).to_string())
            .arg(pg_bindir().join("psql"))
            .args(["-X", "-q", "-A", "-t", "-h"])
            .arg(socket)
            .args(["-U", "postgres", "-d", database, "-c", sql])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .context("cannot run psql")?;
        if !out.status.success() {
            bail!(
                "db-{zone}: psql failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// WAL a standby has received, in bytes from the start of WAL (`None` when
    /// the instance is not in recovery or has received nothing).
    pub async fn received_lsn(&self, zone: &str) -> anyhow::Result<Option<u64>> {
        let v = self
            .query_instance(
                zone,
                "SELECT CASE WHEN pg_is_in_recovery() THEN (pg_last_wal_receive_lsn() - '0/0')::bigint END",
            )
            .await?;
        Ok(v.parse().ok())
    }

    /// WAL the primary has written (bytes), or `None` on a standby.
    pub async fn written_lsn(&self, zone: &str) -> anyhow::Result<Option<u64>> {
        let v = self
            .query_instance(
                zone,
                "SELECT CASE WHEN NOT pg_is_in_recovery() THEN (pg_current_wal_lsn() - '0/0')::bigint END",
            )
            .await?;
        Ok(v.parse().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root (a namespace of its own); runs with the platform tests.
    #[tokio::test]
    #[ignore = "needs root: creates a network namespace"]
    async fn a_dropped_address_times_out_and_a_closed_port_is_refused() {
        let ns = "vfps-probe-test";
        let sh = |c: &str| {
            std::process::Command::new("sh")
                .args(["-c", c])
                .status()
                .unwrap()
        };
        sh(&format!(
            "ip netns del {ns} 2>/dev/null; ip netns add {ns} && ip -n {ns} link set lo up"
        ));
        // Nothing listens on 127.0.0.1:9 in the fresh namespace: refused.
        assert_eq!(
            connect_from(ns, "127.0.0.1", 9).await.unwrap(),
            Connect::Refused
        );
        sh(&format!(
            "ip netns exec {ns} nft 'table inet t {{ chain output {{ type filter hook output priority 0; policy accept; ip daddr 127.0.0.1 tcp dport 9 drop; }}; }}'"
        ));
        assert_eq!(
            connect_from(ns, "127.0.0.1", 9).await.unwrap(),
            Connect::TimedOut
        );
        sh(&format!("ip netns del {ns}"));
    }
}
