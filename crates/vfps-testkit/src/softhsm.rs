//! A SoftHSM2 token of the test's own (SoftHSM2 from Debian: a real PKCS#11
//! implementation), for the `pkcs11:` key source.

use std::{path::PathBuf, process::Command};

/// Where Debian installs SoftHSM2's PKCS#11 module.
pub const MODULE: &str = "/usr/lib/softhsm/libsofthsm2.so";

/// A fresh token in a directory of its own.
pub struct Token {
    /// The token's label.
    pub label: String,
    /// The user PIN.
    pub pin: String,
    /// A file holding the PIN (mode 0600).
    pub pin_file: PathBuf,
    /// The SoftHSM2 configuration naming the token directory; every process
    /// that opens the token needs `SOFTHSM2_CONF` set to it.
    pub conf: PathBuf,
}

impl Token {
    /// Makes a token labelled `label`, and sets `SOFTHSM2_CONF` for this
    /// process (call it before other threads read the environment: a test
    /// binary of one test).
    pub fn new(label: &str) -> Self {
        use std::os::unix::fs::OpenOptionsExt;
        assert!(
            std::path::Path::new(MODULE).exists(),
            "SoftHSM2 is not installed ({MODULE} is missing): scripts/install-deps.sh installs \
             the Debian package softhsm2"
        );
        let dir = crate::scratch_dir("softhsm");
        let tokens = dir.join("tokens");
        std::fs::create_dir_all(&tokens).expect("the token directory");
        let conf = dir.join("softhsm2.conf");
        std::fs::write(
            &conf,
            format!(
                "directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n",
                tokens.display()
            ),
        )
        .expect("the SoftHSM2 configuration");
        std::env::set_var("SOFTHSM2_CONF", &conf);
        let pin = "4711-test".to_owned();
        let out = Command::new("softhsm2-util")
            .args(["--init-token", "--free", "--label", label])
            .args(["--pin", &pin, "--so-pin", "so-4711-test"])
            .env("SOFTHSM2_CONF", &conf)
            .output()
            .expect("softhsm2-util runs");
        assert!(out.status.success(), "softhsm2-util --init-token: {out:?}");
        let pin_file = dir.join("pin");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&pin_file)
            .expect("the PIN file");
        std::io::Write::write_all(&mut f, format!("{pin}\n").as_bytes()).expect("the PIN written");
        Self {
            label: label.to_owned(),
            pin,
            pin_file,
            conf,
        }
    }

    /// The `VFPS_KEYS` URI of key `object` on this token, its PIN from the
    /// PIN file.
    pub fn uri(&self, object: &str) -> String {
        format!(
            "pkcs11:token={};object={object}?module-path={MODULE}&pin-source=file:{}",
            self.label,
            self.pin_file.display()
        )
    }
}
