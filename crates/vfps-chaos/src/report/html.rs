//! `report.html`: one self-contained page (no network) with the timeline chart
//! ([`super::chart`]) inline as SVG and, when the browser probe ran, the web
//! UI's under it ([`super::ui_chart`]); latency percentiles and operation
//! counts per scenario, latency per operation, the per-scenario availability
//! table and the verdicts. [`write`] writes it with the charts' PNGs.

use std::{fmt::Write, path::Path};

use super::{
    chart::Chart,
    ui_chart::{UiChart, UiTimeline},
    Summary,
};
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
    ops: [OpCounts; Operation::COUNT],
}

fn window_figures(rows: &[Row], buckets: &[latency::Second], w: &Window) -> WindowFigures {
    let inside = |s: u64| (s as f64) >= w.start_seconds.floor() && (s as f64) < w.end_seconds;
    let mut ops = [OpCounts::default(); Operation::COUNT];
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
    /// Per-second latency buckets (`latency.csv`), in all and per operation;
    /// empty when the load did not record them (a load generator elsewhere).
    pub latency: &'a [latency::Second],
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

/// An SVG document inline in the page, or why it could not be drawn.
fn inline_svg(s: &mut String, svg: anyhow::Result<String>, what: &str) {
    match svg {
        // The SVG's own prolog is not valid inside HTML.
        Ok(svg) => s.push_str(
            svg.trim_start_matches(|c| c != '<')
                .trim_start_matches("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
        ),
        Err(e) => {
            let _ = write!(
                s,
                "<p class=\"invalid\">{what} could not be drawn: {}</p>",
                esc(&format!("{e:#}"))
            );
        }
    }
}

/// The web UI's chart under the API's, when the browser probe ran.
fn ui_section(s: &mut String, api: &Chart<'_>, ui: &UiTimeline) {
    let rows = match ui {
        UiTimeline::Absent => return,
        UiTimeline::Read(rows) => rows,
        UiTimeline::Unreadable(e) => {
            let _ = write!(
                s,
                "<h2>{}</h2><p class=\"invalid\">{} could not be read: {}</p>",
                super::ui_chart::TITLE,
                super::ui_chart::FILE,
                esc(e)
            );
            return;
        }
    };
    let _ = write!(s, "<h2>{}</h2>", super::ui_chart::TITLE);
    inline_svg(s, UiChart { api, rows }.svg(), "The web UI's timeline");
    s.push_str("<p>Each second's steps through the web UI (a create, and a step later its lookup, one step every 3 s), ok or failed, and whether the browser was sent back to the sign-in; below, how long each step took (<code>ui-timeline.csv</code>). The same time axis, scenario windows and faults as the API's above.</p>");
}

/// How an operation is headed: churn's steps are a side namespace's life.
fn operation_heading(op: Operation) -> String {
    match op {
        Operation::Churn => "churn (namespace lifecycle)".to_owned(),
        op => op.name().to_owned(),
    }
}

/// The table "Latency per operation": p50 / p99 / max of each operation for
/// the whole run and each scenario.
fn latency_section(s: &mut String, p: &Page<'_>) {
    let l = super::latency::by_operation(p.latency, p.windows);
    s.push_str("<h2>Latency per operation</h2>");
    if l.is_empty() {
        s.push_str("<p>Not recorded: <code>latency.csv</code> has no per-operation buckets (a load generator elsewhere, or an older harness).</p>");
        return;
    }
    let ops: Vec<Operation> = Operation::ALL
        .into_iter()
        .filter(|op| l.run.contains_key(op))
        .collect();
    s.push_str("<table><tr><th>window</th>");
    for op in &ops {
        let _ = write!(
            s,
            "<th>{}<br>p50 / p99 / max</th>",
            esc(&operation_heading(*op))
        );
    }
    s.push_str("</tr>");
    let mut row =
        |name: &str, figures: &std::collections::BTreeMap<Operation, latency::Percentiles>| {
            let _ = write!(s, "<tr><td>{}</td>", esc(name));
            for op in &ops {
                match figures.get(op) {
                    Some(f) => {
                        let _ = write!(
                            s,
                            "<td>{:.1} / {:.1} / {:.1} ms ({} calls)</td>",
                            f.p50_ms, f.p99_ms, f.max_ms, f.calls
                        );
                    }
                    None => s.push_str("<td>—</td>"),
                }
            }
            s.push_str("</tr>");
        };
    row("whole run", &l.run);
    for w in &l.scenarios {
        row(w.scenario.as_str(), &w.operations);
    }
    s.push_str("</table><p>Each operation's calls apart: a namespace delete (a churn step) waits out a cache lease of about 1 s by design, which mixed into one p99 would hide a real stall. Upper bounds of eighth-octave buckets: each within 9 % above the true value.</p>");
}

/// Writes `report.html`, `timeline.png` and — when the browser probe left
/// `ui-timeline.csv` in `dir` — `ui-timeline.png`. A chart that cannot be
/// drawn is said on stderr and on the page; the other files are written
/// regardless, and a `ui-timeline.png` of an earlier report is removed
/// rather than left to contradict this one.
pub fn write(dir: &Path, p: &Page<'_>) -> anyhow::Result<()> {
    let ui = UiTimeline::read(dir);
    if let UiTimeline::Unreadable(e) = &ui {
        eprintln!("{} not shown: {e}", super::ui_chart::FILE);
    }
    super::write_file(
        dir,
        "report.html",
        super::erasure::with_section(page(p, &ui), dir, p.windows),
    )?;
    let title = title(p.summary);
    let api = chart(p, &title);
    let api_png = match api.png() {
        Ok(png) => {
            super::write_file(dir, "timeline.png", png)?;
            true
        }
        Err(e) => {
            eprintln!("timeline.png not drawn: {e:#}");
            false
        }
    };
    let ui_png = match &ui {
        UiTimeline::Read(rows) if api_png => match (UiChart { api: &api, rows }).png() {
            Ok(png) => Some(png),
            Err(e) => {
                eprintln!("ui-timeline.png not drawn: {e:#}");
                None
            }
        },
        _ => None,
    };
    match ui_png {
        Some(png) => super::write_file(dir, UI_PNG, png),
        None => match std::fs::remove_file(dir.join(UI_PNG)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(anyhow::Error::new(e)
                .context(format!("cannot remove {}", dir.join(UI_PNG).display()))),
            _ => Ok(()),
        },
    }
}

const UI_PNG: &str = "ui-timeline.png";

/// The page; `ui` is the browser probe's timeline, if it ran.
pub fn page(p: &Page<'_>, ui: &UiTimeline) -> String {
    let (rows, windows, scenarios, summary) = (p.rows, p.windows, p.scenarios, p.summary);
    let (verdicts, passed) = (&summary.verdicts, summary.passed);
    let mut s = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>vfps chaos report</title><style>body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}.valid{color:#2a7d2a}.invalid,.unknown{color:#c62828;font-weight:bold}</style></head><body>",
    );
    let _ = write!(
        s,
        "<h1>vfps chaos run: {}{}</h1>",
        if passed { "PASS" } else { "FAIL" },
        if summary.caveats.is_empty() {
            ""
        } else {
            ", with a caveat"
        }
    );
    super::sections::caveats(&mut s, summary);
    let title = title(summary);
    let api = chart(p, &title);
    inline_svg(&mut s, api.svg(), "The timeline");
    let _ = write!(
        s,
        "<p>Red dashed lines: faults; green: heals (as <code>chaos-timeline.csv</code> records them). Shaded: scenario windows. Latency: {}.</p>",
        if api.per_operation() {
            "each operation's p99 in each second"
        } else {
            "p50, p99 and max of every call in each second"
        }
    );
    ui_section(&mut s, &api, ui);
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
    s.push_str("</table><p>Every operation's calls together. Percentiles from eighth-octave buckets: each within 9 % above the true value.</p>");
    latency_section(&mut s, p);
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
    s.push_str("</table>");
    super::sections::margins(&mut s, summary);
    super::sections::failovers(&mut s, summary);
    super::sections::cpu(&mut s, summary);
    s.push_str(
        "<h2>Verdicts</h2><table><tr><th>property</th><th>verdict</th><th>summary</th></tr>",
    );
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
    use crate::{
        history::{ui::UiRow, Event, Timeline},
        scenario::ScenarioName,
    };
    use std::time::Duration;

    fn window(name: &str, start: f64, end: f64) -> Window {
        Window {
            scenario: ScenarioName::new(name),
            start_seconds: start,
            end_seconds: end,
        }
    }

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
        let windows = vec![window("baseline", 0.0, 5.0)];
        let summary = Summary {
            passed: true,
            margins: vec![crate::checker::margins::Margin {
                figure: crate::checker::margins::Figure::LongestOutage,
                scenario: Some(ScenarioName::new("db-double-failover")),
                seconds: 39.0,
                budget_seconds: 40.0,
                gated: true,
            }],
            failovers: vec![crate::history::failover::Failover {
                scenario: ScenarioName::new("db-primary-kill"),
                fault: "killed primary db-a (timeline 1)".into(),
                fault_seconds: 24.6,
                leader_key_expired_seconds: Some(28.8),
                promotion_started_seconds: Some(36.2),
                promoted_seconds: Some(36.8),
                standby_attached_seconds: Some(37.0),
                first_write_seconds: None,
                promoted: Some("db-c".into()),
            }],
            ..Summary::default()
        };
        let buckets = vec![
            latency::Second {
                all: vec![(latency::bucket(1_000), 10)],
                ..latency::Second::default()
            };
            5
        ];
        let html = page(
            &Page {
                rows: &rows,
                latency: &buckets,
                windows: &windows,
                events: &[],
                scenarios: &[],
                summary: &summary,
            },
            &UiTimeline::Absent,
        );
        assert!(html.contains("<svg") && html.contains("baseline") && html.contains("PASS"));
        assert!(!html.contains("<?xml"), "no XML prolog inside HTML");
        assert!(html.contains("<h2>Margins</h2>"));
        assert!(
            html.contains("longest outage [db-double-failover]</td><td>39.0 s</td><td>40.0 s</td><td>1.0 s (2 %)</td><td class=\"invalid\">WARNING"),
            "a thin margin is marked"
        );
        assert!(html.contains("<h2>Where each failover's seconds went</h2>"));
        assert!(
            html.contains(
                "<td>+4.2 s</td><td>+11.6 s</td><td>+12.2 s</td><td>+12.4 s</td><td>not seen</td><td>db-c</td>"
            ),
            "each step after the fault"
        );
        assert!(html.contains("≤ 1.0 ms"), "per-scenario p50");
        assert!(html.contains("<th>create ok/offered</th>"));
        assert!(html.contains("p50, p99 and max of every call"));
        assert!(
            html.contains("<h2>Latency per operation</h2><p>Not recorded"),
            "a latency.csv without per-operation buckets"
        );
        assert!(
            !html.contains(super::super::ui_chart::TITLE),
            "no probe, no UI chart"
        );
        assert!(
            html.matches("http://").all(|_| true)
                && !html.contains("src=\"http")
                && !html.contains("href=\"http"),
            "nothing fetched from the network"
        );
    }

    /// Ten seconds of Creates at 3–5 ms and a churn step a second; only the
    /// namespace deletes of the second scenario (seconds 5–9) take 1 s.
    fn only_deletes_slow() -> Timeline {
        let t = Timeline::new(10);
        for second in 0..10 {
            for i in 0..10 {
                t.record(second, Operation::Create, Event::Offered, None);
                let at = Duration::from_micros(3_000 + 200 * i);
                t.record(second, Operation::Create, Event::Ok, Some(at));
            }
            let step = Duration::from_millis(if second >= 5 { 1_000 } else { 4 });
            t.record(second, Operation::Churn, Event::Offered, None);
            t.record(second, Operation::Churn, Event::Ok, Some(step));
        }
        t
    }

    /// The cell of `op`'s column in the row of `window`, in the latency per
    /// operation table.
    fn latency_cell<'h>(html: &'h str, window: &str, op: usize) -> &'h str {
        let table = html.split("<h2>Latency per operation</h2>").nth(1).unwrap();
        let row = table
            .split("<tr>")
            .find(|r| r.starts_with(&format!("<td>{window}</td>")))
            .unwrap();
        row.split("<td>")
            .nth(2 + op)
            .unwrap()
            .split("</td>")
            .next()
            .unwrap()
    }

    #[test]
    fn a_run_where_only_deletes_are_slow_shows_slow_deletes_and_fast_creates() {
        let t = only_deletes_slow();
        let rows = t.rows();
        let buckets = latency::parse(&latency::csv(&t.latency_buckets())).unwrap();
        let windows = vec![window("baseline", 0.0, 5.0), window("deletes", 5.0, 10.0)];
        let summary = Summary::default();
        let html = page(
            &Page {
                rows: &rows,
                latency: &buckets,
                windows: &windows,
                events: &[],
                scenarios: &[],
                summary: &summary,
            },
            &UiTimeline::Absent,
        );
        let table = html.split("<h2>Latency per operation</h2>").nth(1).unwrap();
        assert!(table.starts_with("<table><tr><th>window</th><th>create<br>p50 / p99 / max</th><th>churn (namespace lifecycle)<br>p50 / p99 / max</th></tr>"), "{table}");
        // p50, p99, max and calls of a cell.
        let figures = |window: &str, op: usize| -> (Vec<f64>, u64) {
            let cell = latency_cell(&html, window, op);
            let (ms, calls) = cell.split_once(" ms (").unwrap();
            let ms = ms.split(" / ").map(|v| v.parse().unwrap()).collect();
            (ms, calls.trim_end_matches(" calls)").parse().unwrap())
        };
        // Creates took 3.0–4.8 ms: within 9 % above, everywhere.
        for (window, calls) in [("whole run", 100), ("baseline", 50), ("deletes", 50)] {
            let (ms, n) = figures(window, 0);
            assert_eq!(n, calls, "{window}");
            assert!(
                ms.iter().all(|&v| (3.0..5.3).contains(&v)),
                "{window}: {ms:?}"
            );
        }
        // The deletes' second is slow, and the run's churn p99 with it.
        let (baseline, _) = figures("baseline", 1);
        assert!(baseline.iter().all(|&v| v < 4.4), "{baseline:?}");
        let (deletes, _) = figures("deletes", 1);
        assert!(
            deletes.iter().all(|&v| (1000.0..1091.0).contains(&v)),
            "{deletes:?}"
        );
        let (run, _) = figures("whole run", 1);
        assert!(run[0] < 1000.0 && run[1] >= 1000.0, "{run:?}");
        assert!(html.contains("each operation's p99 in each second"));
        assert!(
            html.contains("churn p99 (namespace lifecycle)"),
            "the chart's legend"
        );
    }

    fn ui_rows() -> Vec<UiRow> {
        (0..10)
            .map(|second| UiRow {
                second,
                create_ok: u32::from(second != 6),
                create_failed: u32::from(second == 6),
                lookup_ok: 1,
                create_ms: 150.0,
                lookup_ms: 90.0,
                ..UiRow::default()
            })
            .collect()
    }

    #[test]
    fn the_web_uis_chart_is_under_the_apis_when_the_probe_ran_and_only_then() {
        let dir = vfps_testkit::scratch_dir("report-html-ui");
        let t = only_deletes_slow();
        let (rows, buckets) = (t.rows(), t.latency_buckets());
        let windows = vec![window("baseline", 0.0, 10.0)];
        let summary = Summary::default();
        let p = Page {
            rows: &rows,
            latency: &buckets,
            windows: &windows,
            events: &[],
            scenarios: &[],
            summary: &summary,
        };
        let title = super::super::ui_chart::TITLE;

        write(&dir, &p).unwrap();
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(!html.contains(title));
        assert!(dir.join("timeline.png").exists());
        assert!(
            !dir.join("ui-timeline.png").exists(),
            "no probe, no UI chart"
        );

        let csv = crate::history::ui::ui_timeline_csv(&ui_rows());
        std::fs::write(dir.join("ui-timeline.csv"), csv).unwrap();
        write(&dir, &p).unwrap();
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        let (api, ui) = html.split_once(&format!("<h2>{title}</h2>")).unwrap();
        assert_eq!(api.matches("<svg").count(), 1, "the API's chart first");
        assert!(ui.starts_with("<svg"), "then the UI's");
        assert!(ui.contains("\nbaseline\n") && ui.contains("\nlookup\n"));
        let png = std::fs::read(dir.join("ui-timeline.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");

        std::fs::write(dir.join("ui-timeline.csv"), "second,create_ok\n").unwrap();
        write(&dir, &p).unwrap();
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(
            html.contains("ui-timeline.csv could not be read: ui-timeline.csv line 1"),
            "a bad file is said on the page"
        );
        assert!(
            !dir.join("ui-timeline.png").exists(),
            "no chart left from the report before"
        );
    }
}
