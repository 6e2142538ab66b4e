//! What the final verification needs of the workload besides the ledger
//! (`workload.json`): the pseudonyms List returned, and the side namespaces'
//! pairs with what their lifecycle promises.

use serde::{Deserialize, Serialize};

/// What the final verification must find of a side namespace's pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideCheck {
    pub namespace: String,
    pub original: String,
    pub pseudonym: String,
    /// Resolves (live) or is `NOT_FOUND` (its delete was acknowledged).
    pub must_resolve: bool,
}

/// Everything the final verification looks at besides the ledger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Leftovers {
    /// Pseudonyms List returned: each must resolve.
    pub listed: Vec<String>,
    /// Side namespaces' pairs: resolve, or must not.
    pub side: Vec<SideCheck>,
}
