//! Repeated warnings, let through at most once per interval: an outage makes
//! every call fail the same way, and the log should say so once, with how
//! many were held back, not forty times a second.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        OnceLock,
    },
    time::{Duration, Instant},
};

pub struct Throttle {
    interval: Duration,
    /// Milliseconds since [`origin`] before which nothing passes (0: now).
    next: AtomicU64,
    held: AtomicU64,
}

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl Throttle {
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval,
            next: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// `Some(held back since the last one passed)` when this warning may be
    /// logged now; `None` (and counted) when it is held back.
    pub fn pass(&self) -> Option<u64> {
        let now = u64::try_from(origin().elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next.load(Ordering::Relaxed);
        let interval = u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX);
        if now >= next
            && self
                .next
                .compare_exchange(
                    next,
                    now.saturating_add(interval).max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.held.swap(0, Ordering::Relaxed));
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_passes_per_interval_and_the_rest_are_counted() {
        let t = Throttle::new(Duration::from_millis(200));
        assert_eq!(t.pass(), Some(0));
        for _ in 0..5 {
            assert_eq!(t.pass(), None);
        }
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(t.pass(), Some(5), "the five held back are told");
        assert_eq!(t.pass(), None);
    }
}
