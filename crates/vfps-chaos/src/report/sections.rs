//! Sections of `report.html` that read the summary alone: the caveats on
//! the verdict, the margins of every budgeted figure, where each failover's
//! seconds went, and what the machine's CPU went to.

use std::fmt::Write;

use super::Summary;
use crate::history::{cpu::Part, failover};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// "Margins": every budgeted figure, its budget and what is left; a thin
/// margin (under a quarter) is a warning, a missed one fails its verdict.
pub fn margins(s: &mut String, summary: &Summary) {
    if summary.margins.is_empty() {
        return;
    }
    s.push_str("<h2>Margins</h2><table><tr><th>figure</th><th>measured</th><th>budget</th><th>margin</th><th></th></tr>");
    for m in &summary.margins {
        let (class, note) = if m.thin() {
            ("invalid", "WARNING: under a quarter of the budget left")
        } else if m.gated && m.left_seconds() < 0.0 {
            ("invalid", "budget missed")
        } else if !m.gated {
            ("", "reference: reported, the run's budgets decide")
        } else {
            ("valid", "")
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{:.1} s</td><td>{:.1} s</td><td>{:.1} s ({:.0} %)</td><td class=\"{class}\">{note}</td></tr>",
            esc(&m.label()),
            m.seconds,
            m.budget_seconds,
            m.left_seconds(),
            m.left_share() * 100.0
        );
    }
    s.push_str("</table><p>Margin: budget minus measured. A figure over its budget fails its verdict; one with less than a quarter of its budget left is a warning, so that a thin margin is seen before it flakes.</p>");
}

/// The caveats on the verdict, shown at the top where the verdict is.
pub fn caveats(s: &mut String, summary: &Summary) {
    if summary.caveats.is_empty() {
        return;
    }
    s.push_str("<div style=\"border:2px solid #c62828;padding:0.5em 1em;margin:1em 0\"><p class=\"invalid\">Caveat on the verdict: the harness's own cost qualifies it (see \"CPU during the load window\").</p><ul>");
    for c in &summary.caveats {
        let _ = write!(s, "<li>{}</li>", esc(c));
    }
    s.push_str("</ul></div>");
}

fn seconds(t: Option<f64>) -> String {
    t.map_or("not seen".to_owned(), |t| format!("+{t:.1} s"))
}

/// "Where each failover's seconds went": every failover's steps after its
/// fault, then each scenario's median and max.
pub fn failovers(s: &mut String, summary: &Summary) {
    if summary.failovers.is_empty() {
        return;
    }
    s.push_str("<h2>Where each failover's seconds went</h2><table><tr><th>scenario</th><th>fault at</th><th>fault</th>");
    for step in failover::STEPS {
        let _ = write!(s, "<th>{step}</th>");
    }
    s.push_str("<th>promoted member</th></tr>");
    for f in &summary.failovers {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{:.1} s</td><td>{}</td>",
            esc(f.scenario.as_str()),
            f.fault_seconds,
            esc(&f.fault)
        );
        for (_, t) in f.steps() {
            let _ = write!(s, "<td>{}</td>", seconds(t));
        }
        let _ = write!(
            s,
            "<td>{}</td></tr>",
            esc(f.promoted.as_deref().unwrap_or("—"))
        );
    }
    s.push_str("</table><table><tr><th>scenario</th><th>failovers</th>");
    for step in failover::STEPS {
        let _ = write!(s, "<th>{step}</th>");
    }
    s.push_str("</tr>");
    for d in failover::distributions(&summary.failovers) {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td>",
            esc(d.scenario.as_str()),
            d.failovers
        );
        for (_, figures) in &d.steps {
            match figures {
                Some((median, max)) => {
                    let _ = write!(s, "<td>{median:.1} / {max:.1} s</td>");
                }
                None => s.push_str("<td>not seen</td>"),
            }
        }
        s.push_str("</tr>");
    }
    s.push_str("</table><p>Seconds after each fault (a kill; for a pause, the pause; for an isolation, the kill that ends it), read from the HA manager's and PostgreSQL's own logs (<code>logs/</code>) and the acknowledgement times in <code>ledger.jsonl</code>; below, median / max per scenario. Leader key expired: a standby found no leader and ran its leader race. Promotion started: a member took the leader key. Promoted: its PostgreSQL accepts writes. First acknowledged write: the first Create vfps acknowledged after the promotion.</p>");
}

/// "CPU during the load window": each part's CPU seconds and share of the
/// machine, the harness's beside the system under test's.
pub fn cpu(s: &mut String, summary: &Summary) {
    let Some(cpu) = &summary.cpu else {
        return;
    };
    let _ = write!(
        s,
        "<h2>CPU during the load window</h2><p>{:.0} s on {} cores; utime + stime from <code>/proc</code>, each process counted with its part.</p><table><tr><th>part</th><th></th><th>CPU s</th><th>cores</th><th>share of the machine</th></tr>",
        cpu.window_seconds, cpu.cores
    );
    let mut row = |what: &str, whose: &str, secs: f64| {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{whose}</td><td>{secs:.1}</td><td>{:.2}</td><td>{:.1} %</td></tr>",
            esc(what),
            secs / cpu.window_seconds.max(f64::MIN_POSITIVE),
            100.0 * cpu.share(secs)
        );
    };
    for part in Part::ALL {
        if let Some(secs) = cpu.parts.get(&part) {
            row(
                part.name(),
                if part.harness() {
                    "harness"
                } else {
                    "system under test"
                },
                *secs,
            );
        }
    }
    row("the harness in all", "", cpu.harness_seconds());
    row("the system under test in all", "", cpu.service_seconds());
    row("the whole machine (anything)", "", cpu.machine_busy_seconds);
    let _ = write!(
        s,
        "</table><p>Bounds: the harness {:.0} % of the machine, the browser probe {:.0} %; past either, the verdict carries a caveat (its outages are not the service's alone).</p>",
        100.0 * crate::checker::cost::MAX_HARNESS_SHARE,
        100.0 * crate::checker::cost::MAX_PROBE_SHARE
    );
}
