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

/// SIGKILLs a process; one already gone (or a zombie) counts as killed. A
/// pod's processes die together: a postmaster's child listed a moment ago may
/// have exited by the time its signal is sent.
pub async fn kill(pid: u32) -> anyhow::Result<()> {
    match signal(pid, "KILL").await {
        Err(_) if !alive(pid) => Ok(()),
        other => other,
    }
}

/// Whether every thread of a process is stopped (state `T`), or the process is
/// gone or a zombie. `kill -STOP` returns before the process has stopped: the
/// signal stops each thread only when that thread next runs, which on a loaded
/// machine can be long enough for another thread to answer a request.
pub fn stopped(pid: u32) -> bool {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    threads.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).map_or(true, |s| {
            s.rsplit(')').next().is_some_and(|rest| {
                matches!(rest.trim_start().chars().next(), Some('T' | 'Z' | 'X'))
            })
        })
    })
}

/// SIGSTOPs a process and returns once every thread of it has stopped, read
/// from `/proc` (the state a pause's proof then judges).
pub async fn stop_process(pid: u32, timeout: Duration) -> anyhow::Result<()> {
    signal(pid, "STOP").await?;
    wait_every(
        &format!("every thread of process {pid} to stop"),
        timeout,
        Duration::from_millis(5),
        || async move { stopped(pid) },
    )
    .await
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A process of several busy threads, ended when dropped.
    struct Busy(std::process::Child);

    impl Drop for Busy {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn busy_threads(n: usize) -> Busy {
        let script = format!(
            "import threading, time\n\
             def spin():\n    while True: pass\n\
             for _ in range({n}): threading.Thread(target=spin, daemon=True).start()\n\
             time.sleep(600)\n"
        );
        Busy(
            std::process::Command::new("python3")
                .args(["-c", &script])
                .spawn()
                .expect("python3 runs"),
        )
    }

    /// CI's `db-primary-isolation` once failed on `kill: No such process`: a
    /// postmaster's child listed with the pod exited before its SIGKILL.
    #[tokio::test]
    async fn killing_a_process_already_gone_is_done() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!alive(pid));
        assert!(
            signal(pid, "KILL").await.is_err(),
            "kill of a gone pid succeeds"
        );
        kill(pid).await.expect("a gone process counts as killed");
        let live = busy_threads(1);
        kill(live.0.id()).await.unwrap();
        wait_for(
            "the killed process to die",
            Duration::from_secs(10),
            || async { !alive(live.0.id()) },
        )
        .await
        .unwrap();
    }

    /// CI's `vfps-pod-pause` once found a replica answering HTTP right after
    /// `kill -STOP` returned: on a busy machine a thread stops only when it is
    /// next scheduled. A pause's proof must wait for every thread to stop.
    #[tokio::test]
    async fn a_stopped_process_has_every_thread_stopped() {
        let busy = busy_threads(6);
        let pid = busy.0.id();
        wait_for("the threads to start", Duration::from_secs(10), || async {
            std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count()) > 6
        })
        .await
        .unwrap();
        assert!(!stopped(pid), "a running process reads as stopped");
        for round in 0..40 {
            stop_process(pid, Duration::from_secs(10)).await.unwrap();
            let running: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .flatten()
                .filter_map(|t| {
                    let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
                    let state = stat.rsplit(')').next()?.trim_start().chars().next()?;
                    (state != 'T').then(|| format!("{:?} in {state}", t.file_name()))
                })
                .collect();
            assert!(
                running.is_empty(),
                "round {round}: threads still running after the stop returned: {running:?}"
            );
            signal(pid, "CONT").await.unwrap();
        }
    }
}
