//! The vfps pseudonymization service.
//!
//! # Layout
//! - [`config`]: settings by the deployed vfps's names, in sections that each
//!   parse and validate their own keys; every bad key is reported at once.
//! - [`startup`]: opens the store, binds the ports, serves, drains on shutdown.
//! - [`service`]: what each call does, transport-independent; retries transient
//!   database errors inside the call's deadline.
//! - [`grpc`]: `vfps.api.v1` over tonic, plus health and reflection.
//! - [`http`]: REST in proto3 JSON, FHIR `$create-pseudonym`, health endpoints.
//! - [`auth`]: bearer tokens (OIDC JWTs, database access tokens), namespace
//!   roles, and the audit trail of re-identification.
//! - [`jobs`]: CSV jobs behind the API's authorization and audit; [`jobs_cli`]: `vfps jobs`.
//! - [`metrics`]: Prometheus metrics.
//! - [`cache`]: the bounded, expiring namespace and pseudonym caches.
//! - [`state`]: what the transports share, including readiness.
//! - [`telemetry`]: structured logging, the audit log, and OpenTelemetry traces
//!   (one span per API call, the coalescer's wait and batch, store retries).
//! - [`tls`]: TLS on the API ports, certificates reloaded when their files change.
//! - [`tokens`]: creating, showing and revoking access tokens (API and CLI).

pub mod auth;
pub mod cache;
pub mod config;
pub mod counts;
pub mod fhir;
pub mod grpc;
pub mod http;
pub mod jobs;
pub mod jobs_cli;
pub mod keys;
pub mod keys_cli;
pub mod metrics;
pub mod pseudonyms_cli;
pub mod restore_cli;
pub mod router;
pub mod service;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod tls;
pub mod tokens;
pub mod ui;
pub mod wire;
