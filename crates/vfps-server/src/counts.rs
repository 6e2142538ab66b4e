//! The per-namespace pseudonym gauge at bounded cost.
//!
//! A full `count(*)` per namespace scans every row; run every minute on every
//! replica, it is the heaviest thing a quiet deployment does. Instead each
//! replica counts everything once, at its first refresh, and from then on only
//! the rows created since the last refresh (a range of the `(namespace,
//! created_at)` index per namespace). A row's `created_at` is taken before its
//! batch commits, so the window that is added to the totals ends
//! [`SETTLE_MARGIN`] ago; the rows newer than that are counted afresh each time
//! and shown on top. A namespace that is new, or was deleted and created again
//! since the last refresh, is counted from its start once. (A commit that took
//! longer than the margin after its `created_at` is missed until the process
//! restarts: the gauge is an operator's figure, not an exact one.)

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, SystemTime},
};

use vfps_core::{Error, NamespaceName, NamespaceUid};
use vfps_store::{CreatedCount, Store};

/// Rows newer than this may still be committed with an older `created_at`.
pub const SETTLE_MARGIN: Duration = Duration::from_secs(120);

/// Running totals per namespace incarnation.
#[derive(Default)]
pub struct PseudonymCounts {
    /// Pseudonyms with `created_at <= watermark`, by namespace.
    settled: HashMap<String, (NamespaceUid, i64)>,
    /// `None` until the first refresh.
    watermark: Option<SystemTime>,
}

impl PseudonymCounts {
    /// Brings the totals up to now; answers the current count per namespace.
    pub async fn refresh(&mut self, store: &Arc<dyn Store>) -> Result<Vec<(String, i64)>, Error> {
        self.refresh_at(store, SystemTime::now()).await
    }

    async fn refresh_at(
        &mut self,
        store: &Arc<dyn Store>,
        now: SystemTime,
    ) -> Result<Vec<(String, i64)>, Error> {
        let until = now.checked_sub(SETTLE_MARGIN).unwrap_or(now);
        let window = store
            .count_created(None, self.watermark, Some(until))
            .await?;
        let mut settled = HashMap::with_capacity(window.len());
        for c in window {
            let before = match (self.watermark, self.settled.get(&c.namespace)) {
                // The first refresh counted from the start.
                (None, _) => 0,
                (Some(_), Some((uid, n))) if *uid == c.uid => *n,
                // New or recreated since the last refresh: from its start.
                (Some(_), _) => {
                    let total = Self::from_start(store, &c, until).await?;
                    settled.insert(c.namespace, (c.uid, total));
                    continue;
                }
            };
            settled.insert(c.namespace, (c.uid, before + c.count));
        }
        self.settled = settled;
        self.watermark = Some(until);
        let recent = store.count_created(None, Some(until), None).await?;
        Ok(recent
            .into_iter()
            .map(|c| {
                let base = self
                    .settled
                    .get(&c.namespace)
                    .filter(|(uid, _)| *uid == c.uid)
                    .map_or(0, |(_, n)| *n);
                (c.namespace, base + c.count)
            })
            .collect())
    }

    async fn from_start(
        store: &Arc<dyn Store>,
        c: &CreatedCount,
        until: SystemTime,
    ) -> Result<i64, Error> {
        let name = NamespaceName::parse(&c.namespace)?;
        Ok(store
            .count_created(Some(&name), None, Some(until))
            .await?
            .into_iter()
            .find(|found| found.uid == c.uid)
            .map_or(0, |found| found.count))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use vfps_core::{now_micros, GenerationMethod, Namespace, NamespaceSettings, OriginalValue};
    use vfps_store::{sqlite::SqliteStore, Candidate};

    use super::*;

    fn namespace(name: &str, uid: i64) -> Namespace {
        let now = now_micros();
        Namespace {
            name: NamespaceName::parse(name).unwrap(),
            uid: NamespaceUid(uid),
            description: String::new(),
            settings: NamespaceSettings::parse(
                GenerationMethod::FullRandomHexEncoded,
                16,
                None,
                None,
            )
            .unwrap(),
            created_at: now,
            last_updated_at: now,
        }
    }

    async fn add(store: &Arc<dyn Store>, ns: &Namespace, from: usize, to: usize, at: SystemTime) {
        let batch: Vec<Candidate> = (from..to)
            .map(|i| Candidate {
                namespace: ns.name.clone(),
                namespace_uid: ns.uid,
                original: OriginalValue::parse(&format!("o{i}")).unwrap(),
                pseudonym: format!("p{i}"),
                created_at: at,
                sealed: None,
                moving: false,
            })
            .collect();
        store.upsert_pseudonyms(&batch).await.unwrap();
    }

    #[tokio::test]
    async fn totals_grow_by_windows_and_restart_with_a_new_incarnation() {
        let dir = std::env::temp_dir().join(format!("vfps-counts-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let sqlite = SqliteStore::open(&dir.join("db.sqlite")).unwrap();
        let store: Arc<dyn Store> = Arc::new(sqlite);
        let t0 = SystemTime::now();
        let a = namespace("a", 1);
        store.create_namespace(&a).await.unwrap();
        add(&store, &a, 0, 3, t0).await;

        let mut counts = PseudonymCounts::default();
        // Nothing is settled yet; the three are recent.
        assert_eq!(
            counts.refresh_at(&store, t0).await.unwrap(),
            vec![("a".to_owned(), 3)]
        );
        let later = t0 + SETTLE_MARGIN * 2;
        add(&store, &a, 3, 5, later).await;
        assert_eq!(
            counts.refresh_at(&store, later).await.unwrap(),
            vec![("a".to_owned(), 5)]
        );
        assert_eq!(counts.settled["a"], (NamespaceUid(1), 3));
        // Settled rows are not counted again.
        let much_later = later + SETTLE_MARGIN * 2;
        assert_eq!(
            counts.refresh_at(&store, much_later).await.unwrap(),
            vec![("a".to_owned(), 5)]
        );
        // Deleted and created again (another uid) between two refreshes.
        store.delete_namespace(&a.name, Some(a.uid)).await.unwrap();
        let a2 = namespace("a", 2);
        store.create_namespace(&a2).await.unwrap();
        add(&store, &a2, 0, 1, t0).await;
        assert_eq!(
            counts
                .refresh_at(&store, much_later + SETTLE_MARGIN)
                .await
                .unwrap(),
            vec![("a".to_owned(), 1)],
            "the old incarnation's total must not carry over"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
