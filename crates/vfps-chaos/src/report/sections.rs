//! Sections of `report.html` that read the summary alone: the margins of
//! every budgeted figure.

use std::fmt::Write;

use super::Summary;

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
