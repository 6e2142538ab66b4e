//! The platform a run targets: the scenarios' default windows depend on it
//! (Kubernetes heals more slowly), and so does where the topology lives.

/// `vfps-chaos local …` or `vfps-chaos kind …`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    Local,
    Kind,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Local => "local",
            Target::Kind => "kind",
        }
    }
}
