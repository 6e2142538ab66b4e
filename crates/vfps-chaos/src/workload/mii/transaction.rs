//! Transaction Bundles in the load: 1–[`MAX_BUNDLE`] `$pseudonymize`
//! entries, fresh originals and about one in four an acknowledged subject;
//! every [`FAILING_EVERY`]th transaction carries one entry meant to fail it,
//! in turn an unknown namespace (404) and an entry without its original
//! (400).
//!
//! What the answer says is judged here: an acknowledged transaction answers
//! every entry in order, a refused one names its failing entry. Whether it
//! was applied whole or not at all is asked at verification (its fresh
//! originals looked up, `verify`) and judged by `checker::transaction`.

use rand::Rng;
use serde_json::Value;
use vfps_client::Until;

use super::{fhir, fhir::Reply, meaning, Mii, Served, MAX_BUNDLE};
use crate::{
    history::erasures::{now_micros, Failing, FailingEntry, Meaning, NewEntry, Path, Transaction},
    operation::Operation,
};

/// Every this many transactions, one carries an entry meant to fail it.
const FAILING_EVERY: usize = 3;

/// One entry of a transaction as sent.
enum Sent {
    /// A fresh original: its index in [`Transaction::new`].
    New(usize),
    /// An acknowledged subject's original.
    Known(String),
    /// The entry meant to fail the transaction.
    Failing,
}

impl Mii {
    /// The size of the next Bundle, 1–[`MAX_BUNDLE`].
    pub(super) fn bundle_size(&self) -> usize {
        self.state
            .lock()
            .map(|mut s| s.rng.random_range(1..=MAX_BUNDLE))
            .unwrap_or(1)
    }

    /// The `turn`th transaction Bundle.
    pub(super) async fn transaction(&self, turn: usize, second: u64, until: Until) -> Served {
        let size = self.bundle_size();
        let meant_to_fail = turn.is_multiple_of(FAILING_EVERY).then(|| FailingEntry {
            index: self
                .state
                .lock()
                .map(|mut s| s.rng.random_range(0..size))
                .unwrap_or(0),
            how: if (turn / FAILING_EVERY).is_multiple_of(2) {
                Failing::UnknownNamespace
            } else {
                Failing::Malformed
            },
        });
        let unknown_context = format!("{}-no-such-namespace", self.namespace);
        let mut sent_entries = Vec::with_capacity(size);
        let mut resources = Vec::with_capacity(size);
        let mut new = Vec::new();
        for i in 0..size {
            if let Some(f) = meant_to_fail.filter(|f| f.index == i) {
                let original = self.fresh();
                resources.push(match f.how {
                    Failing::UnknownNamespace => {
                        fhir::parameters(&[("context", &unknown_context), ("original", &original)])
                    }
                    Failing::Malformed => fhir::parameters(&[("context", &self.namespace)]),
                });
                sent_entries.push(Sent::Failing);
                continue;
            }
            let original = match (i % 4, self.subject()) {
                (3, Some((o, _))) => {
                    sent_entries.push(Sent::Known(o.clone()));
                    o
                }
                _ => {
                    let o = self.fresh();
                    sent_entries.push(Sent::New(new.len()));
                    new.push(NewEntry {
                        original: o.clone(),
                        pseudonym: None,
                    });
                    o
                }
            };
            resources.push(fhir::parameters(&[
                ("context", &self.namespace),
                ("original", &original),
            ]));
        }
        let sent = now_micros();
        let (reply, unavailable_before) = self
            .post_tracked("", &fhir::transaction(&resources), until)
            .await;
        let allowed: Vec<u16> = meant_to_fail.map(|f| f.how.status()).into_iter().collect();
        let served = self.judge(Operation::Bundle, second, &reply, &allowed);
        let mut record = Transaction {
            second,
            sent_micros: sent,
            entries: size,
            meant_to_fail,
            // A refusal after a 503: the earlier attempt may have applied it.
            meaning: match meaning(&reply) {
                Meaning::Refused if unavailable_before => Meaning::Unknown,
                m => m,
            },
            answer: match &reply {
                Reply::Status(s, _) => s.to_string(),
                Reply::Lost(why) | Reply::NotSent(why) => why.clone(),
            },
            new,
            wrong: Vec::new(),
        };
        match (&reply, meant_to_fail) {
            (Reply::Status(200, answer), None) => {
                self.acknowledged(&mut record, &sent_entries, answer, second)
            }
            (Reply::Status(200, _), Some(f)) => record.wrong.push(format!(
                "acknowledged although its entry {} ({:?}) must fail it",
                f.index, f.how
            )),
            (Reply::Status(s, outcome), Some(f)) if *s == f.how.status() => {
                match fhir::failing_entry(outcome) {
                    Some(i) if i == f.index => {}
                    named => record.wrong.push(format!(
                        "refused {s} naming entry {named:?}, not its failing entry {}",
                        f.index
                    )),
                }
            }
            (Reply::Status(s, _), Some(f)) if *s < 500 => record.wrong.push(format!(
                "answered {s}, not {} for its entry {} ({:?})",
                f.how.status(),
                f.index,
                f.how
            )),
            // A well-formed transaction refused is an innocent failure (P5,
            // counted by `judge`); a 5xx or a lost answer is unknown.
            _ => {}
        }
        self.log.transaction(record);
        served
    }

    /// An acknowledged transaction's answers: every entry answered 200 with
    /// a pseudonym, in order; each recorded like a single call's.
    fn acknowledged(
        &self,
        record: &mut Transaction,
        sent_entries: &[Sent],
        answer: &Value,
        second: u64,
    ) {
        let answers = match fhir::batch_answers(answer) {
            Some(a)
                if a.len() == sent_entries.len() && answer["type"] == "transaction-response" =>
            {
                a
            }
            _ => {
                record
                    .wrong
                    .push("the transaction-response does not answer every entry in order".into());
                return;
            }
        };
        for (i, (entry, (status, resource))) in sent_entries.iter().zip(answers).enumerate() {
            let Some(pseudonym) =
                fhir::value_of(&resource, "pseudonym").filter(|_| status == 200 || status == 201)
            else {
                record.wrong.push(format!(
                    "entry {i} answered {status} without a pseudonym in an acknowledged transaction"
                ));
                continue;
            };
            let original = match entry {
                Sent::New(k) => match record.new.get_mut(*k) {
                    Some(n) => {
                        n.pseudonym = Some(pseudonym.to_owned());
                        self.remember(n.original.clone(), pseudonym.to_owned());
                        n.original.clone()
                    }
                    None => continue,
                },
                Sent::Known(o) => o.clone(),
                Sent::Failing => continue,
            };
            self.answered(
                second,
                record.sent_micros,
                Path::TransactionEntry,
                &original,
                pseudonym,
            );
        }
    }
}
