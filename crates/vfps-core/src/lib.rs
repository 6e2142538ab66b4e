//! Domain types of vfps. Parse, don't validate: a [`NamespaceName`], an
//! [`OriginalValue`] or a [`NamespaceSettings`] exists only if it is valid, so the
//! layers above never re-check.
//!
//! # Layout
//! - [`domain`]: names, values, namespace settings and the stored records.
//! - [`generate`]: the pseudonym generation methods of the wire contract.
//! - [`error`]: the error type every layer maps to a gRPC status.
//! - [`access`]: who may do what: permissions, grants and access tokens.

pub mod access;
pub mod domain;
pub mod error;
pub mod generate;

pub use domain::*;
pub use error::{Error, ErrorKind, TransientCause};
pub use generate::GenerationMethod;
