//! The gray faults on Kubernetes: one-shot Chaos Mesh objects rendered from the
//! assets (`db-primary-isolation`, `db-standby-kill`, `vfps-partition`,
//! `db-network-delay`, `vfps-runner-kill`), each applied and proven injected (`AllInjected`), and
//! removed and proven gone; and the behavioural probes — WAL positions and TCP
//! connects run inside the database pods (`kubectl exec`; the vfps image has no
//! shell, so a probe between a replica and an instance runs from the instance:
//! a handshake needs both directions, so a cut either way times it out).

use std::time::Duration;

use anyhow::{bail, Context};

use super::{
    assets::{chaos_duration, millis, render_asset, OneShot, DB_PODS, STANDBY_PODS},
    cluster::pods_of,
    Kube, Runner, DEPLOYMENT, NAMESPACE,
};
use crate::{
    nemesis::{Connect, Instance, Victim, WalPosition},
    platform::net::wait_every,
};

pub(crate) const ISOLATION: OneShot = OneShot {
    asset: "chaos/db-primary-isolation.yaml",
    kind: "networkchaos",
    name: "db-primary-isolation",
};
pub(crate) const STANDBY_KILL: OneShot = OneShot {
    asset: "chaos/db-standby-kill.yaml",
    kind: "podchaos",
    name: "db-standby-kill",
};
pub(crate) const REPLICA_CUT: OneShot = OneShot {
    asset: "chaos/vfps-partition.yaml",
    kind: "networkchaos",
    name: "vfps-partition",
};
pub(crate) const DELAY: OneShot = OneShot {
    asset: "chaos/db-network-delay.yaml",
    kind: "networkchaos",
    name: "db-network-delay",
};
/// The vfps pod holding a running CSV job's lease (`vfps-job-runner-kill`).
pub(crate) const REPLICA_KILL: OneShot = OneShot {
    asset: "chaos/vfps-runner-kill.yaml",
    kind: "podchaos",
    name: "vfps-runner-kill",
};
pub(crate) const ONE_SHOTS: [OneShot; 5] =
    [ISOLATION, STANDBY_KILL, REPLICA_CUT, DELAY, REPLICA_KILL];

/// How long Chaos Mesh may take to kill a pod it was given by name.
pub(crate) const KILL_TIMEOUT: Duration = Duration::from_secs(60);

/// Values that fill every placeholder of the one-shot assets, for deleting
/// them (a delete needs only the kind and the name).
fn any_values() -> Vec<(&'static str, String)> {
    vec![
        ("DURATION", "30s".into()),
        ("STANDBY", "none".into()),
        ("REPLICA", "none".into()),
        ("LATENCY", "1ms".into()),
        ("JITTER", "0ms".into()),
        ("POD", "none".into()),
    ]
}

/// Timed database round trips per measurement; the fastest counts, so one
/// slow `kubectl exec` does not pass for the delay.
const ROUND_TRIP_SAMPLES: usize = 3;

/// How long the heal may take to show in the round trips (Chaos Mesh removes
/// the netem when its finalizer runs, before the object is gone).
const DELAY_HEAL_TIMEOUT: Duration = Duration::from_secs(60);

/// What the delay's proof measured before the delay.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DelayProof {
    /// The database round trip from a vfps pod before the delay.
    pub before: Duration,
    /// The least a delayed round trip adds: one packet's delay less its jitter.
    pub least: Duration,
}

impl DelayProof {
    /// Whether a round trip carries the delay.
    pub fn delayed(&self, round_trip: Duration) -> bool {
        round_trip >= self.before + self.least
    }
}

/// The standbys the primary streams to and counts in the `ANY 1` quorum, as
/// the primary itself reports them. CloudNativePG names each standby's
/// walreceiver after its pod (`application_name` in its `primary_conninfo`)
/// and connects it as `streaming_replica`.
pub(crate) const QUORUM_STANDBYS_SQL: &str =
    "SELECT application_name FROM pg_catalog.pg_stat_replication \
     WHERE usename = 'streaming_replica' AND state = 'streaming' AND sync_state = 'quorum' \
     ORDER BY application_name";

/// The names `psql -At` printed, one a line.
pub fn names_of(out: &str) -> Vec<String> {
    out.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// What `bash -c` prints for a connect: `connected`, or `exit <status>`.
pub fn connect_outcome(out: &str) -> anyhow::Result<Connect> {
    match out.trim() {
        "connected" => Ok(Connect::Connected),
        "exit 124" => Ok(Connect::TimedOut),
        "exit 1" => Ok(Connect::Refused),
        other => bail!("unexpected TCP probe output {other:?}"),
    }
}

/// `t|1234` (standby, received) or `f|5678` (primary, written) from psql.
pub fn wal_line(name: &str, out: &str) -> Option<WalPosition> {
    let (recovery, lsn) = out.trim().split_once('|')?;
    Some(WalPosition {
        name: name.to_owned(),
        lsn: lsn.trim().parse().ok()?,
        primary: recovery.trim() == "f",
    })
}

impl<R: Runner> Kube<R> {
    /// Applies a one-shot rendered with `vars` and waits until Chaos Mesh
    /// reports it injected.
    pub(crate) async fn inject(&self, o: OneShot, vars: &[(&str, String)]) -> anyhow::Result<()> {
        let manifest = render_asset(&self.asset(o.asset)?, vars)?;
        self.delete(&manifest).await?;
        self.apply(&manifest).await?;
        if o.kind == "podchaos" {
            return Ok(());
        }
        wait_every(
            &format!("Chaos Mesh to report {} injected (AllInjected)", o.name),
            Duration::from_secs(60),
            self.poll,
            || self.chaos_condition(o.kind, o.name, "AllInjected"),
        )
        .await
    }

    /// Deletes a one-shot and waits until it is gone (Chaos Mesh's finalizer
    /// recovers it first).
    pub(crate) async fn remove(&self, o: OneShot) -> anyhow::Result<()> {
        let manifest = render_asset(&self.asset(o.asset)?, &any_values())?;
        self.delete(&manifest).await?;
        self.wait_gone(o.kind, o.name).await
    }

    /// Waits until a chaos object is gone (its finalizer recovered the fault).
    pub(crate) async fn wait_gone(&self, kind: &str, name: &str) -> anyhow::Result<()> {
        wait_every(
            &format!("{name} to be recovered and gone"),
            Duration::from_secs(120),
            self.poll,
            || async {
                self.kubectl(&[
                    "get",
                    kind,
                    name,
                    "-n",
                    NAMESPACE,
                    "--ignore-not-found",
                    "-o",
                    "name",
                ])
                .await
                .is_ok_and(|out| out.trim().is_empty())
            },
        )
        .await
    }

    /// A database round trip as vfps makes it, timed from here: `vfps migrate
    /// --check` inside a vfps pod connects through the `-rw` Service (the path
    /// of every call; TCP, TLS, authentication and a query are several round
    /// trips) and reads the schema version. The fastest of a few.
    pub(crate) async fn db_round_trip(&self) -> anyhow::Result<Duration> {
        let deployment = format!("deployment/{DEPLOYMENT}");
        let mut fastest = Duration::MAX;
        for _ in 0..ROUND_TRIP_SAMPLES {
            let started = std::time::Instant::now();
            self.kubectl(&[
                "exec",
                "-n",
                NAMESPACE,
                &deployment,
                "-c",
                "vfps",
                "--",
                "vfps",
                "migrate",
                "--check",
            ])
            .await
            .context("a database round trip from a vfps pod (vfps migrate --check)")?;
            fastest = fastest.min(started.elapsed());
        }
        Ok(fastest)
    }

    /// Injects the delay and proves by behaviour that vfps's database traffic
    /// carries it: Chaos Mesh reports a NetworkChaos injected even when its
    /// filter matches no packet.
    pub(crate) async fn delay_proven(
        &self,
        delay: Duration,
        jitter: Duration,
        hold: Duration,
    ) -> anyhow::Result<()> {
        let proof = DelayProof {
            before: self.db_round_trip().await?,
            least: delay.saturating_sub(jitter),
        };
        *self.delay_proof.lock().await = Some(proof);
        self.inject(
            DELAY,
            &[
                ("LATENCY", millis(delay)),
                ("JITTER", millis(jitter)),
                ("DURATION", chaos_duration(hold)),
            ],
        )
        .await?;
        let during = self.db_round_trip().await?;
        if !proof.delayed(during) {
            bail!(
                "the delay did not reach vfps's database traffic: Chaos Mesh reports it injected, \
                 but a round trip from a vfps pod took {during:?} ({:?} before; a delayed one takes at least {:?} more)",
                proof.before,
                proof.least
            );
        }
        eprintln!(
            "db-network-delay: a database round trip from a vfps pod took {during:?}, {:?} before",
            proof.before
        );
        Ok(())
    }

    /// Removes the delay and proves it gone: round trips back below the delayed ones.
    pub(crate) async fn delay_removed(&self) -> anyhow::Result<()> {
        self.remove(DELAY).await?;
        let Some(proof) = self.delay_proof.lock().await.take() else {
            // Nothing was measured, so nothing was injected.
            return Ok(());
        };
        wait_every(
            "vfps's database round trips to lose the delay",
            DELAY_HEAL_TIMEOUT,
            self.poll,
            || async { self.db_round_trip().await.is_ok_and(|t| !proof.delayed(t)) },
        )
        .await
    }

    /// Kills the vfps pod `replica` with the one-shot PodChaos; returns once
    /// that incarnation is gone or terminating, the spent object removed
    /// either way. The Deployment re-creates the pod.
    pub(crate) async fn kill_vfps_pod(&self, replica: &str) -> anyhow::Result<Victim> {
        let killed = self
            .kill_pod(REPLICA_KILL, "vfps pod", replica, || self.vfps_pods())
            .await;
        let removed = self.remove(REPLICA_KILL).await;
        let pod = killed?;
        removed?;
        Ok(Victim {
            name: format!("pod {} on {}", pod.name, pod.node),
            incarnation: pod.uid,
        })
    }

    /// Applies the one-shot pod kill `o` naming `name`, one of `pods()`;
    /// returns that pod once its incarnation is gone or terminating (Chaos
    /// Mesh reports no injection for a pod kill).
    pub(crate) async fn kill_pod<P, Fut>(
        &self,
        o: OneShot,
        what: &str,
        name: &str,
        pods: P,
    ) -> anyhow::Result<super::Pod>
    where
        P: Fn() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<Vec<super::Pod>>>,
    {
        let victim = pods()
            .await?
            .into_iter()
            .find(|p| p.name == name && !p.terminating)
            .with_context(|| format!("no {what} {name}"))?;
        self.inject(o, &[("POD", name.to_owned())]).await?;
        wait_every(
            &format!("{what} {name} killed"),
            self.heal_timeout.min(KILL_TIMEOUT),
            self.poll,
            || async {
                pods()
                    .await
                    .is_ok_and(|now| !now.iter().any(|p| p.uid == victim.uid && !p.terminating))
            },
        )
        .await?;
        Ok(victim)
    }

    /// The standbys (pods labelled replica, not terminating), sorted by name.
    pub(crate) async fn standbys(&self) -> anyhow::Result<Vec<super::Pod>> {
        let mut pods = pods_of(
            &self
                .get_json(&["pods", "-n", NAMESPACE, "-l", STANDBY_PODS])
                .await?,
        );
        pods.retain(|p| !p.terminating);
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(pods)
    }

    pub(crate) async fn pod_ip(&self, pod: &str) -> anyhow::Result<String> {
        let p = self.get_json(&["pod", pod, "-n", NAMESPACE]).await?;
        p["status"]["podIP"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .with_context(|| format!("pod {pod} has no IP"))
    }

    /// A TCP connect from inside database pod `from` to `addr:port`.
    pub(crate) async fn connect_from_db(
        &self,
        from: &str,
        addr: &str,
        port: u16,
    ) -> anyhow::Result<Connect> {
        let script = format!(
            "timeout 1.5 bash -c 'exec 3<>/dev/tcp/{addr}/{port}' && echo connected || echo \"exit $?\""
        );
        let out = self
            .kubectl(&[
                "exec", "-n", NAMESPACE, from, "-c", "postgres", "--", "bash", "-c", &script,
            ])
            .await?;
        connect_outcome(&out)
    }

    /// `psql` as the superuser inside a database pod (the `postgres`
    /// container's environment points it at the local socket; CloudNativePG's
    /// `pg_ident` maps the container's user to `postgres`).
    pub(crate) async fn psql(&self, pod: &str, sql: &str) -> anyhow::Result<String> {
        self.kubectl(&[
            "exec", "-n", NAMESPACE, pod, "-c", "postgres", "--", "psql", "-U", "postgres", "-At",
            "-c", sql,
        ])
        .await
    }

    /// The first standby, by name, that the primary streams to and counts in
    /// the quorum: one that confirms commits now, not merely a Ready pod.
    pub(crate) async fn quorum_standby(&self) -> anyhow::Result<Option<Instance>> {
        let Some(primary) = self.primary_pod().await? else {
            return Ok(None);
        };
        let streaming = names_of(&self.psql(&primary.name, QUORUM_STANDBYS_SQL).await?);
        let mut standbys = self.standbys().await?;
        standbys.retain(|p| streaming.contains(&p.name));
        Ok(standbys.into_iter().next().map(Kube::<R>::instance_of))
    }

    /// WAL positions of every database pod that answers.
    pub(crate) async fn db_wal_positions(&self) -> anyhow::Result<Vec<WalPosition>> {
        let pods = pods_of(
            &self
                .get_json(&["pods", "-n", NAMESPACE, "-l", DB_PODS])
                .await?,
        );
        let sql = "SELECT pg_is_in_recovery(), CASE WHEN pg_is_in_recovery() \
                   THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END - '0/0'";
        let mut out = Vec::new();
        for p in pods.iter().filter(|p| !p.terminating) {
            let answer = self.psql(&p.name, sql).await;
            if let Some(w) = answer.ok().and_then(|a| wal_line(&p.name, &a)) {
                out.push(w);
            }
        }
        Ok(out)
    }

    pub(crate) fn instance_of(p: super::Pod) -> Instance {
        Instance {
            name: p.name,
            incarnation: p.uid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_and_psql_outputs_are_read_strictly() {
        assert_eq!(connect_outcome("connected\n").unwrap(), Connect::Connected);
        assert_eq!(connect_outcome("exit 124").unwrap(), Connect::TimedOut);
        assert_eq!(connect_outcome("exit 1").unwrap(), Connect::Refused);
        assert!(connect_outcome("").is_err());
        let w = wal_line("vfps-db-2", "t|4096\n").unwrap();
        assert_eq!((w.lsn, w.primary), (4096, false));
        assert!(wal_line("x", "f|8192").unwrap().primary);
        assert!(wal_line("x", "garbage").is_none());
        assert_eq!(
            names_of("vfps-db-2\n\nvfps-db-3\n"),
            ["vfps-db-2", "vfps-db-3"]
        );
        assert!(names_of("").is_empty());
    }
}
