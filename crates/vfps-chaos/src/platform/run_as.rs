//! Processes run as another user (PostgreSQL refuses root): each in a working
//! directory that user can use, and every path it needs checked before anything
//! starts.
//!
//! A process inherits its parent's working directory. Run as root from a
//! folder `postgres` cannot enter (a clone in `/root`, mode 0700 on Debian),
//! PostgreSQL's tools and Patroni fail in ways that name no path: Patroni waits
//! "for leader to bootstrap" for ever. So no command here inherits it.

use std::{
    ffi::OsStr,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use anyhow::bail;

/// `program` as `user` (`setpriv`, which execs: the process keeps its PID),
/// in `workdir`, a directory the user can use.
pub fn command(user: &str, workdir: &Path, program: impl AsRef<OsStr>) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("setpriv");
    c.args(setpriv_args(user)).arg(program).current_dir(workdir);
    c
}

/// [`command`] inside a network namespace (`ip netns exec` execs too).
pub fn command_in_netns(
    netns: &str,
    user: &str,
    workdir: &Path,
    program: impl AsRef<OsStr>,
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("ip");
    c.args(["netns", "exec", netns, "setpriv"])
        .args(setpriv_args(user))
        .arg(program)
        .current_dir(workdir);
    c
}

fn setpriv_args(user: &str) -> [&str; 5] {
    ["--reuid", user, "--regid", user, "--init-groups"]
}

/// What a user must be able to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Enter every folder on the way (the path itself may not exist yet: the
    /// platform makes it and hands it over).
    Reach,
    /// Reach it and run it.
    Execute,
    /// Reach it and read it.
    Read,
}

/// A path `user` must be able to use, and how to mend it if not.
#[derive(Debug, Clone)]
pub struct Need {
    pub path: PathBuf,
    pub access: Access,
    /// How to put it elsewhere (the refusal says it beside the permission fix).
    pub elsewhere: &'static str,
}

/// Checks every need as `user` itself (the kernel's answer, ACLs and all), and
/// refuses at once naming the first path the user cannot use, its mode and
/// owner, and the fix.
pub async fn check(user: &str, needs: &[Need]) -> anyhow::Result<()> {
    for need in needs {
        let mut steps: Vec<(PathBuf, &str)> = need
            .path
            .ancestors()
            .skip(1)
            .filter(|p| !p.as_os_str().is_empty())
            .filter(|p| p.exists())
            .map(|p| (p.to_owned(), "-x"))
            .collect();
        steps.reverse();
        match need.access {
            Access::Reach if need.path.is_dir() => steps.push((need.path.clone(), "-x")),
            Access::Reach => {}
            Access::Execute => steps.push((need.path.clone(), "-x")),
            Access::Read => steps.push((need.path.clone(), "-r")),
        }
        for (path, test) in steps {
            let ok = command(user, Path::new("/"), "test")
                .arg(test)
                .arg(&path)
                .stdin(std::process::Stdio::null())
                .status()
                .await?
                .success();
            if !ok {
                bail!("{}", refusal(user, need, &path, test));
            }
        }
    }
    Ok(())
}

/// "postgres cannot enter /root (mode 0700, owner root), on the way to …".
fn refusal(user: &str, need: &Need, blocked: &Path, test: &str) -> String {
    let what = match test {
        "-r" => "read",
        _ if blocked != need.path || blocked.is_dir() => "enter",
        _ => "run",
    };
    let how = match std::fs::metadata(blocked) {
        Ok(m) => format!(
            " (mode {:04o}, owner {})",
            m.mode() & 0o7777,
            owner_name(m.uid())
        ),
        Err(_) => " (missing)".to_owned(),
    };
    let on_the_way = if blocked == need.path {
        String::new()
    } else {
        format!(", on the way to {}", need.path.display())
    };
    let fix = if what == "enter" {
        format!(
            "chmod o+x {} (or `setfacl -m u:{user}:x`)",
            blocked.display()
        )
    } else {
        format!(
            "chmod o+r{} {}",
            if what == "run" { "x" } else { "" },
            blocked.display()
        )
    };
    format!(
        "{user} cannot {what} {}{how}{on_the_way}; processes run as {user} need it: \
         {}, or {fix}",
        blocked.display(),
        need.elsewhere
    )
}

/// The user name of `uid` from /etc/passwd, or the number.
fn owner_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)? == uid.to_string()).then(|| name.to_owned())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_blocking_folder_its_mode_and_the_fix() {
        let dir = std::env::temp_dir().join(format!("vfps-run-as-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let need = Need {
            path: dir.join("base"),
            access: Access::Reach,
            elsewhere: "set --base (VFPS_CHAOS_BASE) to a folder postgres can reach",
        };
        let text = refusal("postgres", &need, &dir, "-x");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            text.starts_with(&format!(
                "postgres cannot enter {} (mode 0700, owner ",
                dir.display()
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("on the way to {}", dir.join("base").display())),
            "{text}"
        );
        assert!(text.contains("set --base (VFPS_CHAOS_BASE)"), "{text}");
        assert!(
            text.contains(&format!("chmod o+x {}", dir.display())),
            "{text}"
        );
    }
}
