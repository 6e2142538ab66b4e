//! One-node commits in PostgreSQL's logs: a commit whose wait for the
//! synchronous standby was cancelled logs "canceling wait for synchronous
//! replication" (with the detail "The transaction has already committed
//! locally, but might not have been replicated to the standby"). That commit
//! existed on one node only; a failover right then loses it. Found in the text
//! logs of the local platform and in CloudNativePG's JSON instance logs alike,
//! by the phrase and the first timestamp on the line.

use crate::history::failover::{timestamp, unix_seconds};

/// The phrases that mark a one-node commit.
const PHRASES: [&str; 2] = [
    "canceling wait for synchronous replication",
    "committed locally",
];

/// `(seconds into the load window, instance)` of every one-node commit in
/// `text`. `instance` names the log; a line that starts `[pod/<name>/…]` (as
/// `kubectl logs --prefix` writes) names its own.
pub fn one_node_commits(text: &str, instance: &str, load_start_unix: f64) -> Vec<(f64, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if !PHRASES.iter().any(|p| line.contains(p)) {
            continue;
        }
        let Some(stamp) = timestamp(line) else {
            continue;
        };
        let who = pod_prefix(line).unwrap_or(instance).to_owned();
        // The warning and its detail are one event.
        if !found.iter().any(|(w, s)| *w == who && *s == stamp) {
            found.push((who, stamp));
        }
    }
    found
        .into_iter()
        .filter_map(|(who, stamp)| Some((unix_seconds(&stamp)? - load_start_unix, who)))
        .collect()
}

fn pod_prefix(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("[pod/")?;
    rest.split('/').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_logs_give_one_event_per_commit_on_the_load_clock() {
        let start = unix_seconds("2026-11-30 13:13:00").unwrap();
        let text = "\
2026-11-30 13:13:38.808 UTC [13668] WARNING:  canceling wait for synchronous replication due to user request
2026-11-30 13:13:38.808 UTC [13668] DETAIL:  The transaction has already committed locally, but might not have been replicated to the standby.
2026-11-30 13:13:40.000 UTC [1] LOG:  checkpoint starting
";
        let found = one_node_commits(text, "db-a", start);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!((found[0].0 - 38.808).abs() < 1e-6);
        assert_eq!(found[0].1, "db-a");
        let json = r#"[pod/vfps-db-2/postgres] {"level":"info","ts":"2026-11-30T13:14:00.5Z","msg":"record","record":{"error_severity":"WARNING","message":"canceling wait for synchronous replication due to user request"}}"#;
        let found = one_node_commits(json, "cnpg", start);
        assert_eq!(found, vec![(60.5, "vfps-db-2".to_owned())]);
        assert!(one_node_commits("nothing to see", "x", start).is_empty());
    }

    #[test]
    fn civil_dates_convert_to_unix_seconds() {
        assert_eq!(unix_seconds("1970-01-01 00:00:00"), Some(0.0));
        assert_eq!(unix_seconds("2000-03-01 00:00:01.5"), Some(951_868_801.5));
    }
}
