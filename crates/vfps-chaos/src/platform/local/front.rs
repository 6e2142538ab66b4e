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

/// HAProxy's configuration for the topology: the balancer on the bridge
/// before the three replicas' HTTP ports.
pub fn haproxy_config() -> String {
    let servers: Vec<(String, String)> = ZONES
        .iter()
        .map(|z| (z.to_string(), format!("{}:8080", app_ip(z))))
        .collect();
    balancer_config(&format!("{CONTROL_PLANE}:{INGRESS_PORT}"), &servers)
}

/// A balancer at `bind` before `servers` (name, address): health checks
/// every second on `/readyz` (a replica leaves after two failures and returns
/// after one success), a request whose connection failed is tried on another
/// replica, nothing sticky. No `backup` server and no `allbackups`: when every
/// replica fails its readiness, HAProxy answers 503 itself rather than failing
/// open to replicas that said they cannot serve (as cloud load balancers do);
/// the probe then sees the outage the users would.
pub fn balancer_config(bind: &str, servers: &[(String, String)]) -> String {
    let servers: String = servers
        .iter()
        .map(|(name, addr)| format!("  server {name} {addr} check\n"))
        .collect();
    format!(
        "global\n  maxconn 2000\n\
         defaults\n  mode http\n  timeout connect 1s\n  timeout client 60s\n  timeout server 30s\n  \
         retries 2\n  option redispatch\n  option forwardfor\n\
         frontend ui\n  bind {bind}\n  default_backend vfps\n\
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
        super::write_secret(&file, key.as_bytes())
            .with_context(|| format!("cannot write {}", file.display()))?;
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

    /// A replica on loopback whose `/readyz` answers as `ready` says and
    /// whose every other page answers 200 with its name: an answer carrying
    /// the name came from a replica, not from the balancer.
    async fn replica(
        name: &'static str,
        ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let ready = ready.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 2048];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]);
                    let (status, body) = if head.starts_with("GET /readyz") {
                        if ready.load(std::sync::atomic::Ordering::SeqCst) {
                            ("200 OK", "ready")
                        } else {
                            ("503 Service Unavailable", "not ready")
                        }
                    } else {
                        ("200 OK", name)
                    };
                    let _ = s
                        .write_all(
                            format!(
                                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                });
            }
        });
        addr
    }

    /// Every replica failing readiness: the balancer answers 503 itself and
    /// sends nothing to them (no fail-open backup), and serves again as soon
    /// as one is ready. Runs the real HAProxy (scripts/install-deps.sh).
    #[tokio::test]
    async fn with_every_replica_unready_the_balancer_answers_503_itself() {
        use std::sync::{atomic::AtomicBool, Arc};
        let flags: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::new(AtomicBool::new(true))).collect();
        let mut servers = Vec::new();
        for (name, ready) in ["a", "b", "c"].into_iter().zip(&flags) {
            servers.push((name.to_owned(), replica(name, ready.clone()).await));
        }
        let port = vfps_testkit::free_port().unwrap();
        let bind = format!("127.0.0.1:{port}");
        let dir = vfps_testkit::scratch_dir("haproxy-unready");
        let config = dir.join("haproxy.cfg");
        std::fs::write(&config, balancer_config(&bind, &servers)).unwrap();
        let _haproxy = tokio::process::Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("HAProxy is not installed (scripts/install-deps.sh)");
        let get = || async { http_get(&bind, "/ui/namespaces", Duration::from_secs(2)).await };
        wait_for(
            "the balancer to serve a replica",
            Duration::from_secs(10),
            || async {
                get()
                    .await
                    .is_ok_and(|(s, b)| s == 200 && ["a", "b", "c"].contains(&b.as_str()))
            },
        )
        .await
        .unwrap();

        for f in &flags {
            f.store(false, std::sync::atomic::Ordering::SeqCst);
        }
        // Two failed checks a second apart take a replica out.
        wait_for(
            "the balancer's own 503",
            Duration::from_secs(10),
            || async { get().await.is_ok_and(|(s, _)| s == 503) },
        )
        .await
        .unwrap();
        for _ in 0..10 {
            let (status, body) = get().await.unwrap();
            assert_eq!(
                status, 503,
                "a replica that is not ready was sent a request: {body}"
            );
            assert!(!["a", "b", "c"].contains(&body.trim()), "{body}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        flags[1].store(true, std::sync::atomic::Ordering::SeqCst);
        wait_for(
            "the ready replica to serve again",
            Duration::from_secs(10),
            || async { get().await.is_ok_and(|(s, b)| s == 200 && b == "b") },
        )
        .await
        .unwrap();
    }
}
