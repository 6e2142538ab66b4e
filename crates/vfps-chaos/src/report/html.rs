//! `report.html`: one self-contained page (no network) with the timeline chart
//! ([`super::chart`]) inline as SVG, latency percentiles and operation counts
//! per scenario, the per-scenario availability table and the verdicts.

use std::fmt::Write;

use super::{chart::Chart, Summary};
use crate::{
    checker::{availability::ScenarioResult, Validity},
    history::{latency, OpCounts, Row},
    operation::Operation,
    scenario::events::{ChaosEvent, Window},
};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Latency and operations of one scenario's window.
struct WindowFigures {
    latency: Option<latency::Percentiles>,
    max_ms: f64,
    ops: [OpCounts; 6],
}

fn window_figures(rows: &[Row], buckets: &[latency::Buckets], w: &Window) -> WindowFigures {
    let inside = |s: u64| (s as f64) >= w.start_seconds.floor() && (s as f64) < w.end_seconds;
    let mut ops = [OpCounts::default(); 6];
    let mut max_ms = 0.0_f64;
    for r in rows.iter().filter(|r| inside(r.second)) {
        max_ms = max_ms.max(r.max_ms);
        for (sum, op) in ops.iter_mut().zip(r.ops.iter()) {
            sum.offered += op.offered;
            sum.ok += op.ok;
            sum.failed += op.failed;
        }
    }
    WindowFigures {
        latency: latency::percentiles(buckets, w.start_seconds..w.end_seconds),
        max_ms,
        ops,
    }
}

/// Everything the page shows.
pub struct Page<'a> {
    pub rows: &'a [Row],
    /// Per-second latency buckets (`latency.csv`); empty when the load did not
    /// record them (a load generator elsewhere).
    pub latency: &'a [latency::Buckets],
    pub windows: &'a [Window],
    pub events: &'a [ChaosEvent],
    pub scenarios: &'a [ScenarioResult],
    pub summary: &'a Summary,
}

/// The chart of a run, titled with its verdict.
pub fn chart<'a>(p: &'a Page<'a>, title: &'a str) -> Chart<'a> {
    Chart {
        title,
        rows: p.rows,
        windows: p.windows,
        events: p.events,
    }
}

pub fn title(summary: &Summary) -> String {
    format!(
        "vfps chaos run — {} (seed {})",
        if summary.passed { "PASS" } else { "FAIL" },
        summary.seed
    )
}

pub fn page(p: &Page<'_>) -> String {
    let (rows, windows, scenarios, summary) = (p.rows, p.windows, p.scenarios, p.summary);
    let (verdicts, passed) = (&summary.verdicts, summary.passed);
    let mut s = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>vfps chaos report</title><style>body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}.valid{color:#2a7d2a}.invalid,.unknown{color:#c62828;font-weight:bold}</style></head><body>",
    );
    let _ = write!(
        s,
        "<h1>vfps chaos run: {}</h1>",
        if passed { "PASS" } else { "FAIL" }
    );
    let title = title(summary);
    match chart(p, &title).svg() {
        // The SVG's own prolog is not valid inside HTML.
        Ok(svg) => s.push_str(
            svg.trim_start_matches(|c| c != '<')
                .trim_start_matches("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
        ),
        Err(e) => {
            let _ = write!(
                s,
                "<p class=\"invalid\">The timeline could not be drawn: {}</p>",
                esc(&format!("{e:#}"))
            );
        }
    }
    s.push_str("<p>Red dashed lines: faults; green: heals (as <code>chaos-timeline.csv</code> records them). Shaded: scenario windows.</p>");
    s.push_str("<h2>Latency and operations per scenario</h2><table><tr><th>scenario</th><th>calls</th><th>p50</th><th>p99</th><th>max</th>");
    for op in Operation::ALL {
        let _ = write!(s, "<th>{} ok/offered</th>", op.name());
    }
    s.push_str("</tr>");
    for w in windows {
        let f = window_figures(rows, p.latency, w);
        let (calls, p50, p99) = match f.latency {
            Some(l) => (
                l.calls.to_string(),
                format!("≤ {:.1} ms", l.p50_ms),
                format!("≤ {:.1} ms", l.p99_ms),
            ),
            None => ("—".into(), "not recorded".into(), "not recorded".into()),
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{calls}</td><td>{p50}</td><td>{p99}</td><td>{:.1} ms</td>",
            esc(w.scenario.as_str()),
            f.max_ms
        );
        for op in f.ops {
            let _ = write!(s, "<td>{}/{}</td>", op.ok, op.offered);
        }
        s.push_str("</tr>");
    }
    s.push_str("</table><p>Percentiles from eighth-octave buckets: each within 9 % above the true value.</p>");
    s.push_str("<h2>Per scenario</h2><table><tr><th>scenario</th><th>offered</th><th>ok</th><th>failed</th><th>shed</th><th>longest outage</th><th>budget</th><th>unavailable s</th><th>findings</th><th>verdict</th></tr>");
    for r in scenarios {
        let a = &r.availability;
        let v = format!("{:?}", r.verdict.validity).to_lowercase();
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} s</td><td>{} s</td><td>{:.2}</td><td>{}</td><td class=\"{v}\">{v}</td></tr>",
            esc(r.scenario.as_str()), a.offered, a.ok, a.failed, a.shed, a.longest_outage_seconds, r.max_outage_seconds, a.unavailable_seconds, r.findings
        );
    }
    s.push_str("</table><h2>Verdicts</h2><table><tr><th>property</th><th>verdict</th><th>summary</th></tr>");
    for v in verdicts {
        let c = match v.validity {
            Validity::Valid => "valid",
            Validity::Invalid => "invalid",
            Validity::Unknown => "unknown",
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=\"{c}\">{c}</td><td>{}",
            esc(v.property.name()),
            esc(&v.summary)
        );
        for e in &v.evidence {
            let _ = write!(s, "<br><code>{}</code>", esc(e));
        }
        s.push_str("</td></tr>");
    }
    s.push_str("</table>");
    if !summary.operations.is_empty() {
        let _ = write!(
            s,
            "<h2>Operations (mix {})</h2><table><tr><th>operation</th><th>offered</th><th>served</th><th>failed</th><th>answers</th></tr>",
            esc(&summary.mix)
        );
        for (op, c) in &summary.operations {
            let answers = summary
                .calls
                .codes
                .get(op)
                .map(|codes| {
                    codes
                        .iter()
                        .map(|(code, n)| format!("{code} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(op),
                c.offered,
                c.ok,
                c.failed,
                esc(&answers)
            );
        }
        s.push_str("</table>");
    }
    if !summary.one_node_commits.is_empty() {
        s.push_str("<h2>One-node commits in the PostgreSQL logs</h2><table><tr><th>t</th><th>instance</th><th>scenario</th></tr>");
        for c in &summary.one_node_commits {
            let _ = write!(
                s,
                "<tr><td>{:.1} s</td><td>{}</td><td>{}</td></tr>",
                c.at_seconds,
                esc(&c.instance),
                esc(c.scenario.as_ref().map_or("", |n| n.as_str()))
            );
        }
        s.push_str("</table>");
    }
    s.push_str("</body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_self_contained_and_shows_every_scenario() {
        let rows: Vec<Row> = (0..5)
            .map(|s| Row {
                offered: 10,
                ok: 10,
                mean_ms: 1.0,
                p50_ms: 1.0,
                p99_ms: 2.0,
                max_ms: 3.0,
                ..Row::empty(s)
            })
            .collect();
        let windows = vec![Window {
            scenario: crate::scenario::ScenarioName::new("baseline"),
            start_seconds: 0.0,
            end_seconds: 5.0,
        }];
        let summary = Summary {
            passed: true,
            ..Summary::default()
        };
        let buckets = vec![vec![(latency::bucket(1_000), 10)]; 5];
        let html = page(&Page {
            rows: &rows,
            latency: &buckets,
            windows: &windows,
            events: &[],
            scenarios: &[],
            summary: &summary,
        });
        assert!(html.contains("<svg") && html.contains("baseline") && html.contains("PASS"));
        assert!(!html.contains("<?xml"), "no XML prolog inside HTML");
        assert!(html.contains("≤ 1.0 ms"), "per-scenario p50");
        assert!(html.contains("<th>create ok/offered</th>"));
        assert!(
            html.matches("http://").all(|_| true)
                && !html.contains("src=\"http")
                && !html.contains("href=\"http"),
            "nothing fetched from the network"
        );
    }
}
