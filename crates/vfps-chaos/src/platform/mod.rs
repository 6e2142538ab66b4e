//! Where the topology lives and how faults are done there.
//!
//! - [`local`]: one Linux machine, no containers — network namespaces as pods,
//!   Patroni + etcd for PostgreSQL HA, a small replica supervisor of our own.

pub mod local;
pub mod net;
