//! One error type for the service layer. Its [`ErrorKind`] decides the gRPC status
//! (and HTTP status), so classification happens once, by type.

use std::fmt;

/// What went wrong, as a caller needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    InvalidArgument,
    OutOfRange,
    NotFound,
    AlreadyExists,
    /// Transient: the database could not be reached or is failing over. Retryable.
    Unavailable,
    /// The call's deadline passed before the operation completed.
    DeadlineExceeded,
    /// No free pseudonym could be generated (the namespace's space is exhausted).
    ResourceExhausted,
    /// A bug or an unexpected database state; never retried.
    Internal,
    /// No valid credentials came with a call that needs them.
    Unauthenticated,
    /// The caller is known but lacks the role the operation needs.
    PermissionDenied,
}

/// An error with a message that is safe to return to the caller and to log: it never
/// contains an original value or a pseudonym.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }
    pub fn out_of_range(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::OutOfRange, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::AlreadyExists, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthenticated, message)
    }
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::PermissionDenied, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Unavailable
    }
}
