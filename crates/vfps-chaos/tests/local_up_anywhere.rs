//! `vfps-chaos local up` as a newcomer runs it: from a clone in root's home
//! (mode 0700 on Debian), a folder `postgres` cannot enter. Needs root;
//! `scripts/test.sh` runs it.

#![allow(clippy::unwrap_used)]

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

/// One at a time: `up` makes the platform's fixed namespaces, which the
/// refusal's test looks for.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn chaos() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vfps-chaos"));
    // Every default as a newcomer gets it, but the vfps beside this build.
    c.env_remove("RESILIENCE_OUTPUT_DIR")
        .env_remove("VFPS_CHAOS_UI_DIR")
        .env_remove("VFPS_CHAOS_BACKUP")
        .env("VFPS_BIN", vfps_bin());
    c
}

fn vfps_bin() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_vfps-chaos"))
        .parent()
        .unwrap()
        .join("vfps")
}

/// A folder only root can enter, as `/root` is, with an ordinary one inside.
struct Home {
    closed: PathBuf,
}

impl Home {
    fn new() -> Self {
        let closed = std::env::temp_dir().join(format!("vfps-chaos-home-{}", std::process::id()));
        std::fs::create_dir_all(closed.join("clone")).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(closed.join("clone"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        Self { closed }
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.closed);
    }
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
#[ignore = "needs root, Patroni and etcd (creates network namespaces): scripts/test.sh runs it with --include-ignored"]
fn up_works_from_a_folder_postgres_cannot_enter_says_what_it_made_and_writes_nothing_there() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let home = Home::new();
    let base = std::env::temp_dir().join(format!("vfps-chaos-anywhere-{}", std::process::id()));
    let base_text = base.display().to_string();
    for cwd in [home.closed.clone(), home.closed.join("clone")] {
        let before = entries(&cwd);
        let up = chaos()
            .args(["local", "up", "--ui", "false", "--base", &base_text])
            .current_dir(&cwd)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&up.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&up.stderr).into_owned();
        let down = chaos()
            .args(["local", "down", "--base", &base_text])
            .current_dir(&cwd)
            .output()
            .unwrap();
        assert!(
            up.status.success(),
            "up from {} failed: {stderr}",
            cwd.display()
        );
        assert!(
            down.status.success(),
            "{}",
            String::from_utf8_lossy(&down.stderr)
        );
        for said in [
            "REST/FHIR http://10.213.0.21:8080",
            "gRPC 10.213.0.23:8081",
            "metrics http://10.213.0.22:8082/metrics",
            &format!("{base_text}/tokens/load.token"),
            "export ConnectionStrings__PostgreSQL='Host=10.213.0.11,10.213.0.12,10.213.0.13",
            &format!("vfps-chaos local down --base {base_text}"),
        ] {
            assert!(stdout.contains(said), "up did not say {said:?}:\n{stdout}");
        }
        assert_eq!(
            entries(&cwd),
            before,
            "up wrote into the current directory {}",
            cwd.display()
        );
    }
}

#[test]
#[ignore = "needs root (runs a check as postgres): scripts/test.sh runs it with --include-ignored"]
fn a_base_postgres_cannot_reach_is_refused_at_once_naming_the_folder_and_the_fix() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let home = Home::new();
    let base = home.closed.join("clone/base");
    let started = Instant::now();
    let up = chaos()
        .args(["local", "up", "--ui", "false", "--base"])
        .arg(&base)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&up.stderr);
    assert_eq!(up.status.code(), Some(2), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused only after {:?}",
        started.elapsed()
    );
    assert!(
        stderr.contains(&format!(
            "postgres cannot enter {} (mode 0700, owner root), on the way to {}",
            home.closed.display(),
            base.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("set --base (VFPS_CHAOS_BASE)"), "{stderr}");
    assert!(!base.exists(), "something was made before the refusal");
    // Nothing was started either: no namespace of the platform exists.
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&netns.stdout).contains("vfps-db-"));
}
