//! The FHIR wire format vfps reads, apart from everything that runs it: no
//! IO, no server, so that it can be fuzzed on its own (`fuzz/`, cargo fuzz)
//! and every input it may meet is answered (read, or refused naming what is
//! wrong), never a panic.
//!
//! # Layout
//! - [`json`]: JSON read strictly (a property twice is refused).
//! - [`parameters`]: the MII operations' `Parameters`, read strictly and
//!   answered in kind.
//! - [`operation`]: the six MII operations as a type.
//! - [`bundle`]: a Bundle's kind, entries, their operations and their cost.
//! - [`upstream`]: upstream vfps's `$create-pseudonym` `Parameters`.

pub mod bundle;
pub mod json;
pub mod operation;
pub mod parameters;
pub mod upstream;
