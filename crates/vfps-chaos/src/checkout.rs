//! Folders of the checkout the harness runs from (`tests/ui`, `tests/chaos/ha`,
//! `charts/vfps`), found from the installation or the checkout, never from the
//! current directory: `vfps-chaos` run from anywhere finds them, or says where
//! it looked and which flag names them.

use std::path::{Path, PathBuf};

/// A folder of the checkout, and a file in it that proves it is the one.
#[derive(Debug, Clone, Copy)]
pub struct Folder {
    /// Relative to the checkout's root.
    pub path: &'static str,
    /// A file the folder must hold.
    pub marker: &'static str,
    /// What it is, for the refusal.
    pub what: &'static str,
    /// The flag and variable that name it instead.
    pub flag: &'static str,
}

pub const UI_TESTS: Folder = Folder {
    path: "tests/ui",
    marker: "probe.mjs",
    what: "the browser tests' folder (the identity provider and the probe)",
    flag: "--ui-dir (VFPS_CHAOS_UI_DIR)",
};

pub const KIND_ASSETS: Folder = Folder {
    path: "tests/chaos/ha",
    marker: "cnpg-cluster.yaml",
    what: "the Kubernetes chaos assets",
    flag: "--assets (VFPS_CHAOS_ASSETS)",
};

pub const CHART: Folder = Folder {
    path: "charts/vfps",
    marker: "Chart.yaml",
    what: "the Helm chart",
    flag: "--chart (VFPS_CHART)",
};

/// Where `folder` is: beside the binary's installation (`<prefix>/share/vfps-chaos/…`
/// or a checkout the binary was built in, `target/<profile>/vfps-chaos`), then in the
/// checkout this binary was compiled from.
pub fn find(folder: Folder) -> anyhow::Result<PathBuf> {
    let candidates = candidates(folder, std::env::current_exe().ok().as_deref());
    candidates
        .iter()
        .find(|c| c.join(folder.marker).is_file())
        .cloned()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "cannot find {} ({}/{}): looked in {}; name it with {}",
                folder.what,
                folder.path,
                folder.marker,
                candidates
                    .iter()
                    .map(|c| c.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                folder.flag
            )
        })
}

/// A flag's default: the folder [`find`] finds, else its checkout-relative
/// path, which [`require`] then refuses with where it looked.
pub fn default(folder: Folder) -> PathBuf {
    find(folder).unwrap_or_else(|_| PathBuf::from(folder.path))
}

/// `path` if it is `folder` (it holds the marker), else a refusal naming what
/// is missing, where a default was looked for, and the flag.
pub fn require(path: &Path, folder: Folder) -> anyhow::Result<()> {
    if path.join(folder.marker).is_file() {
        return Ok(());
    }
    if path == Path::new(folder.path) {
        return find(folder).map(|_| ());
    }
    anyhow::bail!(
        "{} holds no {} ({}); name {} with {}",
        path.display(),
        folder.marker,
        folder.what,
        folder.path,
        folder.flag
    )
}

fn candidates(folder: Folder, exe: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(exe) = exe {
        for dir in exe.ancestors().skip(1) {
            out.push(dir.join("share/vfps-chaos").join(folder.path));
            out.push(dir.join(folder.path));
        }
    }
    out.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(folder.path),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_folder_is_found_in_the_checkout_the_binary_was_built_in() {
        for f in [UI_TESTS, KIND_ASSETS, CHART] {
            let found = find(f).unwrap();
            assert!(found.join(f.marker).is_file(), "{}", found.display());
        }
    }

    #[test]
    fn an_installation_is_searched_before_the_checkout_and_a_miss_names_the_flag() {
        let c = candidates(UI_TESTS, Some(Path::new("/opt/vfps/bin/vfps-chaos")));
        assert_eq!(c[0], Path::new("/opt/vfps/bin/share/vfps-chaos/tests/ui"));
        assert!(c.contains(&PathBuf::from("/opt/vfps/share/vfps-chaos/tests/ui")));
        assert!(c.last().unwrap().ends_with("../../tests/ui"));
        let missing = Folder {
            path: "tests/nowhere",
            marker: "x",
            what: "a folder no checkout has",
            flag: "--nowhere",
        };
        let e = find(missing).unwrap_err().to_string();
        assert!(
            e.contains("cannot find a folder no checkout has (tests/nowhere/x)"),
            "{e}"
        );
        assert!(e.contains("name it with --nowhere"), "{e}");
        assert_eq!(default(missing), Path::new("tests/nowhere"));
        let e = require(&default(missing), missing).unwrap_err().to_string();
        assert!(e.contains("looked in"), "{e}");
        let e = require(Path::new("/proc"), missing)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/proc holds no x (a folder no checkout has); name tests/nowhere with --nowhere"
        );
        require(&default(UI_TESTS), UI_TESTS).unwrap();
    }
}
