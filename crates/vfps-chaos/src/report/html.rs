//! `report.html`: one self-contained page (no network) with the per-second
//! timeline plotted as SVG — ok / failed / shed, p99 latency, scenario windows
//! shaded — the per-scenario table and the verdicts.

use std::fmt::Write;

use super::Summary;
use crate::{
    checker::{availability::ScenarioResult, Validity},
    history::Row,
    scenario::events::Window,
};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The plot's extent: seconds, most calls in a second, highest p99 (ms).
fn extent(rows: &[Row]) -> (f64, f64, f64) {
    let n = rows.len().max(1) as f64;
    let max_calls = rows
        .iter()
        .map(|r| r.offered.max(r.ok + r.failed + r.shed))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let max_ms = rows.iter().map(|r| r.p99_ms).fold(1.0_f64, f64::max);
    (n, max_calls, max_ms)
}

/// The timeline plot as an SVG element.
pub fn plot(rows: &[Row], windows: &[Window]) -> String {
    let (w, h, pad) = (1000.0, 360.0, 50.0);
    let (n, max_calls, max_ms) = extent(rows);
    let x = |s: f64| pad + s / n * (w - 2.0 * pad);
    let y = |v: f64, max: f64| h - pad - v / max * (h - 2.0 * pad);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" role="img" aria-label="load timeline">"#
    );
    let palette = [
        "#e8eef9", "#f9efe8", "#eef9e8", "#f7e8f9", "#e8f7f9", "#f9f7e8",
    ];
    for (i, win) in windows.iter().enumerate() {
        let x0 = x(win.start_seconds.max(0.0));
        let x1 = x(win.end_seconds.min(n));
        let _ = write!(
            svg,
            r##"<rect x="{x0:.1}" y="{pad}" width="{:.1}" height="{:.1}" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="10" fill="#555">{}</text>"##,
            (x1 - x0).max(0.0),
            h - 2.0 * pad,
            palette[i % palette.len()],
            x0 + 2.0,
            pad - 4.0 - (i % 2) as f64 * 11.0,
            esc(win.scenario.as_str())
        );
    }
    let line = |f: &dyn Fn(&Row) -> f64, max: f64, color: &str, dash: &str| {
        let pts: Vec<String> = rows
            .iter()
            .map(|r| format!("{:.1},{:.1}", x(r.second as f64 + 0.5), y(f(r), max)))
            .collect();
        format!(
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" {dash} points="{}"/>"#,
            pts.join(" ")
        )
    };
    svg.push_str(&line(&|r| r.ok as f64, max_calls, "#2a7d2a", ""));
    svg.push_str(&line(&|r| r.failed as f64, max_calls, "#c62828", ""));
    svg.push_str(&line(&|r| r.shed as f64, max_calls, "#ef6c00", ""));
    svg.push_str(&line(
        &|r| r.p99_ms,
        max_ms,
        "#1565c0",
        r#"stroke-dasharray="4 3""#,
    ));
    let _ = write!(
        svg,
        r##"<line x1="{pad}" y1="{b}" x2="{r}" y2="{b}" stroke="#333"/><line x1="{pad}" y1="{pad}" x2="{pad}" y2="{b}" stroke="#333"/>
<text x="{pad}" y="{t}" font-size="11">0 s</text><text x="{r}" y="{t}" font-size="11" text-anchor="end">{n} s</text>
<text x="8" y="{pad}" font-size="11">{max_calls} calls/s</text><text x="{rr}" y="{pad}" font-size="11" text-anchor="end" fill="#1565c0">p99 {max_ms:.0} ms</text>
<text x="{pad}" y="{h2}" font-size="11"><tspan fill="#2a7d2a">— ok</tspan>  <tspan fill="#c62828">— failed</tspan>  <tspan fill="#ef6c00">— shed</tspan>  <tspan fill="#1565c0">- - p99 latency</tspan></text></svg>"##,
        b = h - pad,
        r = w - pad,
        t = h - pad + 14.0,
        rr = w - 4.0,
        h2 = h - 8.0,
    );
    svg
}

pub fn page(
    rows: &[Row],
    windows: &[Window],
    scenarios: &[ScenarioResult],
    summary: &Summary,
) -> String {
    let (verdicts, passed) = (&summary.verdicts, summary.passed);
    let mut s = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>vfps chaos report</title><style>body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}.valid{color:#2a7d2a}.invalid,.unknown{color:#c62828;font-weight:bold}</style></head><body>",
    );
    let _ = write!(
        s,
        "<h1>vfps chaos run: {}</h1>",
        if passed { "PASS" } else { "FAIL" }
    );
    s.push_str(&plot(rows, windows));
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

/// The same plot as a PNG (no text: the colours are those of the HTML legend —
/// green ok, red failed, orange shed, blue p99 latency; scenario windows shaded).
pub fn plot_png(rows: &[Row], windows: &[Window]) -> Result<Vec<u8>, png::EncodingError> {
    const W: usize = 1000;
    const H: usize = 360;
    const PAD: usize = 50;
    let mut px = vec![255u8; W * H * 3];
    let mut put = |x: i64, y: i64, c: [u8; 3]| {
        if (0..W as i64).contains(&x) && (0..H as i64).contains(&y) {
            let i = (y as usize * W + x as usize) * 3;
            px[i..i + 3].copy_from_slice(&c);
        }
    };
    let (n, max_calls, max_ms) = extent(rows);
    let x = |s: f64| PAD as f64 + s / n * (W - 2 * PAD) as f64;
    let y = |v: f64, max: f64| (H - PAD) as f64 - v / max * (H - 2 * PAD) as f64;
    let shades = [
        [232, 238, 249],
        [249, 239, 232],
        [238, 249, 232],
        [247, 232, 249],
        [232, 247, 249],
        [249, 247, 232],
    ];
    for (i, win) in windows.iter().enumerate() {
        let (x0, x1) = (
            x(win.start_seconds.max(0.0)) as i64,
            x(win.end_seconds.min(n)) as i64,
        );
        for xx in x0..x1 {
            for yy in PAD as i64..(H - PAD) as i64 {
                put(xx, yy, shades[i % shades.len()]);
            }
        }
    }
    for xx in PAD..W - PAD {
        put(xx as i64, (H - PAD) as i64, [51, 51, 51]);
    }
    for yy in PAD..H - PAD {
        put(PAD as i64, yy as i64, [51, 51, 51]);
    }
    let mut line = |f: &dyn Fn(&Row) -> f64, max: f64, c: [u8; 3]| {
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .map(|r| (x(r.second as f64 + 0.5), y(f(r), max)))
            .collect();
        for w in pts.windows(2) {
            let (a, b) = (w[0], w[1]);
            let steps = ((b.0 - a.0).abs().max((b.1 - a.1).abs()).ceil() as usize).max(1);
            for k in 0..=steps {
                let t = k as f64 / steps as f64;
                let (px_, py_) = (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
                put(px_.round() as i64, py_.round() as i64, c);
                put(px_.round() as i64, py_.round() as i64 + 1, c);
            }
        }
    };
    line(&|r| r.ok as f64, max_calls, [42, 125, 42]);
    line(&|r| r.failed as f64, max_calls, [198, 40, 40]);
    line(&|r| r.shed as f64, max_calls, [239, 108, 0]);
    line(&|r| r.p99_ms, max_ms, [21, 101, 192]);
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, W as u32, H as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.write_header()?.write_image_data(&px)?;
    }
    Ok(out)
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
        let html = page(&rows, &windows, &[], &summary);
        let png = plot_png(&rows, &windows).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert!(html.contains("<svg") && html.contains("baseline") && html.contains("PASS"));
        assert!(
            !html.contains("http://") || html.matches("http://").count() == 1,
            "only the SVG namespace"
        );
    }
}
