//! A bounded in-memory cache with absolute expiration, for values that never
//! change once written (namespaces, original → pseudonym pairs). Each entry keeps
//! the instant its value was read from the store, so the caller can ask the
//! store's `Coherence` whether its namespace was deleted since; expiration counts
//! from that instant too. When full, the oldest entries go first — with one
//! expiration for every entry, the oldest is also the closest to expiring.
//!
//! A large cache is split into shards by key hash, each behind its own lock, so
//! concurrent calls for different keys rarely meet on one lock; each shard
//! evicts its own oldest entries.

use std::{
    collections::{HashMap, VecDeque},
    hash::{BuildHasher, Hash, RandomState},
    sync::Mutex,
    time::{Duration, Instant},
};

/// Most shards of one cache.
const MAX_SHARDS: usize = 16;
/// Fewest entries a shard is made for: small caches stay one exact LRU-by-age.
const MIN_SHARD_ENTRIES: usize = 16;

pub struct TtlCache<K, V> {
    shards: Box<[Shard<K, V>]>,
    hasher: RandomState,
}

struct Shard<K, V> {
    ttl: Duration,
    capacity: usize,
    inner: Mutex<Inner<K, V>>,
}

struct Inner<K, V> {
    entries: HashMap<K, (V, Instant)>,
    /// Insertion order; an item whose instant no longer matches its entry is stale.
    order: VecDeque<(K, Instant)>,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let count = (capacity / MIN_SHARD_ENTRIES).clamp(1, MAX_SHARDS);
        let shards = (0..count)
            .map(|i| Shard {
                ttl,
                // The remainder goes to the first shards: the sum is `capacity`.
                capacity: capacity / count + usize::from(i < capacity % count),
                inner: Mutex::new(Inner {
                    entries: HashMap::new(),
                    order: VecDeque::new(),
                }),
            })
            .collect();
        Self {
            shards,
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, key: &K) -> &Shard<K, V> {
        let i = self.hasher.hash_one(key) as usize % self.shards.len();
        &self.shards[i]
    }

    /// The value and the instant it was read from the store, unless expired.
    pub fn get(&self, key: &K) -> Option<(V, Instant)> {
        self.shard(key).get(key)
    }

    /// Keeps `value`, read from the store no earlier than `read_at`.
    pub fn insert(&self, key: K, value: V, read_at: Instant) {
        self.shard(&key).insert(key, value, read_at);
    }

    pub fn remove(&self, key: &K) {
        if let Ok(mut inner) = self.shard(key).inner.lock() {
            inner.entries.remove(key);
        }
    }

    /// Drops every entry whose key matches.
    pub fn remove_where(&self, matches: impl Fn(&K) -> bool) {
        for shard in self.shards.iter() {
            if let Ok(mut inner) = shard.inner.lock() {
                inner.entries.retain(|k, _| !matches(k));
            }
        }
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.inner.lock().map_or(0, |i| i.entries.len()))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Shard<K, V> {
    fn get(&self, key: &K) -> Option<(V, Instant)> {
        let inner = self.inner.lock().ok()?;
        let (value, at) = inner.entries.get(key)?;
        (at.elapsed() < self.ttl).then(|| (value.clone(), *at))
    }

    fn insert(&self, key: K, value: V, read_at: Instant) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.entries.insert(key.clone(), (value, read_at));
        inner.order.push_back((key, read_at));
        while inner.entries.len() > self.capacity {
            let Some((old, at)) = inner.order.pop_front() else {
                break;
            };
            if inner.entries.get(&old).is_some_and(|(_, t)| *t == at) {
                inner.entries.remove(&old);
            }
        }
        // Removals leave stale order items behind; keep the queue bounded.
        if inner.order.len() > 2 * self.capacity {
            let Inner { entries, order } = &mut *inner;
            order.retain(|(k, at)| entries.get(k).is_some_and(|(_, t)| t == at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_the_oldest_go_when_full() {
        let c = TtlCache::new(Duration::from_millis(50), 3);
        for i in 0..5 {
            c.insert(i, i * 10, Instant::now());
        }
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&0), None, "evicted, oldest first");
        assert_eq!(c.get(&1), None);
        assert_eq!(c.get(&4).map(|(v, _)| v), Some(40));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(c.get(&4), None, "expired");
    }

    #[test]
    fn removal_and_reinsertion_keep_the_bound() {
        let c = TtlCache::new(Duration::from_secs(60), 2);
        for round in 0..100 {
            c.insert("a", round, Instant::now());
            c.remove(&"a");
            c.insert("b", round, Instant::now());
        }
        c.insert("c", 0, Instant::now());
        let read_at = Instant::now();
        c.insert("d", 0, read_at);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&"b"), None, "b is older than c and d");
        assert_eq!(c.get(&"d"), Some((0, read_at)));
        c.remove_where(|k| *k == "d");
        assert_eq!(c.get(&"d"), None);
        assert!(!c.is_empty());
    }

    #[test]
    fn a_large_cache_is_sharded_and_keeps_its_bound() {
        let c = TtlCache::new(Duration::from_secs(60), 1000);
        assert_eq!(c.shards.len(), MAX_SHARDS);
        assert_eq!(c.shards.iter().map(|s| s.capacity).sum::<usize>(), 1000);
        for i in 0..5000 {
            c.insert(i, i, Instant::now());
        }
        assert!(c.len() <= 1000 && c.len() > 900, "{}", c.len());
        assert_eq!(c.get(&4999).map(|(v, _)| v), Some(4999), "the newest stays");
        c.remove_where(|k| k % 2 == 0);
        assert_eq!(c.get(&4998), None);
        assert_eq!(
            TtlCache::<u32, u32>::new(Duration::ZERO, 20).shards.len(),
            1
        );
    }
}
