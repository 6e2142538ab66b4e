//! Small async helpers for the platform: commands and a minimal HTTP GET (no
//! blocking call may stall the generator that shares the runtime).

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs a command to completion; fails with its output when it exits non-zero.
pub async fn cmd(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Like [`cmd`] but ignores failure (cleanup of things that may not exist).
pub async fn cmd_quiet(program: &str, args: &[&str]) {
    let _ = cmd(program, args).await;
}

/// Sends a signal to a process by id.
pub async fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    cmd("kill", &[&format!("-{signal}"), &pid.to_string()])
        .await
        .map(|_| ())
}

/// Whether a process id is alive (and not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// A minimal HTTP/1.0 GET: (status, body).
pub async fn http_get(addr: &str, path: &str, timeout: Duration) -> anyhow::Result<(u16, String)> {
    let work = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(timeout, work)
        .await
        .context("HTTP timeout")??;
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status line")?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Polls `check` until it succeeds or `timeout` passes.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_every(what, timeout, Duration::from_millis(200), check).await
}

/// Polls `check` every `interval` until it succeeds or `timeout` passes.
pub async fn wait_every<F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut check: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= until {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(interval).await;
    }
}
