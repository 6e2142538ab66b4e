//! CSV pseudonymization jobs: whole files pseudonymized (or de-pseudonymized)
//! in the background, resumable on any replica.
//!
//! # Layout
//! - [`encoding`]: the text encodings a job may name; fields decoded only where mapped.
//! - [`csv`]: RFC 4180 records found in raw bytes, so unmapped bytes pass unchanged.
//! - [`spec`]: what a job is asked to do, parsed once; its mappings resolved to a [`spec::Plan`].
//! - [`storage`]: where files live — an S3-compatible bucket or a local folder.
//!
//! Personal data: nothing here logs or stores a value of a file; errors name
//! lines and columns, never their content.

pub mod csv;
pub mod encoding;
pub mod spec;
pub mod storage;
pub mod transform;
