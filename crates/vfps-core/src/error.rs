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
    /// The operation is refused in the server's current configuration.
    FailedPrecondition,
}

/// Why a transient (`Unavailable`) error happened, as far as the layer that saw it
/// knows: a small fixed set, so that retries can be counted and traced by cause
/// without reading (or exporting) their messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransientCause {
    /// The database cannot be reached, lost the connection, is read-only after a
    /// failover or is shutting down; also any transient error without a finer cause.
    Unavailable,
    /// The database, or a connection from the pool, did not come in time.
    Timeout,
    /// The transaction conflicted with another: serialisation failure, deadlock,
    /// lock not available.
    Serialization,
    /// Out of capacity: too many connections, memory or disk, or too many Creates
    /// already waiting for the database.
    Overloaded,
}

impl TransientCause {
    pub const ALL: [TransientCause; 4] = [
        Self::Unavailable,
        Self::Timeout,
        Self::Serialization,
        Self::Overloaded,
    ];

    /// The lower-case name, as a metric label and a trace attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
            Self::Serialization => "serialization",
            Self::Overloaded => "overloaded",
        }
    }
}

/// An error with a message that is safe to return to the caller and to log: it never
/// contains an original value or a pseudonym.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// Set by [`Error::because`] where the finer cause of a transient error is known.
    cause: Option<TransientCause>,
    /// A restored database's hold refused it ([`Error::restore_hold`]): HTTP
    /// answers `409 Conflict` (the state is the operator's to change, not
    /// the caller's request to mend), gRPC `FAILED_PRECONDITION`.
    hold: bool,
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
            cause: None,
            hold: false,
        }
    }
    /// New originals refused while a restored database awaits its
    /// operator's confirmation (docs/backup.md).
    pub fn restore_hold(message: impl Into<String>) -> Self {
        Self {
            hold: true,
            ..Self::new(ErrorKind::FailedPrecondition, message)
        }
    }
    /// Whether a restore hold refused it.
    pub fn is_restore_hold(&self) -> bool {
        self.hold
    }
    /// The same error, with the finer cause of its transience.
    pub fn because(self, cause: TransientCause) -> Self {
        Self {
            cause: Some(cause),
            ..self
        }
    }
    /// Why a transient error happened (`Unavailable` when nobody said); `None`
    /// for an error that is not transient.
    pub fn transient_cause(&self) -> Option<TransientCause> {
        self.is_transient()
            .then(|| self.cause.unwrap_or(TransientCause::Unavailable))
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
    pub fn failed_precondition(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::FailedPrecondition, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Unavailable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_errors_have_a_cause_and_unavailable_is_the_default() {
        assert_eq!(
            Error::unavailable("x").transient_cause(),
            Some(TransientCause::Unavailable)
        );
        assert_eq!(
            Error::unavailable("x")
                .because(TransientCause::Serialization)
                .transient_cause(),
            Some(TransientCause::Serialization)
        );
        assert_eq!(
            Error::internal("x")
                .because(TransientCause::Timeout)
                .transient_cause(),
            None
        );
    }
}
