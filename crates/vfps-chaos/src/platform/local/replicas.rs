//! The vfps replicas: each runs in its pod under a supervisor (a shell loop, the
//! local ReplicaSet) that restarts it after a back-off, at once after a
//! requested restart, and not while its node is drained.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;

use super::{app_ip, connection_string, network::write_pid, Local, ZONES};
use crate::platform::net::{alive, cmd, http_get, kill, signal, stop_process, wait_for};

impl Local {
    /// A supervised replica per zone, then every replica ready.
    pub(super) async fn start_replicas(&self) -> anyhow::Result<()> {
        if self.opts.sealed && !self.keys_file().exists() {
            self.init_keys().await?;
        }
        for z in ZONES {
            self.supervise(z)?;
        }
        self.wait_replicas_ready(Duration::from_secs(60)).await
    }

    /// The key file the replicas seal originals under (`VFPS_KEYS`), when
    /// the topology seals them.
    pub fn keys_file(&self) -> PathBuf {
        self.opts.base.join("vfps.keys")
    }

    /// Writes the key file with `vfps keys init` (mode 0600, never over an
    /// existing one).
    async fn init_keys(&self) -> anyhow::Result<()> {
        let out = tokio::process::Command::new(&self.opts.vfps_bin)
            .args(["keys", "init"])
            .arg(self.keys_file())
            .stdin(std::process::Stdio::null())
            .output()
            .await?;
        if !out.status.success() {
            anyhow::bail!(
                "vfps keys init failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    fn app_dir(&self, zone: &str) -> PathBuf {
        self.opts.base.join(format!("app-{zone}"))
    }

    /// Starts the supervisor of a replica (the local ReplicaSet): a shell loop
    /// that restarts vfps after a back-off, at once after a requested restart,
    /// and not while the replica's node is drained (`paused` file).
    fn supervise(&self, zone: &str) -> anyhow::Result<()> {
        let key = self.s3_key()?;
        let dir = self.app_dir(zone);
        std::fs::create_dir_all(&dir)?;
        let script = format!(
            r#"while :; do
  if [ -e "{dir}/paused" ]; then sleep 0.2; continue; fi
  echo start >> "{dir}/starts"
  ip netns exec vfps-app-{zone} "{bin}" serve --listen-address 0.0.0.0 >> "{log}" 2>&1
  if [ -e "{dir}/restart-now" ]; then rm -f "{dir}/restart-now"; else sleep {backoff}; fi
done"#,
            dir = dir.display(),
            bin = self.opts.vfps_bin.display(),
            log = self.opts.base.join(format!("vfps-{zone}.log")).display(),
            backoff = self.opts.restart_backoff.as_secs_f64(),
        );
        let mut command = tokio::process::Command::new("sh");
        let keys = self.keys_file();
        if keys.exists() {
            command.env("VFPS_KEYS", format!("file:{}", keys.display()));
        }
        if self.opts.ui {
            // The web UI: signed in at the local identity provider, one
            // session key for every replica, and the probe's user allowed
            // everything.
            let role = super::front::UI_ROLE;
            command
                .env("Authorization__Authority", super::front::issuer())
                .env("Authorization__RequireHttpsMetadata", "false")
                .env("Authorization__ClientId", super::front::CLIENT_ID)
                .env("Authorization__ClientSecret", super::front::CLIENT_SECRET)
                .env("Authorization__AdminRoles__0", role)
                .env("Authorization__NamespaceRules__0__Namespace", "*")
                .env("Authorization__NamespaceRules__0__ReadRoles__0", role)
                .env("Authorization__NamespaceRules__0__WriteRoles__0", role)
                .env(
                    "Authorization__NamespaceRules__0__ReverseLookupRoles__0",
                    role,
                )
                .env("VFPS_UI_SESSION_KEY", self.ui_session_key()?);
        }
        let child = command
            .args(["-c", &script])
            .env("ConnectionStrings__PostgreSQL", connection_string())
            .env("VFPS_SHUTDOWN_PRE_STOP_DELAY", "1s")
            .env(
                "VFPS_SHUTDOWN_TIMEOUT",
                format!(
                    "{}s",
                    self.opts.grace_period.as_secs().saturating_sub(2).max(1)
                ),
            )
            .env("Pseudonymization__Caching__Namespaces__IsEnabled", "true")
            // CSV jobs: on the object store, through this zone's node; each
            // replica naming itself as the harness names it, and a lease
            // short enough that a takeover fits a scenario.
            .env("S3__IsEnabled", "true")
            .env("S3__ServiceUrl", super::objects::s3_url(zone))
            .env("S3__AccessKey", &key.id)
            .env("S3__SecretKey", &key.secret)
            .env("S3__Bucket", super::objects::BUCKET)
            .env("S3__Region", super::objects::REGION)
            .env("S3__ForcePathStyle", "true")
            .env("VFPS_INSTANCE_NAME", format!("vfps-app-{zone}"))
            .env("CsvProcessing__LeaseDuration", "4s")
            .env("CsvProcessing__CheckpointInterval", "2s")
            // As production should run: every call needs a token (the load's
            // comes from `up`, see `create_tokens`).
            .env("Authorization__IsEnabled", "true")
            .env("VFPS_LOG_JSON", "true")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        write_pid(
            &format!("supervisor-{zone}"),
            child.id().unwrap_or_default(),
        )?;
        Ok(())
    }

    /// The running vfps process of a replica (the only process in its pod).
    pub async fn replica_pid(&self, zone: &str) -> Option<u32> {
        let out = cmd("ip", &["netns", "pids", &format!("vfps-app-{zone}")])
            .await
            .ok()?;
        out.split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .find(|p| {
                alive(*p)
                    && std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "vfps")
            })
    }

    /// How many times the supervisor has started the replica.
    pub async fn replica_starts(&self, zone: &str) -> u32 {
        std::fs::read_to_string(self.app_dir(zone).join("starts"))
            .map_or(0, |s| s.lines().count() as u32)
    }

    /// Whether the replica answers HTTP at all (ready or not).
    pub async fn replica_answers(&self, zone: &str) -> bool {
        http_get(
            &format!("{}:8080", app_ip(zone)),
            "/readyz",
            Duration::from_millis(800),
        )
        .await
        .is_ok()
    }

    /// SIGSTOPs the replica's process; returns once every thread of it has
    /// stopped, so what the pause's proof sees is the stopped process.
    pub async fn freeze_replica(&self, zone: &str) -> anyhow::Result<u32> {
        let pid = self
            .replica_pid(zone)
            .await
            .with_context(|| format!("replica {zone} is not running"))?;
        stop_process(pid, Duration::from_secs(5))
            .await
            .with_context(|| format!("pausing replica {zone}"))?;
        Ok(pid)
    }

    /// SIGCONTs the replica's process.
    pub async fn thaw_replica(&self, zone: &str) -> anyhow::Result<u32> {
        let pid = self
            .replica_pid(zone)
            .await
            .with_context(|| format!("replica {zone} is not running"))?;
        signal(pid, "CONT").await?;
        Ok(pid)
    }

    pub async fn replica_ready(&self, zone: &str) -> bool {
        http_get(
            &format!("{}:8080", app_ip(zone)),
            "/readyz",
            Duration::from_millis(800),
        )
        .await
        .is_ok_and(|(s, _)| s == 200)
    }

    pub async fn wait_replicas_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_for("3 ready replicas", timeout, || async {
            for z in ZONES {
                if !self.replica_ready(z).await {
                    return false;
                }
            }
            true
        })
        .await
    }

    /// SIGKILLs a replica; the supervisor restarts it after its back-off.
    pub async fn kill_replica(&self, zone: &str) -> anyhow::Result<u32> {
        let pid = self
            .replica_pid(zone)
            .await
            .with_context(|| format!("replica {zone} is not running"))?;
        kill(pid).await?;
        wait_for(
            &format!("replica {zone} to die"),
            Duration::from_secs(5),
            || async { !alive(pid) },
        )
        .await?;
        Ok(pid)
    }

    /// Graceful stop: SIGTERM, wait for exit within the grace period, else SIGKILL.
    /// With `keep_down` the supervisor leaves it stopped; otherwise it restarts at once.
    pub async fn stop_replica(&self, zone: &str, keep_down: bool) -> anyhow::Result<()> {
        let pid = self
            .replica_pid(zone)
            .await
            .with_context(|| format!("replica {zone} is not running"))?;
        let flag = if keep_down { "paused" } else { "restart-now" };
        std::fs::write(self.app_dir(zone).join(flag), "")?;
        signal(pid, "TERM").await?;
        if wait_for("graceful exit", self.opts.grace_period, || async {
            !alive(pid)
        })
        .await
        .is_err()
        {
            tracing::warn!(
                zone,
                "replica did not exit within the grace period; killing it"
            );
            kill(pid).await?;
        }
        Ok(())
    }

    /// Stops the replica and keeps it down, whether it runs now or waits in
    /// its supervisor's back-off (then it is not started again).
    pub async fn keep_replica_down(&self, zone: &str) -> anyhow::Result<()> {
        std::fs::write(self.app_dir(zone).join("paused"), "")?;
        match self.replica_pid(zone).await {
            Some(_) => self.stop_replica(zone, true).await,
            None => Ok(()),
        }
    }

    /// Lets the supervisor start the replica again after a drain.
    pub async fn uncordon_replica(&self, zone: &str) {
        let _ = std::fs::remove_file(self.app_dir(zone).join("paused"));
    }
}
