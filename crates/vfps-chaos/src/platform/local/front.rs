//! The front door of the local topology, for the web UI: the identity
//! provider users sign in at (oidc-provider, an OpenID Certified
//! implementation, run by node from `tests/ui`), and a real load balancer
//! (HAProxy) before the three replicas' HTTP ports, health-checked on
//! `/readyz` as the ingress is on Kubernetes. Both run in the root namespace
//! on the bridge address; the browser probe reaches the UI only through the
//! balancer, which spreads its requests over the replicas (round robin, no
//! stickiness), so every step also proves that any replica takes the session.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;

use super::{app_ip, network::write_pid, Local, CONTROL_PLANE, ZONES};
use crate::platform::net::{http_get, wait_for};

/// The balancer's address: the UI as users reach it.
pub const INGRESS_PORT: u16 = 8088;
/// The identity provider's port.
pub const IDP_PORT: u16 = 8089;
/// The UI's confidential client at the provider.
pub const CLIENT_ID: &str = "vfps-ui";
pub const CLIENT_SECRET: &str = "vfps-local-ui-client-secret";
/// The role the probe's user has: admin, and every permission everywhere.
pub const UI_ROLE: &str = "vfps-admin";

pub fn ingress_url() -> String {
    format!("http://{CONTROL_PLANE}:{INGRESS_PORT}")
}

pub fn issuer() -> String {
    format!("http://{CONTROL_PLANE}:{IDP_PORT}")
}

/// HAProxy's configuration: health checks every second on `/readyz` (a
/// replica leaves after two failures and returns after one success), a
/// request whose connection failed is tried on another replica, nothing sticky.
pub fn haproxy_config() -> String {
    let servers: String = ZONES
        .iter()
        .map(|z| format!("  server {z} {}:8080 check\n", app_ip(z)))
        .collect();
    format!(
        "global\n  maxconn 2000\n\
         defaults\n  mode http\n  timeout connect 1s\n  timeout client 60s\n  timeout server 30s\n  \
         retries 2\n  option redispatch\n  option forwardfor\n\
         frontend ui\n  bind {CONTROL_PLANE}:{INGRESS_PORT}\n  default_backend vfps\n\
         backend vfps\n  balance roundrobin\n  option httpchk GET /readyz\n  \
         http-check expect status 200\n  default-server inter 1s fall 2 rise 1\n{servers}"
    )
}

impl Local {
    /// The secret sealing UI sessions, the same for every replica: made by
    /// `up`, read by every later step.
    pub(super) fn ui_session_key(&self) -> anyhow::Result<String> {
        let file = self.opts.base.join("ui-session-key");
        if let Ok(k) = std::fs::read_to_string(&file) {
            return Ok(k.trim().to_owned());
        }
        let key = hex::encode(rand::random::<[u8; 32]>());
        std::fs::write(&file, &key).with_context(|| format!("cannot write {}", file.display()))?;
        Ok(key)
    }

    /// The provider and the balancer, each healthy.
    pub(super) async fn start_front(&self) -> anyhow::Result<()> {
        let base = &self.opts.base;
        let tests = &self.opts.ui_tests_dir;
        let log = std::fs::File::create(base.join("identity-provider.log"))?;
        let provider = tokio::process::Command::new("node")
            .arg(tests.join("provider.mjs"))
            .env("PROVIDER_HOST", CONTROL_PLANE)
            .env("PROVIDER_PORT", IDP_PORT.to_string())
            .env("VFPS_BASE_URL", ingress_url())
            .env("CLIENT_ID", CLIENT_ID)
            .env("CLIENT_SECRET", CLIENT_SECRET)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context(
                "cannot start the identity provider (node; scripts/install-ui-test-deps.sh)",
            )?;
        write_pid("identity-provider", provider.id().unwrap_or_default())?;
        let idp = format!("{CONTROL_PLANE}:{IDP_PORT}");
        wait_for("the identity provider", Duration::from_secs(30), || async {
            http_get(
                &idp,
                "/.well-known/openid-configuration",
                Duration::from_secs(1),
            )
            .await
            .is_ok_and(|(s, _)| s == 200)
        })
        .await?;

        let config: PathBuf = base.join("haproxy.cfg");
        std::fs::write(&config, haproxy_config())?;
        let log = std::fs::File::create(base.join("haproxy.log"))?;
        let haproxy = tokio::process::Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&config)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start HAProxy (apt-get install haproxy)")?;
        write_pid("haproxy", haproxy.id().unwrap_or_default())?;
        Ok(())
    }

    /// Whether the balancer serves the UI (some replica ready behind it).
    pub(super) async fn wait_ingress(&self, timeout: Duration) -> anyhow::Result<()> {
        let ingress = format!("{CONTROL_PLANE}:{INGRESS_PORT}");
        wait_for("the load balancer to serve /readyz", timeout, || async {
            http_get(&ingress, "/readyz", Duration::from_secs(1))
                .await
                .is_ok_and(|(s, _)| s == 200)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_balancer_checks_every_replica_on_readyz_and_sticks_to_none() {
        let c = haproxy_config();
        for z in ZONES {
            assert!(
                c.contains(&format!("server {z} {}:8080 check", app_ip(z))),
                "{c}"
            );
        }
        assert!(c.contains("option httpchk GET /readyz"));
        assert!(c.contains("balance roundrobin"));
        assert!(!c.contains("cookie") && !c.contains("stick"), "{c}");
        assert!(c.contains(&format!("bind {CONTROL_PLANE}:{INGRESS_PORT}")));
    }
}
