//! Where the topology lives and how faults are done there.
//!
//! - [`local`]: one Linux machine, no containers — network namespaces as pods,
//!   Patroni + etcd for PostgreSQL HA, a small replica supervisor of our own.
//! - [`kind`]: Kubernetes — kind, CloudNativePG, Chaos Mesh, the Helm chart; driven
//!   through `kubectl`, `kind` and `helm`.
//!
//! Both implement [`crate::nemesis::Platform`], so the scenarios, their order,
//! their health gates and their proofs are one piece of code.

pub mod kind;
pub mod local;
pub mod net;

/// The platform a run targets (`--platform`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    Local,
    Kind,
}
