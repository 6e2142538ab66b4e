//! The browser probe beside the load: a headless Chromium, driven by
//! `tests/ui/probe.mjs` (Playwright), signs in once through the identity
//! provider and then, one step every 3 s, creates a pseudonym and (a step
//! later) looks it up through the UI's pages, behind the load balancer that
//! stands in for the ingress. A step that fails is tried again with the same original (a user
//! submitting the form again), so a result that went missing shows. Each
//! step is a line of `ui-steps.jsonl` in the run directory; verification asks
//! the API for every original the UI created.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context};
use tokio::time::Instant;
use vfps_client::{Client, Outcome};

use crate::{
    checker::ui::{Agreement, Step, StepRecord},
    history::ui::UiRow,
};

/// The probe's steps file in the run directory.
pub const STEPS_FILE: &str = "ui-steps.jsonl";
/// How long the probe may outlive the window (a step under way, Chromium's exit).
const GRACE: Duration = Duration::from_secs(60);
/// Deadline of one verification Create.
const CALL: Duration = Duration::from_secs(10);

/// Where and as whom the probe runs.
#[derive(Debug, Clone)]
pub struct UiProbe {
    /// The load balancer's address, e.g. `http://10.213.0.1:8088`.
    pub address: String,
    pub namespace: String,
    /// The probe's user at the identity provider.
    pub user: String,
    /// `tests/ui`: the probe script and its installed packages.
    pub tests_dir: PathBuf,
    pub seed: u64,
}

impl UiProbe {
    /// Refuses a probe that cannot run: no script, no packages, no browser.
    pub fn check_installed(&self) -> anyhow::Result<()> {
        self.check_installed_with(&browser())
    }

    fn check_installed_with(&self, browser: &str) -> anyhow::Result<()> {
        let script = self.tests_dir.join("probe.mjs");
        let packages = self.tests_dir.join("node_modules/playwright-core");
        if !script.exists() || !packages.exists() {
            bail!(
                "the browser probe needs {} and its packages ({}): run scripts/install-ui-test-deps.sh",
                script.display(),
                packages.display()
            );
        }
        if !Path::new(browser).exists() {
            bail!(
                "the browser probe needs Chromium's headless shell at {browser} \
                 (apt-get install chromium-headless-shell, or set {BROWSER_ENV})"
            );
        }
        Ok(())
    }

    /// Runs the probe until `window_end`; answers its steps in time order.
    pub async fn during(&self, dir: &Path, window_end: Instant) -> anyhow::Result<Vec<StepRecord>> {
        let seconds = window_end
            .saturating_duration_since(Instant::now())
            .as_secs()
            .max(1);
        let steps_file = dir.join(STEPS_FILE);
        let log = std::fs::File::create(dir.join("ui-probe.log"))?;
        let mut child = tokio::process::Command::new("node")
            .arg(self.tests_dir.join("probe.mjs"))
            .args(["--base", &self.address])
            .args(["--namespace", &self.namespace])
            .args(["--user", &self.user])
            .args(["--seconds", &seconds.to_string()])
            .args(["--seed", &format!("{:x}", self.seed)])
            .args(["--browser", &browser()])
            .arg("--out")
            .arg(&steps_file)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("cannot start the browser probe (node)")?;
        match tokio::time::timeout_at(window_end + GRACE, child.wait()).await {
            Ok(status) => {
                let status = status?;
                if !status.success() {
                    eprintln!("ui: the browser probe ended with {status} (see ui-probe.log)");
                }
            }
            Err(_) => {
                eprintln!("ui: the browser probe outlived the window; stopped");
                let _ = child.kill().await;
            }
        }
        let text = std::fs::read_to_string(&steps_file).unwrap_or_default();
        parse_steps(&text)
    }
}

/// Names the browser the probe drives, if not the default.
pub const BROWSER_ENV: &str = "VFPS_CHAOS_PROBE_BROWSER";
/// Debian's build of Chromium's headless shell: the same engine as its
/// `chromium` without the desktop browser's layer (no GPU process, a lighter
/// browser process), about 30 % less CPU per step (docs/performance.md).
const DEFAULT_BROWSER: &str = "/usr/bin/chromium-headless-shell";

/// The browser the probe drives: `VFPS_CHAOS_PROBE_BROWSER` or the headless shell.
fn browser() -> String {
    std::env::var(BROWSER_ENV).unwrap_or_else(|_| DEFAULT_BROWSER.into())
}

/// `ui-steps.jsonl`, in time order; a line that is not a step is an error
/// naming the line.
pub fn parse_steps(text: &str) -> anyhow::Result<Vec<StepRecord>> {
    let mut steps = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let step: StepRecord = serde_json::from_str(line)
            .with_context(|| format!("{STEPS_FILE} line {}: not a probe step", i + 1))?;
        steps.push(step);
    }
    steps.sort_by(|a, b| a.t.total_cmp(&b.t));
    Ok(steps)
}

/// Asks the API for every original the UI created a pseudonym for.
pub async fn verify(client: &Client, namespace: &str, steps: &[StepRecord]) -> Vec<Agreement> {
    let mut out = Vec::new();
    for s in steps.iter().filter(|s| s.step == Step::Create && s.ok) {
        let api = match client.create(namespace, &s.original, CALL).await {
            Outcome::Ok(p) => Some(p.pseudonym_value),
            Outcome::Fail(_) | Outcome::Indeterminate(_) => None,
        };
        out.push(Agreement {
            original: s.original.clone(),
            ui: s.pseudonym.clone(),
            api,
        });
    }
    out
}

/// The probe's steps as a row per second of the load window, by the second
/// each began in.
pub fn timeline(steps: &[StepRecord], load_start_unix: f64, seconds: u64) -> Vec<UiRow> {
    let mut rows: Vec<UiRow> = (0..seconds)
        .map(|second| UiRow {
            second,
            ..UiRow::default()
        })
        .collect();
    for s in steps {
        let offset = s.t - load_start_unix;
        if offset < 0.0 || offset >= seconds as f64 {
            continue;
        }
        let row = &mut rows[offset as usize];
        match (s.step, s.ok) {
            (Step::Create, true) => row.create_ok += 1,
            (Step::Create, false) => row.create_failed += 1,
            (Step::Lookup, true) => row.lookup_ok += 1,
            (Step::Lookup, false) => row.lookup_failed += 1,
            (Step::SignIn, _) => {}
        }
        match s.step {
            Step::Create => row.create_ms = row.create_ms.max(s.ms),
            Step::Lookup => row.lookup_ms = row.lookup_ms.max(s.ms),
            Step::SignIn => {}
        }
        if s.signed_out {
            row.signed_out = 1;
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_browser_is_named_with_how_to_install_it() {
        // A tests folder with the script and its packages, so only the browser is missing.
        let tests_dir =
            std::env::temp_dir().join(format!("vfps-ui-probe-check-{}", std::process::id()));
        std::fs::create_dir_all(tests_dir.join("node_modules/playwright-core")).unwrap();
        std::fs::write(tests_dir.join("probe.mjs"), "").unwrap();
        let probe = UiProbe {
            address: "http://127.0.0.1:1".into(),
            namespace: "n".into(),
            user: "admin".into(),
            tests_dir: tests_dir.clone(),
            seed: 1,
        };
        let missing = "/nonexistent/chromium-headless-shell";
        let e = probe.check_installed_with(missing).unwrap_err().to_string();
        assert!(e.contains(missing), "{e}");
        assert!(e.contains("apt-get install chromium-headless-shell"), "{e}");
        assert!(e.contains(BROWSER_ENV), "{e}");
        // The same folder with a browser that exists passes.
        probe.check_installed_with("/bin/sh").unwrap();
        std::fs::remove_dir_all(tests_dir).unwrap();
    }

    #[test]
    fn steps_are_read_in_time_order_and_a_bad_line_is_named() {
        let text = r#"{"t": 2.0, "step": "lookup", "ok": true, "ms": 30, "original": "o", "pseudonym": "p", "answered": "o"}

{"t": 1.0, "step": "create", "ok": true, "ms": 40, "original": "o", "pseudonym": "p"}
"#;
        let steps = parse_steps(text).unwrap();
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].step, Step::Create);
        let e = parse_steps("{\"t\": 1.0}\nnot json\n").unwrap_err();
        assert!(format!("{e:#}").contains("line 1"), "{e:#}");
    }

    #[test]
    fn steps_land_in_the_second_they_began_in() {
        let text = r#"{"t": 100.2, "step": "sign-in", "ok": true, "ms": 900}
{"t": 101.1, "step": "create", "ok": true, "ms": 40}
{"t": 101.5, "step": "lookup", "ok": false, "ms": 3000, "signed_out": true}
{"t": 250.0, "step": "create", "ok": true, "ms": 40}"#;
        let rows = timeline(&parse_steps(text).unwrap(), 100.0, 3);
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (rows[1].create_ok, rows[1].lookup_failed, rows[1].signed_out),
            (1, 1, 1)
        );
        assert_eq!(rows[1].lookup_ms, 3000.0);
        assert_eq!(rows[0], UiRow::default());
    }
}
