//! The access tokens of a run (both platforms turn authorization on): the
//! load's own service-account token, and the expired and read-only ones its
//! `bad` calls must see refused. Made with `vfps tokens create` against the
//! run's database; the plaintext goes to a file (local) or a Secret (kind).

/// One token of a run: the file (or Secret key) it is kept in, and the
/// arguments of `vfps tokens create` that make it.
pub struct RunToken {
    pub file: &'static str,
    pub args: &'static [&'static str],
}

pub const LOAD: RunToken = RunToken {
    file: "load.token",
    args: &[
        "--name",
        "vfps-chaos load",
        "--admin",
        "--grant",
        "*=read,write,reverse-lookup,erase",
    ],
};

/// Expired a second after it is made, long before any load starts.
pub const EXPIRED: RunToken = RunToken {
    file: "expired.token",
    args: &[
        "--name",
        "vfps-chaos expired",
        "--grant",
        "*=write",
        "--expires-in",
        "1s",
    ],
};

pub const READ_ONLY: RunToken = RunToken {
    file: "read-only.token",
    args: &["--name", "vfps-chaos read-only", "--grant", "*=read"],
};

pub const ALL: [&RunToken; 3] = [&LOAD, &EXPIRED, &READ_ONLY];

/// The plaintext `vfps tokens create` printed, checked for its shape.
pub fn secret_of(stdout: &[u8]) -> anyhow::Result<String> {
    let text = String::from_utf8_lossy(stdout);
    let secret = text.trim();
    let shaped =
        (secret.starts_with("vfps_sat_") || secret.starts_with("vfps_pat_")) && secret.len() == 52;
    if !shaped {
        anyhow::bail!("vfps tokens create printed no token");
    }
    Ok(secret.to_owned())
}
