//! The ledger: every acknowledged (`ok`) and every `indeterminate` Create — the
//! pairs the service promised, or may have promised. It is appended to
//! `ledger.jsonl` as it grows (flushed at least every 200 ms), so a crashed
//! generator loses almost nothing and a saved run can be re-checked.

use std::{
    io::{BufRead, Write},
    path::Path,
    sync::Mutex,
    time::Duration,
};

use serde::{Deserialize, Serialize};

use super::ParseError;

/// Outcome class of a ledger entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Indeterminate,
}

/// One Create the service acknowledged, or may have performed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Reservoir slot (reservoir mode) or sequence number.
    pub slot: u64,
    pub second: u64,
    pub status: Status,
    /// Synthetic original the harness generated.
    pub original: String,
    /// The pseudonym returned (for `ok`).
    pub pseudonym: Option<String>,
    /// Final status code of an indeterminate call.
    pub code: Option<String>,
    /// When the answer came (Unix milliseconds): the failover breakdown's
    /// first acknowledged write. Absent in ledgers of older harnesses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acked_unix_ms: Option<u64>,
}

/// Ledger in memory plus its append-only file.
pub struct Ledger {
    inner: Mutex<LedgerInner>,
}

struct LedgerInner {
    /// `None`: keep everything. `Some(n)`: Algorithm R reservoir of n.
    capacity: Option<usize>,
    entries: Vec<Entry>,
    /// Entries offered to the ledger so far (reservoir denominator).
    seen: u64,
    /// Acknowledged entries offered so far (reservoir or not).
    ok_seen: u64,
    /// Acknowledged entries written to the file (all of them, or the ones a
    /// reservoir kept, replaced ones included).
    ok_written: u64,
    file: std::io::BufWriter<std::fs::File>,
    last_flush: std::time::Instant,
}

impl Ledger {
    pub fn create(path: &Path, capacity: usize) -> std::io::Result<Self> {
        let file = std::fs::File::create(path)?;
        Ok(Self {
            inner: Mutex::new(LedgerInner {
                capacity: (capacity > 0).then_some(capacity),
                entries: Vec::new(),
                seen: 0,
                ok_seen: 0,
                ok_written: 0,
                file: std::io::BufWriter::new(file),
                last_flush: std::time::Instant::now(),
            }),
        })
    }

    /// Records an entry (Algorithm R in reservoir mode) and appends it to disk.
    pub fn record(
        &self,
        second: u64,
        status: Status,
        original: String,
        pseudonym: Option<String>,
        code: Option<String>,
    ) {
        let Ok(mut l) = self.inner.lock() else { return };
        l.seen += 1;
        if status == Status::Ok {
            l.ok_seen += 1;
        }
        let slot = match l.capacity {
            None => Some(l.entries.len()),
            Some(cap) if l.entries.len() < cap => Some(l.entries.len()),
            Some(_) => {
                let j = rand::random_range(0..l.seen) as usize;
                (j < l.entries.len()).then_some(j)
            }
        };
        let Some(slot) = slot else { return };
        let entry = Entry {
            slot: slot as u64,
            second,
            status,
            original,
            pseudonym,
            code,
            acked_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .and_then(|d| u64::try_from(d.as_millis()).ok()),
        };
        if let Ok(line) = serde_json::to_string(&entry) {
            if writeln!(l.file, "{line}").is_ok() && status == Status::Ok {
                l.ok_written += 1;
            }
        }
        if slot == l.entries.len() {
            l.entries.push(entry);
        } else {
            l.entries[slot] = entry;
        }
        if l.last_flush.elapsed() >= Duration::from_millis(200) {
            let _ = l.file.flush();
            l.last_flush = std::time::Instant::now();
        }
    }

    /// Acknowledged Creates recorded, whether or not a reservoir kept them.
    pub fn ok_seen(&self) -> u64 {
        self.inner.lock().map(|l| l.ok_seen).unwrap_or(0)
    }

    /// Acknowledged entries written to the file: what a re-check must read back.
    pub fn ok_written(&self) -> u64 {
        self.inner.lock().map(|l| l.ok_written).unwrap_or(0)
    }

    pub fn flush(&self) {
        if let Ok(mut l) = self.inner.lock() {
            let _ = l.file.flush();
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map(|l| l.entries.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.inner
            .lock()
            .map(|l| l.entries.clone())
            .unwrap_or_default()
    }
}

/// A saved ledger as read back.
#[derive(Debug)]
pub struct Saved {
    /// The last line written for each slot.
    pub entries: Vec<Entry>,
    /// Acknowledged lines read, replaced ones included: fewer than were written
    /// means the file lost some.
    pub ok_lines: u64,
}

/// Reads a saved ledger: the last line written for each slot wins.
pub fn load_ledger(path: &Path) -> Result<Saved, ParseError> {
    let io = |e: std::io::Error| ParseError(format!("{}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(io)?;
    let mut by_slot = std::collections::BTreeMap::new();
    let mut ok_lines = 0;
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Entry>(&line) {
            Ok(e) => {
                ok_lines += u64::from(e.status == Status::Ok);
                by_slot.insert(e.slot, e);
            }
            // A crash can cut the last line short; anything else is corruption.
            Err(e) => {
                return Err(ParseError(format!(
                    "{}: line {} is not a ledger entry: {e}",
                    path.display(),
                    n + 1
                )))
            }
        }
    }
    Ok(Saved {
        entries: by_slot.into_values().collect(),
        ok_lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservoir_keeps_capacity_and_the_file_replays_it() {
        let dir = vfps_testkit::scratch_dir("ledger");
        let path = dir.join("ledger.jsonl");
        let l = Ledger::create(&path, 10).unwrap();
        for i in 0..1000 {
            l.record(
                i / 100,
                Status::Ok,
                format!("o{i}"),
                Some(format!("p{i}")),
                None,
            );
        }
        l.flush();
        assert_eq!(l.len(), 10);
        let saved = load_ledger(&path).unwrap();
        assert_eq!(saved.ok_lines, l.ok_written());
        let mut saved = saved.entries;
        let mut mem = l.entries();
        saved.sort_by_key(|e| e.slot);
        mem.sort_by_key(|e| e.slot);
        assert_eq!(saved, mem);
        assert!(
            mem.iter().any(|e| e.second > 0),
            "later entries replace early ones"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
