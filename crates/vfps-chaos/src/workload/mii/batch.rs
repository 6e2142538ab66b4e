//! Batch Bundles in the load: 1–[`super::MAX_BUNDLE`] `$pseudonymize` entries,
//! fresh originals and about one in four an acknowledged subject, one in ten
//! meant to fail on its own (an unknown context, answered 404).
//!
//! Every other batch's fresh originals are sequential (`Mii::sequential`),
//! so an order its pseudonyms follow has something to show: every batch's
//! fresh originals' order against their pseudonyms' goes to P10.
//!
//! Only a fresh original's answer joins the sample of subjects: an
//! acknowledged subject is in it already, and a second copy would be taken
//! for a second erasure, answered 404 once the first had erased it.

use serde_json::Value;
use vfps_client::Until;

use super::{fhir, fhir::Reply, meaning, Mii, Served};
use crate::{
    checker::privacy::{Order, OrderKind},
    history::erasures::{now_micros, Bundle, Path},
    operation::Operation,
};

/// One entry of a batch as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    original: String,
    /// In an unknown context: must be answered 404.
    meant_to_fail: bool,
    /// An acknowledged subject's original (not a fresh one).
    known: bool,
}

/// What a batch-response says: each entry answered with a pseudonym (by
/// index), and what was answered against the model, for people.
#[derive(Debug, Default, PartialEq, Eq)]
struct Read {
    pseudonyms: Vec<(usize, String)>,
    wrong: Vec<String>,
}

/// Reads a batch-response's answers against the entries sent.
fn read(entries: &[Entry], answer: &Value) -> Read {
    let mut read = Read::default();
    let answers = match fhir::batch_answers(answer) {
        Some(a) if a.len() == entries.len() => a,
        _ => {
            read.wrong
                .push("the batch-response does not answer every entry in order".into());
            return read;
        }
    };
    for (i, (entry, (status, resource))) in entries.iter().zip(answers).enumerate() {
        match (entry.meant_to_fail, status) {
            (true, 404) => {}
            // 201 Created says the entry made the pseudonym: never for an
            // original acknowledged before.
            (false, 201) if entry.known => read.wrong.push(format!(
                "entry {i} (an original acknowledged before) answered 201 Created"
            )),
            (false, 200 | 201) => match fhir::value_of(&resource, "pseudonym") {
                Some(p) => read.pseudonyms.push((i, p.to_owned())),
                None => read
                    .wrong
                    .push(format!("entry {i} answered {status} without a pseudonym")),
            },
            // A database away answers an entry 503 on its own.
            (false, 503) => {}
            (true, s) => read
                .wrong
                .push(format!("entry {i} (unknown context) answered {s}, not 404")),
            (false, s) => read
                .wrong
                .push(format!("entry {i} (well-formed) answered {s}")),
        }
    }
    read
}

/// The order of a batch's fresh originals against their pseudonyms'.
fn order(second: u64, entries: &[Entry], read: &Read) -> Order {
    Order::of_originals(
        OrderKind::Bundle,
        format!("the batch Bundle of t={second}s"),
        to_remember(entries, read),
    )
}

/// The pairs a batch's answers add to the sample of subjects: fresh
/// originals only.
fn to_remember(entries: &[Entry], read: &Read) -> Vec<(String, String)> {
    read.pseudonyms
        .iter()
        .filter_map(|(i, p)| {
            let e = entries.get(*i)?;
            (!e.known).then(|| (e.original.clone(), p.clone()))
        })
        .collect()
}

impl Mii {
    /// One batch Bundle.
    pub(super) async fn batch(&self, second: u64, until: Until) -> Served {
        let size = self.bundle_size();
        let sequential = second.is_multiple_of(2);
        let mut entries: Vec<Entry> = Vec::with_capacity(size);
        for i in 0..size {
            let (original, known) = match (i % 4, self.subject()) {
                (3, Some((o, _))) => (o, true),
                _ if sequential => (self.sequential(), false),
                _ => (self.fresh(), false),
            };
            entries.push(Entry {
                original,
                meant_to_fail: i % 10 == 9,
                known,
            });
        }
        let unknown_context = format!("{}-no-such-namespace", self.namespace);
        let resources: Vec<Value> = entries
            .iter()
            .map(|e| {
                let context = if e.meant_to_fail {
                    &unknown_context
                } else {
                    &self.namespace
                };
                fhir::parameters(&[("context", context), ("original", &e.original)])
            })
            .collect();
        let sent = now_micros();
        let reply = self.post("", &fhir::batch(&resources), until).await;
        let served = self.judge(Operation::Bundle, second, &reply, &[]);
        let mut record = Bundle {
            second,
            entries: size,
            meant_to_fail: entries.iter().filter(|e| e.meant_to_fail).count(),
            meaning: meaning(&reply),
            entries_ok: 0,
            wrong: Vec::new(),
            order: None,
        };
        if let Reply::Status(200, answer) = &reply {
            let read = read(&entries, answer);
            record.entries_ok = read.pseudonyms.len();
            record.order = Some(order(second, &entries, &read));
            for (i, p) in &read.pseudonyms {
                if let Some(e) = entries.get(*i) {
                    self.answered(second, sent, Path::BundleEntry, &e.original, p);
                }
            }
            for (o, p) in to_remember(&entries, &read) {
                self.remember(o, p);
            }
            record.wrong = read.wrong;
        }
        self.log.bundle(record);
        served
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(original: &str, meant_to_fail: bool, known: bool) -> Entry {
        Entry {
            original: original.into(),
            meant_to_fail,
            known,
        }
    }

    fn answer(statuses: &[(&str, Option<&str>)]) -> Value {
        let entry: Vec<Value> = statuses
            .iter()
            .map(|(status, p)| {
                let resource = match p {
                    Some(p) => fhir::parameters(&[("original", "x"), ("pseudonym", p)]),
                    None => json!({"resourceType": "OperationOutcome"}),
                };
                json!({"response": {"status": status}, "resource": resource})
            })
            .collect();
        json!({"resourceType": "Bundle", "type": "batch-response", "entry": entry})
    }

    #[test]
    fn an_acknowledged_subject_answered_again_is_not_remembered_twice() {
        // The CI run that found it: a subject re-remembered from a batch was
        // erased twice, the second delete answered 404 (P5 and P8 failed).
        let entries = [
            entry("fresh", false, false),
            entry("known", false, true),
            entry("elsewhere", true, false),
        ];
        let got = read(
            &entries,
            &answer(&[
                ("200 OK", Some("p1")),
                ("200 OK", Some("p2")),
                ("404 Not Found", None),
            ]),
        );
        assert_eq!(got.wrong, Vec::<String>::new());
        assert_eq!(got.pseudonyms, vec![(0, "p1".into()), (1, "p2".into())]);
        assert_eq!(
            to_remember(&entries, &got),
            vec![("fresh".to_owned(), "p1".to_owned())]
        );
    }

    #[test]
    fn entries_answered_against_their_model_are_told() {
        let entries = [entry("a", true, false), entry("b", false, false)];
        let wrong = read(
            &entries,
            &answer(&[("200 OK", Some("p1")), ("500 Internal", None)]),
        )
        .wrong;
        assert_eq!(wrong.len(), 2, "{wrong:?}");
        assert!(wrong[0].contains("not 404"));
        let short = read(&entries, &answer(&[("200 OK", Some("p1"))]));
        assert!(short.wrong[0].contains("every entry in order"));
    }

    /// 201 Created says an entry made its pseudonym: a fresh original may
    /// answer it, one acknowledged before may not.
    #[test]
    fn a_known_original_answered_created_is_told() {
        let entries = [entry("fresh", false, false), entry("known", false, true)];
        let got = read(
            &entries,
            &answer(&[("201 Created", Some("p1")), ("201 Created", Some("p2"))]),
        );
        assert_eq!(got.pseudonyms, vec![(0, "p1".into())]);
        assert_eq!(got.wrong.len(), 1, "{:?}", got.wrong);
        assert!(
            got.wrong[0].contains("answered 201 Created"),
            "{:?}",
            got.wrong
        );
    }
}
