//! The web UI's timeline — the browser probe's `ui-timeline.csv` — as a chart
//! drawn under the API's (in `report.html`, and as `ui-timeline.png`) on the
//! same time axis, with the same scenario windows shaded and the same fault
//! and heal markers: above, the creates and lookups through the UI begun in
//! each second (one step every 3 s), ok or failed, and whether the browser
//! was sent back to the sign-in; below,
//! how long each step took (log scale).

use std::path::Path;

use plotters::{chart::SeriesAnno, coord::Shift, prelude::*, style::RGBColor};

use super::chart::{
    line, mesh, Chart, DrawResult, Drawing, Panel, FAILED, OK, WIDTH, X_SECONDS, Y_LABEL_AREA,
};
use crate::history::ui::{parse_ui_timeline, UiRow};

pub const HEIGHT: u32 = 560;

/// The chart's title, and the page's heading above it.
pub const TITLE: &str = "Web UI (browser probe)";

/// The file the browser probe leaves in the run directory.
pub const FILE: &str = "ui-timeline.csv";

/// The browser probe's timeline as the report finds it in the run directory.
#[derive(Debug, Clone, PartialEq)]
pub enum UiTimeline {
    /// No browser probe ran: the report is the API's alone.
    Absent,
    Read(Vec<UiRow>),
    /// The file is there but cannot be read: the page says why.
    Unreadable(String),
}

impl UiTimeline {
    pub fn read(dir: &Path) -> Self {
        let path = dir.join(FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => match parse_ui_timeline(&text) {
                Ok(rows) => UiTimeline::Read(rows),
                Err(e) => UiTimeline::Unreadable(e.to_string()),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => UiTimeline::Absent,
            Err(e) => UiTimeline::Unreadable(format!("cannot read {}: {e}", path.display())),
        }
    }
}

/// What the chart shows.
pub struct UiChart<'a> {
    /// The API's chart, whose time axis, windows and markers this one shares.
    pub api: &'a Chart<'a>,
    pub rows: &'a [UiRow],
}

const SIGNED_OUT: RGBColor = RGBColor(106, 27, 154);
const CREATE: RGBColor = RGBColor(21, 101, 192);
const LOOKUP: RGBColor = RGBColor(0, 131, 143);

/// The lanes of the upper panel, bottom up: (name, lower edge).
const LANES: [(&str, f64); 3] = [("session", 0.0), ("lookup", 1.0), ("create", 2.0)];
/// Above the lanes, room for the scenarios' names and the legend.
const LANES_TOP: f64 = 4.4;

impl Drawing for UiChart<'_> {
    const WHAT: &'static str = "the web UI's timeline";
    const SIZE: (u32, u32) = (WIDTH, HEIGHT);

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB::ErrorType> {
        root.fill(&WHITE)?;
        let root = root.titled(TITLE, ("sans-serif", 24))?;
        let (top, bottom) = root.split_vertically((HEIGHT as f64 * 0.55) as u32);
        self.outcomes(&top)?;
        self.step_time(&bottom)
    }
}

/// How a lane's second ended: failed if any step failed, ok if one worked.
fn outcome(ok: u32, failed: u32) -> Option<RGBColor> {
    match (ok, failed) {
        (_, 1..) => Some(FAILED),
        (1.., 0) => Some(OK),
        (0, 0) => None,
    }
}

impl UiChart<'_> {
    pub fn svg(&self) -> anyhow::Result<String> {
        super::chart::svg(self)
    }

    pub fn png(&self) -> anyhow::Result<Vec<u8>> {
        super::chart::png(self)
    }

    /// The rows on the API's time axis.
    fn rows(&self) -> impl Iterator<Item = &UiRow> {
        let end = self.api.seconds();
        self.rows.iter().filter(move |r| (r.second as f64) < end)
    }

    fn outcomes<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> DrawResult<DB::ErrorType> {
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d(0f64..self.api.seconds(), 0f64..LANES_TOP)?;
        chart
            .configure_mesh()
            .x_desc(X_SECONDS)
            .y_desc("each second")
            // Ticks every half lane; a lane is named at its middle.
            .y_labels(10)
            .y_label_formatter(&|y| {
                LANES
                    .iter()
                    .find(|(_, lower)| (y - (lower + 0.5)).abs() < 0.01)
                    .map_or_else(String::new, |(name, _)| (*name).to_owned())
            })
            .disable_y_mesh()
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .light_line_style(RGBColor(238, 238, 238))
            .draw()?;
        self.api.shade(&mut chart, LANES_TOP, true)?;
        let cell = |r: &UiRow, lower: f64, color: RGBColor| {
            Rectangle::new(
                [
                    (r.second as f64, lower + 0.12),
                    (r.second as f64 + 1.0, lower + 0.88),
                ],
                color.filled(),
            )
        };
        let lanes = |color: RGBColor| -> Vec<Rectangle<(f64, f64)>> {
            self.rows()
                .flat_map(|r| {
                    let create = (outcome(r.create_ok, r.create_failed) == Some(color))
                        .then(|| cell(r, 2.0, color));
                    let lookup = (outcome(r.lookup_ok, r.lookup_failed) == Some(color))
                        .then(|| cell(r, 1.0, color));
                    create.into_iter().chain(lookup)
                })
                .collect()
        };
        for (color, label) in [(OK, "ok"), (FAILED, "failed")] {
            swatch(chart.draw_series(lanes(color))?, color, label);
        }
        let signed_out = self
            .rows()
            .filter(|r| r.signed_out > 0)
            .map(|r| cell(r, 0.0, SIGNED_OUT));
        swatch(
            chart.draw_series(signed_out)?,
            SIGNED_OUT,
            "signed out (sent back to the sign-in)",
        );
        self.api.markers(&mut chart, LANES_TOP, false)?;
        legend(&mut chart)
    }

    fn step_time<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> DrawResult<DB::ErrorType> {
        let highest = self
            .rows()
            .flat_map(|r| [r.create_ms, r.lookup_ms])
            .fold(100.0, f64::max)
            * 2.0;
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d(0f64..self.api.seconds(), (1f64..highest).log_scale())?;
        mesh(&mut chart, X_SECONDS, "step time (ms, log)")?;
        self.api.shade(&mut chart, highest, false)?;
        let took = |ms: fn(&UiRow) -> f64| -> Vec<(f64, f64)> {
            self.rows()
                .filter(|r| ms(r) > 0.0)
                .map(|r| (r.second as f64 + 0.5, ms(r).max(1.0)))
                .collect()
        };
        line(&mut chart, took(|r| r.create_ms), CREATE, 2, "create")?;
        line(&mut chart, took(|r| r.lookup_ms), LOOKUP, 2, "lookup")?;
        let failed = self.rows().flat_map(|r| {
            let at = r.second as f64 + 0.5;
            let create = (r.create_failed > 0 && r.create_ms > 0.0).then_some((at, r.create_ms));
            let lookup = (r.lookup_failed > 0 && r.lookup_ms > 0.0).then_some((at, r.lookup_ms));
            create
                .into_iter()
                .chain(lookup)
                .map(|(x, ms)| Circle::new((x, ms.max(1.0)), 4, FAILED.filled()))
        });
        chart
            .draw_series(failed)?
            .label("failed step")
            .legend(|(x, y)| Circle::new((x + 9, y), 4, FAILED.filled()));
        self.api.markers(&mut chart, highest, false)?;
        legend(&mut chart)
    }
}

/// A series' legend entry: a filled square of its colour.
fn swatch<DB: DrawingBackend>(series: &mut SeriesAnno<'_, DB>, color: RGBColor, label: &str) {
    series
        .label(label)
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
}

fn legend<'a, DB, Y>(chart: &mut Panel<'a, DB, Y>) -> DrawResult<DB::ErrorType>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64>,
{
    super::chart::legend_at(chart, SeriesLabelPosition::UpperRight)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<UiRow> {
        (0..40)
            .map(|second| {
                let down = (15..20).contains(&second);
                UiRow {
                    second,
                    create_ok: u32::from(!down),
                    create_failed: u32::from(down),
                    lookup_ok: u32::from(!down),
                    lookup_failed: u32::from(down),
                    create_ms: if down { 3000.0 } else { 120.0 },
                    lookup_ms: 80.0,
                    signed_out: u32::from(second == 17),
                }
            })
            .collect()
    }

    #[test]
    fn the_ui_chart_shares_the_api_charts_axis_windows_and_markers() {
        let (api_rows, windows, events) = super::super::chart::tests::sample();
        let api = Chart {
            title: "vfps chaos run — PASS",
            rows: &api_rows,
            windows: &windows,
            events: &events,
        };
        let rows = rows();
        let ui = UiChart {
            api: &api,
            rows: &rows,
        };
        let svg = ui.svg().unwrap();
        for text in [
            TITLE,
            "each second",
            "step time (ms, log)",
            "seconds into the load window",
            "\ncreate\n",
            "\nlookup\n",
            "\nsession\n",
            "\nok\n",
            "\nfailed\n",
            "signed out",
            "\nfailed step\n",
            "db-primary-pause",
        ] {
            assert!(svg.contains(text), "the SVG lacks {text:?}");
        }
        // The same time axis as the API's: its ticks at the same places.
        let tick_x = |svg: &str, label: &str| -> Vec<String> {
            svg.split("<text x=\"")
                .filter(|t| t.contains(&format!(">\n{label}\n</text>")))
                .map(|t| t.split('"').next().unwrap().to_owned())
                .collect()
        };
        let api_svg = api.svg().unwrap();
        for label in ["5.0", "35.0"] {
            let (api_x, ui_x) = (tick_x(&api_svg, label), tick_x(&svg, label));
            assert_eq!(
                (api_x.len(), ui_x.len()),
                (2, 2),
                "{label}: a tick each panel"
            );
            assert!(
                ui_x.iter().all(|x| *x == api_x[0]),
                "{label}: {api_x:?} {ui_x:?}"
            );
        }
        let png = ui.png().unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let decoder = png::Decoder::new(std::io::Cursor::new(&png));
        let info = decoder.read_info().unwrap();
        assert_eq!((info.info().width, info.info().height), (WIDTH, HEIGHT));
    }

    #[test]
    fn the_ui_timeline_is_absent_read_or_unreadable() {
        let dir = vfps_testkit::scratch_dir("report-ui-timeline");
        assert_eq!(UiTimeline::read(&dir), UiTimeline::Absent);
        std::fs::write(dir.join(FILE), crate::history::ui::ui_timeline_csv(&rows())).unwrap();
        assert_eq!(UiTimeline::read(&dir), UiTimeline::Read(rows()));
        std::fs::write(dir.join(FILE), "second,whatever\n").unwrap();
        let UiTimeline::Unreadable(e) = UiTimeline::read(&dir) else {
            panic!("a bad header is read")
        };
        assert!(e.contains("line 1"), "{e}");
    }
}
