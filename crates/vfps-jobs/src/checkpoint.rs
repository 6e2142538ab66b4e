//! What a runner records at each checkpoint, and what a takeover records.
//!
//! A checkpoint is everything the next runner needs to go on exactly where
//! this one stopped: the input offset and line of the next record, the counts
//! so far, and where the output written so far is — whole parts of the
//! multipart upload, and the durable segments of the part being filled.

use serde::{Deserialize, Serialize};

use crate::transform::Counters;

/// One uploaded part of the output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    pub number: u32,
    pub etag: String,
    pub bytes: u64,
}

/// One durable piece of the part being filled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentRecord {
    pub key: String,
    pub bytes: u64,
}

/// A job's progress, as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Byte offset in the input of the next record to read.
    pub offset: u64,
    /// The physical line that record starts on (1-based).
    pub line: u64,
    pub counters: Counters,
    /// The output's multipart upload; `None` before the first checkpoint.
    pub upload_id: Option<String>,
    pub parts: Vec<PartRecord>,
    /// In order; their concatenation is the output since the last part.
    pub segments: Vec<SegmentRecord>,
    /// Output bytes written so far (parts and segments).
    pub output_bytes: u64,
    /// The whole input was read and every part uploaded: only the upload's
    /// completion is left.
    pub done: bool,
}

impl Checkpoint {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(raw: &str) -> Result<Self, String> {
        serde_json::from_str(raw).map_err(|e| format!("the job's checkpoint is not valid: {e}"))
    }
}

/// A runner's resumption of a job another runner (or an earlier process)
/// had run: where it went on, against what that runner had recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Takeover {
    /// Microseconds since the epoch.
    pub at_micros: i64,
    pub epoch: i64,
    pub runner: String,
    /// Rows of the last checkpoint recorded before the takeover.
    pub checkpointed_rows: u64,
    /// Rows the new runner resumed after (equal to `checkpointed_rows`, unless
    /// it restarted from the beginning).
    pub resumed_rows: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_survives_json() {
        let c = Checkpoint {
            offset: 42,
            line: 3,
            upload_id: Some("u".into()),
            parts: vec![PartRecord {
                number: 1,
                etag: "\"e\"".into(),
                bytes: 9,
            }],
            ..Checkpoint::default()
        };
        assert_eq!(Checkpoint::from_json(&c.to_json()).unwrap(), c);
        assert!(Checkpoint::from_json("{").is_err());
    }
}
