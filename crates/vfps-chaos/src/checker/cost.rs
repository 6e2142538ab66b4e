//! The harness's own cost as a caveat on the verdict: outages measured while
//! the harness took a large share of the machine are not the service's alone
//! (a probe's Chromium starving PostgreSQL and Patroni of CPU lengthens every
//! failover). A caveat is shown with the verdict, never a failure of the
//! service's properties.

use crate::history::cpu::{CpuCost, Part};

/// The most of the machine the whole harness may take without a caveat.
pub const MAX_HARNESS_SHARE: f64 = 0.15;
/// The most of the machine the browser probe may take without a caveat.
pub const MAX_PROBE_SHARE: f64 = 0.05;

/// The caveats a run's cost puts on its verdict (none when within bounds).
pub fn caveats(cost: &CpuCost) -> Vec<String> {
    let mut out = Vec::new();
    let harness = cost.share(cost.harness_seconds());
    if harness > MAX_HARNESS_SHARE {
        out.push(format!(
            "the harness took {:.1} % of the machine's CPU during the load window (bound {:.0} %): the outages measured are not the service's alone",
            100.0 * harness,
            100.0 * MAX_HARNESS_SHARE
        ));
    }
    let probe = cost.share(cost.seconds_of(Part::BrowserProbe));
    if probe > MAX_PROBE_SHARE {
        out.push(format!(
            "the browser probe took {:.1} % of the machine's CPU during the load window (bound {:.0} %)",
            100.0 * probe,
            100.0 * MAX_PROBE_SHARE
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn cost(parts: &[(Part, f64)]) -> CpuCost {
        CpuCost {
            window_seconds: 100.0,
            cores: 2,
            parts: parts.iter().copied().collect(),
            machine_busy_seconds: 150.0,
        }
    }

    #[test]
    fn a_harness_over_its_share_of_the_machine_is_a_caveat() {
        // Measured before the probe was cut: Chromium 0.57 of 2 cores.
        let heavy = cost(&[
            (Part::LoadGenerator, 10.0),
            (Part::BrowserProbe, 57.0),
            (Part::Postgres, 20.0),
        ]);
        let c = caveats(&heavy);
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(c[0].contains("the harness took 33.5 %"), "{}", c[0]);
        assert!(c[1].contains("the browser probe took 28.5 %"), "{}", c[1]);
        // Within both bounds: nothing to say. The system under test's own
        // share never counts against the harness.
        let light = cost(&[
            (Part::LoadGenerator, 15.0),
            (Part::BrowserProbe, 9.0),
            (Part::Postgres, 150.0),
        ]);
        assert!(caveats(&light).is_empty());
        // The probe alone over its bound.
        assert_eq!(caveats(&cost(&[(Part::BrowserProbe, 11.0)])).len(), 1);
    }
}
