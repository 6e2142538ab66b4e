//! Where the topology lives and how faults are done there; each platform in its
//! own folder, implementing the nemesis's [`crate::nemesis::Faults`] and the
//! [`crate::driver::Driver`] steps.
//!
//! - [`local`]: one Linux machine, no containers — network namespaces as pods,
//!   Patroni + etcd for PostgreSQL HA, a small replica supervisor of our own.
//! - [`kind`]: Kubernetes — kind, CloudNativePG, Chaos Mesh, the Helm chart; driven
//!   through `kubectl`, `kind` and `helm`.
//! - [`access`]: the run's access tokens (authorization is on everywhere).
//! - [`run_as`]: processes run as another user, in a working directory of
//!   their own, and the paths they need checked first.
//! - [`net`]: commands, signals, a minimal HTTP GET and waiting, without blocking
//!   the generator that shares the runtime.

pub mod access;
pub mod kind;
pub mod local;
pub mod net;
pub mod run_as;
