//! P8 in the database itself: after the run, every instance (the primary and
//! both standbys, over their Unix sockets) is asked which rows of the
//! erasable namespace hold an erased pseudonym, so an erasure undone below
//! the service (a failover that lost it) shows even where no replica would
//! answer it. Multi-pseudonym namespaces' rows (`multi_pseudonyms`) are
//! asked alike, for the acknowledged pseudonyms of erased multi originals.

use super::{Local, ZONES};
use crate::history::erasures::{DatabaseRows, ErasureHistory};

/// Whether `s` can stand in an SQL literal as it is (pseudonyms are base64url
/// or hex, namespace names letters, digits and dashes): anything else is
/// left out rather than quoted.
fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// One table's rows of `pseudonyms` in `namespace`, if any can be asked.
fn select(table: &str, namespace: &str, pseudonyms: &[&str]) -> Option<String> {
    let pseudonyms: Vec<&str> = pseudonyms.iter().copied().filter(|p| plain(p)).collect();
    if pseudonyms.is_empty() || !plain(namespace) {
        return None;
    }
    Some(format!(
        "SELECT pseudonym_value || E'\\t' || original_value FROM {table} \
         WHERE namespace = '{}' AND pseudonym_value IN ({})",
        namespace,
        pseudonyms
            .iter()
            .map(|p| format!("'{p}'"))
            .collect::<Vec<_>>()
            .join(",")
    ))
}

/// The query: erased pseudonyms' rows, pseudonym and original tab-separated
/// (the erasable namespace's, then the multi-pseudonym namespace's).
pub fn query(history: &ErasureHistory) -> Option<String> {
    let single: Vec<&str> = history
        .erasures
        .iter()
        .map(|e| e.pseudonym.as_str())
        .collect();
    let multi = history.multi.as_ref().and_then(|m| {
        let erased = crate::checker::multi::erased_pseudonyms(m);
        let pseudonyms: Vec<&str> = erased.iter().map(|(p, _, _)| *p).collect();
        select("multi_pseudonyms", &m.namespace, &pseudonyms)
    });
    let parts: Vec<String> = select("pseudonyms", &history.namespace, &single)
        .into_iter()
        .chain(multi)
        .collect();
    (!parts.is_empty()).then(|| parts.join(" UNION ALL "))
}

impl Local {
    /// Every instance's rows of the erased pseudonyms (`None`: the run erased
    /// nothing to ask about).
    pub async fn erased_rows(&self, history: &ErasureHistory) -> Option<Vec<DatabaseRows>> {
        let sql = query(history)?;
        let mut out = Vec::new();
        for zone in ZONES {
            let instance = format!("db-{zone}");
            out.push(
                match self
                    .psql(zone, "vfps", &sql, std::time::Duration::from_secs(20))
                    .await
                {
                    Ok(text) => DatabaseRows {
                        instance,
                        rows: text
                            .lines()
                            .filter_map(|l| l.split_once('\t'))
                            .map(|(p, o)| (p.to_owned(), o.to_owned()))
                            .collect(),
                        error: None,
                    },
                    Err(e) => DatabaseRows {
                        instance,
                        rows: Vec::new(),
                        error: Some(format!("{e:#}")),
                    },
                },
            );
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::erasures::{Erasure, ErasureKind, Meaning};

    #[test]
    fn only_plain_values_go_into_the_query() {
        let erasure = |p: &str| Erasure {
            second: 0,
            kind: ErasureKind::Delete,
            original: "o".into(),
            pseudonym: p.into(),
            sent_micros: 0,
            answered_micros: 0,
            meaning: Meaning::Acknowledged,
            answer: "200".into(),
            raced: false,
        };
        let mut h = ErasureHistory {
            namespace: "resilience-erasable".into(),
            erasures: vec![
                erasure("W86Y9z_-a"),
                erasure("x'; DROP TABLE pseudonyms; --"),
            ],
            ..ErasureHistory::default()
        };
        let q = query(&h).unwrap();
        assert!(q.contains("IN ('W86Y9z_-a')"), "{q}");
        assert!(!q.contains("DROP"));
        h.namespace = "a'b".into();
        assert_eq!(query(&h), None);
    }

    #[test]
    fn the_erased_multi_pseudonyms_are_asked_of_their_own_table() {
        use crate::history::multi::{MultiCreate, MultiErasure, MultiHistory};
        let mut m = MultiHistory::new("resilience-multi");
        m.created(MultiCreate {
            second: 0,
            sent_micros: 0,
            answered_micros: 1,
            original: "o".into(),
            count: 2,
            meaning: Meaning::Acknowledged,
            answer: "201".into(),
            pseudonyms: vec!["m1".into(), "m'2".into()],
        });
        m.erased(MultiErasure {
            second: 0,
            kind: ErasureKind::Anonymize,
            original: "o".into(),
            sent_micros: 5,
            answered_micros: 6,
            meaning: Meaning::Unknown,
            answer: "timeout".into(),
        });
        let h = ErasureHistory {
            namespace: "resilience-erasable".into(),
            multi: Some(m),
            ..ErasureHistory::default()
        };
        let q = query(&h).unwrap();
        assert!(
            q.ends_with("FROM multi_pseudonyms WHERE namespace = 'resilience-multi' AND pseudonym_value IN ('m1')"),
            "{q}"
        );
        assert!(!q.contains("UNION"), "{q}");
    }
}
