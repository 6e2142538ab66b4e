//! What a PostgreSQL error means for the caller, decided class by class
//! (PostgreSQL documentation, appendix A), so no error reaches a caller as
//! `INTERNAL` unless it is a bug:
//!
//! | SQLSTATE | meaning | answer |
//! |---|---|---|
//! | 08 | connection exception | `Unavailable` |
//! | 22 | data exception (a value the database cannot take, e.g. U+0000) | `InvalidArgument` |
//! | 25006 | read-only transaction (the primary was demoted) | `Unavailable` |
//! | 28 | invalid authorisation (credentials rotated, role not there yet) | `Unavailable` |
//! | 3D000 | database does not exist (being created or restored) | `Unavailable` |
//! | 40 | transaction rollback (serialisation failure, deadlock) | `Unavailable` |
//! | 53 | insufficient resources (disk full, out of memory, too many connections) | `Unavailable` |
//! | 54 | program limit exceeded (an index row too large for a value) | `InvalidArgument` |
//! | 55P03, 55006 | lock not available, object in use | `Unavailable` |
//! | 57 | operator intervention (cancel, shutdown, crash restart) | `Unavailable` |
//! | 58 | system error (I/O) | `Unavailable` |
//! | VFR01 (ours: `vfps_refuse_new_originals`) | a restored database awaits its operator's confirmation | `FailedPrecondition` |
//! | everything else (0A, 23, 25, 42, XX, …) | a bug or a broken schema | `Internal` (42P01, an undefined table, says to run the migrations) |
//!
//! `Unavailable` is retried inside the call's deadline; `InvalidArgument` fails
//! only the call whose value it was (a batch that fails so is split, see
//! `coalesce`).

use vfps_core::{ErrorKind, TransientCause};

/// Raised by the trigger a restore hold installs (migration 7): a Create of
/// an original the restored database does not know.
pub const RESTORE_HOLD: &str = "VFR01";

/// The answer for one SQLSTATE (five characters).
pub fn kind_of(code: &str) -> ErrorKind {
    match code {
        RESTORE_HOLD => return ErrorKind::FailedPrecondition,
        "25006" | "3D000" | "55P03" | "55006" => return ErrorKind::Unavailable,
        _ => {}
    }
    match code.get(..2) {
        Some("08" | "28" | "40" | "53" | "57" | "58") => ErrorKind::Unavailable,
        Some("22" | "54") => ErrorKind::InvalidArgument,
        _ => ErrorKind::Internal,
    }
}

/// The finer cause of a transient SQLSTATE, for counting and tracing retries.
pub fn transient_cause(code: &str) -> TransientCause {
    match code {
        "55P03" => return TransientCause::Serialization,
        "57014" => return TransientCause::Timeout,
        _ => {}
    }
    match code.get(..2) {
        Some("40") => TransientCause::Serialization,
        Some("53") => TransientCause::Overloaded,
        _ => TransientCause::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_causes_follow_the_class() {
        use TransientCause::*;
        for (code, cause) in [
            ("40001", Serialization), // serialisation failure
            ("40P01", Serialization), // deadlock
            ("55P03", Serialization), // lock not available
            ("53300", Overloaded),    // too many connections
            ("53100", Overloaded),    // disk full
            ("57014", Timeout),       // statement timeout / cancelled
            ("57P01", Unavailable),   // admin shutdown
            ("25006", Unavailable),   // read-only after a failover
            ("08006", Unavailable),   // connection failure
        ] {
            assert_eq!(transient_cause(code), cause, "{code}");
        }
    }

    #[test]
    fn every_class_has_a_deliberate_answer() {
        use ErrorKind::*;
        for (code, kind) in [
            ("08006", Unavailable),        // connection failure
            ("08P01", Unavailable),        // protocol violation
            ("22021", InvalidArgument),    // invalid byte sequence (NUL)
            ("22001", InvalidArgument),    // value too long
            ("23505", Internal),           // unique violation: the upsert never causes one
            ("23514", Internal),           // check violation
            ("25006", Unavailable),        // read-only transaction
            ("25P02", Internal),           // in failed transaction: a bug
            ("28P01", Unavailable),        // password authentication failed
            ("3D000", Unavailable),        // database does not exist
            ("40001", Unavailable),        // serialisation failure
            ("40P01", Unavailable),        // deadlock
            ("42P01", Internal),           // undefined table: schema not migrated
            ("53100", Unavailable),        // disk full
            ("53300", Unavailable),        // too many connections
            ("54000", InvalidArgument),    // index row size exceeded
            ("55P03", Unavailable),        // lock not available
            ("57014", Unavailable),        // query cancelled
            ("57P01", Unavailable),        // admin shutdown
            ("58030", Unavailable),        // I/O error
            ("VFR01", FailedPrecondition), // a restore hold
            ("XX000", Internal),
            ("0A000", Internal),
            ("", Internal),
        ] {
            assert_eq!(kind_of(code), kind, "{code}");
        }
    }
}
