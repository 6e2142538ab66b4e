//! Checks an uploaded input before its job is queued, so that what can be
//! known from the file's size and its first record is answered to the caller
//! at once (too large, empty, an unknown column, too many columns, a first
//! line over the limit, an undecodable header), and resolves the job's
//! mappings into the [`JobPlan`] every runner follows.

use bytes::BytesMut;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::{
    csv::{Scanned, Scanner},
    encoding::Encoding,
    spec::{Plan, Spec},
    storage::{input_key, ObjectStore, StorageError},
};

/// The limits on an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `CsvProcessing__MaxFileSize`.
    pub max_file_bytes: u64,
    /// `CsvProcessing__MaxColumns`.
    pub max_columns: usize,
    /// `CsvProcessing__MaxLineLength`: the longest record, in bytes.
    pub max_record_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_file_bytes: 10 * 1024 * 1024 * 1024,
            max_columns: 1000,
            max_record_bytes: 1024 * 1024,
        }
    }
}

/// How every runner of a job reads its input: fixed when it is queued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPlan {
    pub plan: Plan,
    /// The namespaces' incarnations (by slot) when the job was queued: one
    /// deleted or created anew since fails the job.
    pub namespace_uids: Vec<i64>,
    /// The encoding the file is in (a UTF-16 byte order mark says which).
    pub encoding: Encoding,
    /// Bytes of the byte order mark, copied to the output as they came.
    pub bom_bytes: u64,
}

impl JobPlan {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(raw: &str) -> Result<Self, String> {
        serde_json::from_str(raw).map_err(|e| format!("the job's plan is not valid: {e}"))
    }
}

/// Why an input cannot be queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    /// The caller's file or spec: a message naming the problem.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Storage(#[from] StorageError),
}

/// Reads the size and the first record of job `job_id`'s input.
/// `namespace_uids` are the job's namespaces' uids, by slot.
pub async fn inspect(
    store: &dyn ObjectStore,
    job_id: &str,
    spec: &Spec,
    namespace_uids: Vec<i64>,
    limits: Limits,
) -> Result<(JobPlan, u64), InspectError> {
    let invalid = |m: String| InspectError::Invalid(m);
    let key = input_key(job_id);
    let size = store
        .size(&key)
        .await?
        .ok_or_else(|| invalid("the input file has not been uploaded".into()))?;
    if size == 0 {
        return Err(invalid("the input file is empty".into()));
    }
    if size > limits.max_file_bytes {
        return Err(invalid(format!(
            "the input file is {size} bytes, more than the limit of {} bytes (CsvProcessing__MaxFileSize)",
            limits.max_file_bytes
        )));
    }
    let mut stream = store.read(&key, 0).await?;
    let mut buf = BytesMut::new();
    let want = limits.max_record_bytes + 4;
    let mut eof = false;
    while buf.len() < want && !eof {
        match stream.next().await {
            Some(chunk) => buf.extend_from_slice(&chunk?),
            None => eof = true,
        }
    }
    let (encoding, bom) = spec.encoding.detect(&buf).map_err(invalid)?;
    let _ = buf.split_to(bom);
    let mut scanner = Scanner::new(encoding, spec.delimiter, limits.max_record_bytes, 1);
    let first = match scanner.next(&mut buf, eof) {
        Ok(Scanned::Record(r)) => r,
        Ok(Scanned::End) => return Err(invalid("the input file holds no records".into())),
        Ok(Scanned::NeedMore) => {
            return Err(invalid(format!(
                "line 1: a record is longer than {} bytes (CsvProcessing__MaxLineLength)",
                limits.max_record_bytes
            )))
        }
        Err(e) => return Err(invalid(e.to_string())),
    };
    if first.broken_quoting {
        return Err(invalid(
            "line 1: the first record's quoting is broken".into(),
        ));
    }
    let fields = first.fields.len();
    if fields > limits.max_columns {
        return Err(invalid(format!(
            "line 1: {fields} columns, more than the limit of {} (CsvProcessing__MaxColumns)",
            limits.max_columns
        )));
    }
    let header = if spec.has_header {
        let names = (0..fields)
            .map(|f| first.text(f, encoding))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("line 1 (the header): {e}")))?;
        Some(names)
    } else {
        None
    };
    let plan = spec.plan(header.as_deref(), fields).map_err(invalid)?;
    Ok((
        JobPlan {
            plan,
            namespace_uids,
            encoding,
            bom_bytes: bom as u64,
        },
        size,
    ))
}
