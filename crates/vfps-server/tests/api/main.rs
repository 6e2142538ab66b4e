//! API tests: the real server on port 0, over PostgreSQL and SQLite.

#![allow(clippy::unwrap_used)]

mod helpers;

mod audit;
mod auth;
mod fhir;
mod grpc;
mod interleavings;
mod jobs;
mod limits;
mod mii;
mod mii_exact;
mod mii_examples;
mod mii_identity;
mod mii_multi;
mod observability;
mod operations;
mod privacy;
mod reidentify;
mod resilience;
mod rest;
mod restore;
mod rights;
mod rotation;
mod safety;
mod sealed;
mod tls;
mod ui;
mod ui_roles;
mod upstream;

/// Generates one test per backend for each `async fn(Backend)` listed.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod on_postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name($crate::helpers::Backend::Postgres).await })*
        }
        mod on_sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name($crate::helpers::Backend::Sqlite).await })*
        }
    };
}
