//! The web UI through every scenario (the browser probe): a signed-in
//! browser behind the load balancer creates a pseudonym and, a step later,
//! looks it up through the UI's pages, one step every 3 s (when a create
//! fails, it looks up the last one created at once: the UI's reads count
//! for its availability, as the API's do; while steps fail, one every 1.5 s).
//!
//! - P1 applies to the UI as to the API: from the start of a step that failed
//!   to the start of the next step that succeeded, the user could not use the
//!   UI; the longest such stretch and their sum are held to the run's P1
//!   budgets, the longest with [`PROBE_RESOLUTION_SECONDS`] more: the API's
//!   outages are read per second, the UI's one step at a time, and a step
//!   under way when the service recovers sees it only when it ends.
//! - The user stays signed in: a replica kill, a rollout or a failover never
//!   sends the browser back to the sign-in.
//! - A submitted form's result is not lost or wrong: every lookup answers the
//!   original the pseudonym was created for, and every pseudonym the UI showed
//!   is the one the API answers for that original (one subject, one pseudonym,
//!   across the UI and the API).
//! - Guard: the probe signed in and completed steps at all (else unknown).

use serde::{Deserialize, Serialize};

use super::{Budgets, Property, Validity, Verdict};

/// How late the probe can see a recovery: a step takes at most its timeout
/// (`STEP_TIMEOUT_MS` in tests/ui/probe.mjs, 8 s: just over the pages' own
/// 5 s deadline), and the next one begins at the next tick, at most one
/// period (`--period-ms`, 3 s: what keeps the probe's Chromium near 3 % of a
/// 2-core machine under a chaos run's load; 1.5 s after a failed step) later.
pub const PROBE_RESOLUTION_SECONDS: f64 = 11.0;

/// What the probe does in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    SignIn,
    Create,
    Lookup,
}

/// One step of the probe, as it wrote it (`ui-steps.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// When the step began, Unix seconds.
    pub t: f64,
    pub step: Step,
    pub ok: bool,
    /// How long it took.
    pub ms: f64,
    /// The browser was sent to the sign-in: its session was lost.
    #[serde(default)]
    pub signed_out: bool,
    /// Why it failed (an HTTP status, a timeout, the alert's text).
    #[serde(default)]
    pub error: String,
    #[serde(default)]
    pub original: String,
    /// Created: the pseudonym the page showed; looked up: the one asked.
    #[serde(default)]
    pub pseudonym: String,
    /// Looked up: the original the page showed.
    #[serde(default)]
    pub answered: String,
}

/// A pseudonym the UI showed, and what the API answers for its original
/// (`None`: the API could not be asked).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreement {
    pub original: String,
    pub ui: String,
    pub api: Option<String>,
}

/// Outage stretches: from a failed step's start to the next good step's start.
fn outages(steps: &[StepRecord], window_end: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut down_since: Option<f64> = None;
    for s in steps.iter().filter(|s| s.step != Step::SignIn) {
        match (s.ok, down_since) {
            (false, None) => down_since = Some(s.t),
            (true, Some(since)) => {
                out.push((since, s.t));
                down_since = None;
            }
            _ => {}
        }
    }
    if let Some(since) = down_since {
        out.push((since, window_end.max(since)));
    }
    out
}

fn longest_and_total(stretches: &[(f64, f64)]) -> (f64, f64) {
    let longest = stretches.iter().map(|(a, b)| b - a).fold(0.0_f64, f64::max);
    (longest, stretches.iter().map(|(a, b)| b - a).sum())
}

/// The probe's period: the API may be up between two of its steps for this
/// long without the probe seeing it.
pub const PROBE_PERIOD_SECONDS: u64 = 3;

/// The budget of the UI's longest outage: the run's, or the API's longest as
/// a probe looking every [`PROBE_PERIOD_SECONDS`] sees it if that is longer
/// (the API's outages are held to their own budgets one by one), plus the
/// probe's resolution.
pub fn longest_budget_seconds(budgets: Budgets, api_longest_seen: u64) -> f64 {
    budgets.max_outage_seconds.max(api_longest_seen) as f64 + PROBE_RESOLUTION_SECONDS
}

/// The UI's longest outage and the outages' sum, seconds; `None` when the
/// probe measured nothing (never signed in, or never completed a lookup).
pub fn outage_seconds(steps: &[StepRecord], window_end_unix: f64) -> Option<(f64, f64)> {
    let signed_in = steps.iter().any(|s| s.step == Step::SignIn && s.ok);
    let good = steps.iter().any(|s| s.step == Step::Lookup && s.ok);
    (signed_in && good).then(|| longest_and_total(&outages(steps, window_end_unix)))
}

/// The verdicts of the probe's steps (in time order) and the agreement check.
pub fn check(
    steps: &[StepRecord],
    agreements: &[Agreement],
    budgets: Budgets,
    api_longest_seen: u64,
    window_end_unix: f64,
) -> Vec<Verdict> {
    let signed_in = steps.iter().any(|s| s.step == Step::SignIn && s.ok);
    let good = steps
        .iter()
        .filter(|s| s.step == Step::Lookup && s.ok)
        .count();
    if !signed_in || good == 0 {
        let why = if signed_in {
            "the probe signed in but completed no create-and-look-up"
        } else {
            "the probe never signed in"
        };
        return [Property::UiOutage, Property::UiSession, Property::UiResults]
            .into_iter()
            .map(|p| Verdict {
                property: p,
                validity: Validity::Unknown,
                summary: format!("{why}: the UI was not measured"),
                evidence: Vec::new(),
            })
            .collect();
    }
    let stretches = outages(steps, window_end_unix);
    let (longest, total) = longest_and_total(&stretches);
    let longest_budget = longest_budget_seconds(budgets, api_longest_seen);
    let outage_ok = longest <= longest_budget && total <= budgets.max_unavailable_seconds;
    let base = if api_longest_seen > budgets.max_outage_seconds {
        format!(
            "{api_longest_seen} s, the API's longest as a probe every {PROBE_PERIOD_SECONDS} s sees it"
        )
    } else {
        format!("{} s", budgets.max_outage_seconds)
    };
    let mut outage = Verdict::holds(
        Property::UiOutage,
        outage_ok,
        format!(
            "longest UI outage {longest:.1} s (budget {base} + {PROBE_RESOLUTION_SECONDS} s the probe's resolution), \
             {total:.1} s in all (budget {} s), {} steps",
            budgets.max_unavailable_seconds,
            steps.len()
        ),
    );
    outage.evidence = stretches
        .iter()
        .filter(|(a, b)| b - a >= 1.0)
        .map(|(a, b)| format!("down from {a:.1} to {b:.1} ({:.1} s)", b - a))
        .take(20)
        .collect();

    let signed_out: Vec<String> = steps
        .iter()
        .filter(|s| s.signed_out)
        .map(|s| format!("{:?} at {:.1} was sent to sign in", s.step, s.t))
        .collect();
    let session = Verdict::from_violations(Property::UiSession, signed_out, 0, "sign-outs");

    let mut wrong = Vec::new();
    let mut undecided = 0;
    for s in steps.iter().filter(|s| s.step == Step::Lookup && s.ok) {
        if s.answered != s.original {
            wrong.push(format!(
                "the lookup of {} answered {}, not {}",
                crate::redact(&s.pseudonym),
                crate::redact(&s.answered),
                crate::redact(&s.original)
            ));
        }
    }
    for a in agreements {
        match &a.api {
            None => undecided += 1,
            Some(api) if *api != a.ui => wrong.push(format!(
                "the UI showed {} for {}, the API answers {}",
                crate::redact(&a.ui),
                crate::redact(&a.original),
                crate::redact(api)
            )),
            Some(_) => {}
        }
    }
    let results = Verdict::from_violations(
        Property::UiResults,
        wrong,
        undecided,
        "wrong or lost results",
    );
    vec![outage, session, results]
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGETS: Budgets = Budgets {
        max_outage_seconds: 30,
        max_unavailable_seconds: 150.0,
    };

    fn step(t: f64, step: Step, ok: bool) -> StepRecord {
        StepRecord {
            t,
            step,
            ok,
            ms: 50.0,
            signed_out: false,
            error: String::new(),
            original: "o".into(),
            pseudonym: "p".into(),
            answered: if step == Step::Lookup {
                "o".into()
            } else {
                String::new()
            },
        }
    }

    /// A healthy probe: signed in, then a create and a lookup each second.
    fn healthy(seconds: u32) -> Vec<StepRecord> {
        let mut s = vec![step(0.0, Step::SignIn, true)];
        for i in 1..=seconds {
            s.push(step(f64::from(i), Step::Create, true));
            s.push(step(f64::from(i) + 0.5, Step::Lookup, true));
        }
        s
    }

    fn agreed() -> Vec<Agreement> {
        vec![Agreement {
            original: "o".into(),
            ui: "p".into(),
            api: Some("p".into()),
        }]
    }

    fn validity(v: &[Verdict], p: Property) -> Validity {
        v.iter().find(|x| x.property == p).unwrap().validity
    }

    #[test]
    fn a_healthy_probe_passes() {
        let v = check(&healthy(60), &agreed(), BUDGETS, 0, 61.0);
        assert!(v.iter().all(Verdict::passed), "{v:?}");
    }

    #[test]
    fn an_outage_longer_than_the_budget_fails_p1_for_the_ui() {
        let mut steps = healthy(100);
        for s in steps.iter_mut().filter(|s| (20.0..62.0).contains(&s.t)) {
            s.ok = false;
        }
        let v = check(&steps, &agreed(), BUDGETS, 0, 101.0);
        assert_eq!(validity(&v, Property::UiOutage), Validity::Invalid, "{v:?}");
        // Within the budget it holds.
        let mut steps = healthy(100);
        for s in steps.iter_mut().filter(|s| (20.0..30.0).contains(&s.t)) {
            s.ok = false;
        }
        let v = check(&steps, &agreed(), BUDGETS, 0, 101.0);
        assert_eq!(validity(&v, Property::UiOutage), Validity::Valid, "{v:?}");
        // A failure left open at the end runs to the window's end.
        let mut steps = healthy(10);
        steps.push(step(11.0, Step::Create, false));
        let v = check(&steps, &agreed(), BUDGETS, 0, 60.0);
        assert_eq!(validity(&v, Property::UiOutage), Validity::Invalid, "{v:?}");
    }

    /// A double failover: the API up for a second between two outages that
    /// each kept their budget, which a probe looking every 3 s saw as one.
    /// The UI is held to that joined outage, and not to more.
    #[test]
    fn the_ui_is_held_to_the_api_outages_as_the_probe_can_see_them() {
        let mut steps = healthy(100);
        for s in steps.iter_mut().filter(|s| (20.0..70.0).contains(&s.t)) {
            s.ok = false;
        }
        let v = check(&steps, &agreed(), BUDGETS, 0, 101.0);
        assert_eq!(validity(&v, Property::UiOutage), Validity::Invalid, "{v:?}");
        let v = check(&steps, &agreed(), BUDGETS, 45, 101.0);
        assert_eq!(validity(&v, Property::UiOutage), Validity::Valid, "{v:?}");
        assert!(v[0].summary.contains("45 s, the API's longest"), "{v:?}");
        // Longer than the API's joined outage and the resolution: the UI's own.
        let v = check(&steps, &agreed(), BUDGETS, 35, 101.0);
        assert_eq!(validity(&v, Property::UiOutage), Validity::Invalid, "{v:?}");
    }

    #[test]
    fn a_sign_out_fails_the_session_property() {
        let mut steps = healthy(10);
        steps[5].signed_out = true;
        steps[5].ok = false;
        let v = check(&steps, &agreed(), BUDGETS, 0, 11.0);
        assert_eq!(validity(&v, Property::UiSession), Validity::Invalid);
    }

    #[test]
    fn a_wrong_lookup_or_a_pseudonym_the_api_disowns_fails_the_results() {
        let mut steps = healthy(10);
        steps[4].answered = "someone else".into();
        let v = check(&steps, &agreed(), BUDGETS, 0, 11.0);
        assert_eq!(validity(&v, Property::UiResults), Validity::Invalid);
        let swapped = vec![Agreement {
            original: "o".into(),
            ui: "p".into(),
            api: Some("q".into()),
        }];
        let v = check(&healthy(10), &swapped, BUDGETS, 0, 11.0);
        assert_eq!(validity(&v, Property::UiResults), Validity::Invalid);
        let unasked = vec![Agreement {
            original: "o".into(),
            ui: "p".into(),
            api: None,
        }];
        let v = check(&healthy(10), &unasked, BUDGETS, 0, 11.0);
        assert_eq!(validity(&v, Property::UiResults), Validity::Unknown);
    }

    #[test]
    fn a_probe_that_never_signed_in_or_never_succeeded_decides_nothing() {
        let v = check(&healthy(10)[1..], &agreed(), BUDGETS, 0, 11.0);
        assert!(v.iter().all(|x| x.validity == Validity::Unknown), "{v:?}");
        let failing: Vec<StepRecord> = healthy(10)
            .into_iter()
            .map(|mut s| {
                s.ok = s.step == Step::SignIn;
                s
            })
            .collect();
        let v = check(&failing, &agreed(), BUDGETS, 0, 11.0);
        assert!(v.iter().all(|x| x.validity == Validity::Unknown), "{v:?}");
    }
}
