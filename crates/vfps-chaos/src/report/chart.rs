//! The timeline chart, drawn with `plotters` as SVG (in `report.html`) and as
//! a PNG (`timeline.png`) that reads on its own: a title, calls per second (ok,
//! failed, shed, offered) above latency (log scale) — each operation's p99 (a
//! namespace delete's designed wait must not read as everyone's stall), or
//! p50, p99 and max of every call in a timeline without them — both with
//! labelled axes, ticks and gridlines; the scenario windows shaded and named,
//! and every fault and heal a labelled vertical marker.

use plotters::{
    coord::{ranged1d::ValueFormatter, types::RangedCoordf64, Shift},
    prelude::*,
    style::{FontTransform, RGBColor},
};

use crate::{
    history::Row,
    operation::Operation,
    scenario::events::{ChaosEvent, EventKind, Window},
};

pub const WIDTH: u32 = 1400;
pub const HEIGHT: u32 = 820;

/// The width of a timeline panel's y labels: the same in every chart drawn
/// under another (the web UI's), so that their time axes line up.
pub(super) const Y_LABEL_AREA: u32 = 80;

/// Where the chart finds a font for its text (Debian: `fonts-dejavu-core`).
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Registers the font once; an error names the paths tried.
fn font() -> anyhow::Result<()> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = FONTS
                .iter()
                .find_map(|p| std::fs::read(p).ok())
                .ok_or_else(|| {
                    format!(
                        "no font for the chart's text (tried {}; apt-get install fonts-dejavu-core)",
                        FONTS.join(", ")
                    )
                })?;
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| "the chart's font is not a valid TrueType font".to_owned())
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// What the chart shows.
pub struct Chart<'a> {
    pub title: &'a str,
    pub rows: &'a [Row],
    pub windows: &'a [Window],
    pub events: &'a [ChaosEvent],
}

pub(super) const OK: RGBColor = RGBColor(42, 125, 42);
pub(super) const FAILED: RGBColor = RGBColor(198, 40, 40);
const SHED: RGBColor = RGBColor(239, 108, 0);
pub(super) const OFFERED: RGBColor = RGBColor(120, 120, 120);
pub(super) const P50: RGBColor = RGBColor(21, 101, 192);
pub(super) const P99: RGBColor = RGBColor(106, 27, 154);
const MAX: RGBColor = RGBColor(160, 160, 200);
/// Each operation's latency line, in [`Operation::ALL`] order.
const OPERATION: [RGBColor; Operation::COUNT] = [
    RGBColor(21, 101, 192),
    RGBColor(0, 131, 143),
    RGBColor(85, 139, 47),
    RGBColor(121, 85, 72),
    RGBColor(230, 81, 0),
    RGBColor(117, 117, 117),
    RGBColor(194, 24, 91),
    RGBColor(69, 39, 160),
    RGBColor(0, 0, 0),
];
pub(super) const FAULT: RGBColor = RGBColor(183, 28, 28);
const HEAL: RGBColor = RGBColor(27, 94, 32);
const SHADES: [RGBColor; 4] = [
    RGBColor(232, 238, 249),
    RGBColor(249, 241, 232),
    RGBColor(236, 247, 232),
    RGBColor(245, 234, 248),
];

pub(super) type DrawResult<E> = Result<(), DrawingAreaErrorKind<E>>;

/// A picture drawn with plotters, rendered as SVG or PNG (`WIDTH` × `HEIGHT`).
pub(super) trait Drawing {
    /// What it is, for errors: "the timeline".
    const WHAT: &'static str;
    /// Width and height in pixels.
    const SIZE: (u32, u32) = (WIDTH, HEIGHT);

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB::ErrorType>;
}

/// `d` as an SVG document.
pub(super) fn svg<D: Drawing>(d: &D) -> anyhow::Result<String> {
    font()?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, D::SIZE).into_drawing_area();
        d.draw(&root)
            .map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", D::WHAT))?;
        root.present()
            .map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", D::WHAT))?;
    }
    Ok(out)
}

/// `d` as a PNG.
pub(super) fn png<D: Drawing>(d: &D) -> anyhow::Result<Vec<u8>> {
    font()?;
    let (width, height) = D::SIZE;
    let mut rgb = vec![255u8; (width * height * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, D::SIZE).into_drawing_area();
        d.draw(&root)
            .map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", D::WHAT))?;
        root.present()
            .map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", D::WHAT))?;
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, width, height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.write_header()?.write_image_data(&rgb)?;
    }
    Ok(out)
}

impl Drawing for Chart<'_> {
    const WHAT: &'static str = "the timeline";

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB::ErrorType> {
        root.fill(&WHITE)?;
        let root = root.titled(self.title, ("sans-serif", 24))?;
        let (top, bottom) = root.split_vertically((HEIGHT as f64 * 0.58) as u32);
        self.calls(&top)?;
        self.latency(&bottom)
    }
}

impl Chart<'_> {
    /// The chart as an SVG document.
    pub fn svg(&self) -> anyhow::Result<String> {
        svg(self)
    }

    /// The chart as a PNG.
    pub fn png(&self) -> anyhow::Result<Vec<u8>> {
        png(self)
    }

    /// The x axis's end: the last row or the last window's end. A scenario
    /// that never ended (its run failed) has no end of its own
    /// (`f64::INFINITY`: it runs to the end of the load) and is drawn to the
    /// axis's end.
    /// Whether the rows have each operation's p99 (timelines saved before
    /// them, and the marker format, do not).
    pub(super) fn per_operation(&self) -> bool {
        self.rows
            .iter()
            .any(|r| r.op_p99_ms.iter().any(|&p| p > 0.0))
    }

    pub(super) fn seconds(&self) -> f64 {
        let last_row = self.rows.len() as f64;
        let last_window = self
            .windows
            .iter()
            .map(|w| w.end_seconds)
            .filter(|end| end.is_finite())
            .fold(0.0, f64::max);
        last_row.max(last_window).max(1.0)
    }

    fn calls<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> DrawResult<DB::ErrorType> {
        let n = self.seconds();
        let most = self
            .rows
            .iter()
            .map(|r| r.offered.max(r.ok + r.failed + r.shed))
            .max()
            .unwrap_or(1)
            .max(1) as f64
            * 1.35;
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d(0f64..n, 0f64..most)?;
        mesh(&mut chart, X_SECONDS, "calls per second")?;
        self.shade(&mut chart, most, true)?;
        let series = |f: fn(&Row) -> u64| -> Vec<(f64, f64)> {
            self.rows
                .iter()
                .map(|r| (r.second as f64 + 0.5, f(r) as f64))
                .collect()
        };
        line(&mut chart, series(|r| r.offered), OFFERED, 1, "offered")?;
        line(&mut chart, series(|r| r.ok), OK, 2, "ok")?;
        line(&mut chart, series(|r| r.failed), FAILED, 2, "failed")?;
        line(&mut chart, series(|r| r.shed), SHED, 2, "shed")?;
        self.markers(&mut chart, most, true)?;
        legend(&mut chart)
    }

    fn latency<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> DrawResult<DB::ErrorType> {
        let n = self.seconds();
        let per_operation = self.per_operation();
        let highest = self
            .rows
            .iter()
            .flat_map(|r| std::iter::once(r.max_ms).chain(r.op_p99_ms))
            .fold(10.0, f64::max)
            * 2.0;
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d(0f64..n, (0.1f64..highest).log_scale())?;
        mesh(&mut chart, X_SECONDS, "latency (ms, log)")?;
        self.shade(&mut chart, highest, false)?;
        if per_operation {
            for op in Operation::ALL {
                let i = op.index();
                let points: Vec<(f64, f64)> = self
                    .rows
                    .iter()
                    .filter(|r| r.op_p99_ms[i] > 0.0)
                    .map(|r| (r.second as f64 + 0.5, r.op_p99_ms[i].max(0.1)))
                    .collect();
                if !points.is_empty() {
                    line(&mut chart, points, OPERATION[i], 2, &p99_label(op))?;
                }
            }
        } else {
            let answered = |f: fn(&Row) -> f64| -> Vec<(f64, f64)> {
                self.rows
                    .iter()
                    .filter(|r| r.max_ms > 0.0)
                    .map(|r| (r.second as f64 + 0.5, f(r).max(0.1)))
                    .collect()
            };
            line(&mut chart, answered(|r| r.max_ms), MAX, 1, "max")?;
            line(&mut chart, answered(|r| r.p99_ms), P99, 2, "p99")?;
            line(&mut chart, answered(|r| r.p50_ms), P50, 2, "p50")?;
        }
        self.markers(&mut chart, highest, false)?;
        legend(&mut chart)
    }

    /// Each scenario's window shaded; named in the upper chart.
    pub(super) fn shade<'a, DB: DrawingBackend + 'a, Y: Ranged<ValueType = f64>>(
        &self,
        chart: &mut Panel<'a, DB, Y>,
        top: f64,
        named: bool,
    ) -> DrawResult<DB::ErrorType> {
        let bottom = chart.y_range().start;
        let last = self.seconds();
        for (i, w) in self.windows.iter().enumerate() {
            let shade = SHADES[i % SHADES.len()];
            chart.draw_series(std::iter::once(Rectangle::new(
                [(w.start_seconds, bottom), (w.end_seconds.min(last), top)],
                shade.filled(),
            )))?;
            if named {
                chart.draw_series(std::iter::once(Text::new(
                    w.scenario.as_str().to_owned(),
                    (
                        w.start_seconds + 0.5,
                        top * if i % 2 == 0 { 0.985 } else { 0.93 },
                    ),
                    ("sans-serif", 13).into_font().color(&BLACK.mix(0.75)),
                )))?;
            }
        }
        Ok(())
    }

    /// A vertical line per fault (red) and heal (green); labelled, rotated, in
    /// the upper chart.
    pub(super) fn markers<'a, DB: DrawingBackend + 'a, Y: Ranged<ValueType = f64>>(
        &self,
        chart: &mut Panel<'a, DB, Y>,
        top: f64,
        labelled: bool,
    ) -> DrawResult<DB::ErrorType> {
        let bottom = chart.y_range().start;
        for e in self
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Fault | EventKind::Heal))
        {
            let color = if e.kind == EventKind::Fault {
                FAULT
            } else {
                HEAL
            };
            chart.draw_series(DashedLineSeries::new(
                [(e.at_seconds, bottom), (e.at_seconds, top)],
                6,
                4,
                color.stroke_width(1),
            ))?;
            if labelled {
                let label: String = e
                    .text
                    .trim_start_matches("healed: ")
                    .chars()
                    .take(34)
                    .collect();
                chart.draw_series(std::iter::once(Text::new(
                    label,
                    (e.at_seconds, top * 0.86),
                    ("sans-serif", 11)
                        .into_font()
                        .transform(FontTransform::Rotate90)
                        .color(&color),
                )))?;
            }
        }
        Ok(())
    }
}

/// The legend of an operation's p99 line; churn's steps are the namespace
/// lifecycle, not a user's calls.
fn p99_label(op: Operation) -> String {
    match op {
        Operation::Churn => "churn p99 (namespace lifecycle)".to_owned(),
        op => format!("{} p99", op.name()),
    }
}

/// The timeline's horizontal axis.
pub(super) const X_SECONDS: &str = "seconds into the load window";

/// A panel: a linear quantity below (time, a rate), both axes labelled,
/// light gridlines.
pub(super) type Panel<'a, DB, Y> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>;

pub(super) fn mesh<'a, DB, Y>(
    chart: &mut Panel<'a, DB, Y>,
    x_desc: &str,
    y_desc: &str,
) -> DrawResult<DB::ErrorType>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
}

pub(super) fn line<'a, DB, Y>(
    chart: &mut Panel<'a, DB, Y>,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    width: u32,
    label: &str,
) -> DrawResult<DB::ErrorType>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64>,
{
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(width)))?
        .label(label)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
    Ok(())
}

fn legend<'a, DB, Y>(chart: &mut Panel<'a, DB, Y>) -> DrawResult<DB::ErrorType>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64>,
{
    legend_at(chart, SeriesLabelPosition::UpperRight)
}

/// The legend where it hides the least (a sweep's last points are on the right).
pub(super) fn legend_at<'a, DB, Y>(
    chart: &mut Panel<'a, DB, Y>,
    position: SeriesLabelPosition,
) -> DrawResult<DB::ErrorType>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64>,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 14))
        .draw()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::scenario::ScenarioName;

    pub(in crate::report) fn sample() -> (Vec<Row>, Vec<Window>, Vec<ChaosEvent>) {
        let rows: Vec<Row> = (0..40)
            .map(|s| Row {
                offered: 50,
                ok: if (15..20).contains(&s) { 10 } else { 50 },
                failed: if (15..20).contains(&s) { 40 } else { 0 },
                p50_ms: 5.0,
                p99_ms: 20.0,
                max_ms: 40.0,
                ..Row::empty(s)
            })
            .collect();
        let windows = vec![
            Window {
                scenario: ScenarioName::new("baseline"),
                start_seconds: 0.0,
                end_seconds: 10.0,
            },
            Window {
                scenario: ScenarioName::new("db-primary-pause"),
                start_seconds: 10.0,
                end_seconds: 40.0,
            },
        ];
        let ev = |at, kind, text: &str| ChaosEvent {
            at_seconds: at,
            scenario: Some(ScenarioName::new("db-primary-pause")),
            kind,
            text: text.into(),
        };
        let events = vec![
            ev(14.0, EventKind::Fault, "paused db-a"),
            ev(24.0, EventKind::Heal, "healed: db-a rejoined"),
        ];
        (rows, windows, events)
    }

    /// A scenario whose run failed never ends (its window's end is infinite):
    /// the chart still ends with the load. (Before, the axis ran to infinity
    /// and drawing its ticks never finished.)
    #[test]
    fn a_scenario_that_never_ended_is_drawn_to_the_end_of_the_load() {
        let (rows, mut windows, events) = sample();
        windows[1].end_seconds = f64::INFINITY;
        let chart = Chart {
            title: "vfps chaos run — FAIL",
            rows: &rows,
            windows: &windows,
            events: &events,
        };
        assert_eq!(chart.seconds(), 40.0);
        let svg = chart.svg().unwrap();
        assert!(svg.contains("db-primary-pause"), "{svg}");
    }

    /// With each operation's p99, the latency panel draws a line per
    /// operation instead of every call's p50, p99 and max.
    #[test]
    fn the_latency_panel_draws_each_operations_p99() {
        let (mut rows, windows, events) = sample();
        for r in &mut rows {
            r.op_p99_ms[Operation::Create.index()] = 4.0;
            r.op_p99_ms[Operation::Churn.index()] = if r.second % 2 == 0 { 1000.0 } else { 0.0 };
        }
        let chart = Chart {
            title: "vfps chaos run — PASS",
            rows: &rows,
            windows: &windows,
            events: &events,
        };
        let svg = chart.svg().unwrap();
        for text in ["\ncreate p99\n", "\nchurn p99 (namespace lifecycle)\n"] {
            assert!(svg.contains(text), "the SVG lacks {text:?}");
        }
        for text in ["\nmax\n", "\np50\n", "\nget p99\n"] {
            assert!(!svg.contains(text), "the SVG has {text:?}");
        }
    }

    #[test]
    fn the_chart_has_a_title_axes_a_legend_and_labelled_markers() {
        let (rows, windows, events) = sample();
        let chart = Chart {
            title: "vfps chaos run — PASS",
            rows: &rows,
            windows: &windows,
            events: &events,
        };
        let svg = chart.svg().unwrap();
        for text in [
            "vfps chaos run",
            "calls per second",
            "latency (ms, log)",
            "seconds into the load window",
            "\nok\n",
            "\nfailed\n",
            "\np99\n",
            "db-primary-pause",
            "paused db-a",
            "db-a rejoined",
        ] {
            assert!(svg.contains(text), "the SVG lacks {text:?}");
        }
        let png = chart.png().unwrap();
        assert_eq!(&png[1..4], b"PNG");
        // Text is drawn into the bitmap: far more than a few colours.
        let decoder = png::Decoder::new(std::io::Cursor::new(&png));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        reader.next_frame(&mut buf).unwrap();
        let colours: std::collections::HashSet<&[u8]> = buf.chunks(3).collect();
        assert!(
            colours.len() > 50,
            "{} colours: no anti-aliased text",
            colours.len()
        );
    }
}
