//! The operations of the workload: one kind of call each, counted apart in the
//! timeline and judged by their own properties.

use serde::{Deserialize, Serialize};

/// One kind of call the workload makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Create of a fresh original in the run's namespace.
    Create,
    /// Create of an already acknowledged original: the same pseudonym (P2 online).
    Recreate,
    /// Get of an acknowledged pseudonym: its original (P3 online).
    Get,
    /// One page of the run's namespace, continuing from the previous page.
    List,
    /// One step of a side namespace's life: create, fill, read, delete (P6).
    Churn,
    /// Invalid input, answered with its documented code.
    Bad,
    /// One call of the MII FHIR interface in the erasable namespace
    /// (`$pseudonymize`, `$get-pseudonym`, `$de-pseudonymize`), in turn.
    Mii,
    /// A FHIR batch Bundle of 1–100 entries, some meant to fail.
    Bundle,
    /// An erasure (`$delete-pseudonym` or `$anonymize-original`) of an
    /// acknowledged subject, some racing a `$pseudonymize` of the same original.
    Erase,
}

impl Operation {
    /// How many operations there are (per-operation columns and arrays).
    pub const COUNT: usize = 9;

    pub const ALL: [Operation; Operation::COUNT] = [
        Operation::Create,
        Operation::Recreate,
        Operation::Get,
        Operation::List,
        Operation::Churn,
        Operation::Bad,
        Operation::Mii,
        Operation::Bundle,
        Operation::Erase,
    ];

    /// The operations of timelines saved before the MII interface's.
    pub const BEFORE_MII: usize = 6;

    pub fn name(self) -> &'static str {
        match self {
            Operation::Create => "create",
            Operation::Recreate => "recreate",
            Operation::Get => "get",
            Operation::List => "list",
            Operation::Churn => "churn",
            Operation::Bad => "bad",
            Operation::Mii => "mii",
            Operation::Bundle => "bundle",
            Operation::Erase => "erase",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }

    /// Position in [`Operation::ALL`] (and in per-operation columns).
    pub fn index(self) -> usize {
        self as usize
    }
}
