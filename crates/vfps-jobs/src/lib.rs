//! CSV pseudonymization jobs: whole files pseudonymized (or de-pseudonymized)
//! in the background, resumable on any replica.
//!
//! # Layout
//! - [`encoding`]: the text encodings a job may name; fields decoded only where mapped.
//! - [`csv`]: RFC 4180 records found in raw bytes, so unmapped bytes pass unchanged.
//! - [`spec`]: what a job is asked to do, parsed once; its mappings resolved to a [`spec::Plan`].
//! - [`storage`]: where files live — an S3-compatible bucket or a local folder.
//! - [`inspect`]: the uploaded input checked before its job is queued; the [`inspect::JobPlan`].
//! - [`transform`]: a batch of records through a job: cells gathered, rows written.
//! - [`resolve`]: a batch's answers from the store in one round trip, within the jobs' share.
//! - [`output`]: the output as multipart parts and durable segments.
//! - [`checkpoint`]: what a checkpoint and a takeover record.
//! - [`retry`]: transient failures waited out until the runner must stop.
//! - [`runner`]: one claimed job from its checkpoint to its end, under a fenced lease.
//! - [`service`]: what the API does with jobs, and each replica's runners.
//!
//! Personal data: nothing here logs or stores a value of a file; errors name
//! lines and columns, never their content.

pub mod checkpoint;
pub mod csv;
pub mod encoding;
pub mod inspect;
pub mod output;
pub mod resolve;
pub mod retry;
pub mod runner;
pub mod service;
pub mod spec;
pub mod storage;
pub mod transform;
