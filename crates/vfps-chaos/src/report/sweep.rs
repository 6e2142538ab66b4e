//! The capacity sweep's chart (`capacity.svg`, `capacity.png`), drawn like the
//! timeline ([`super::chart`]): achieved against offered calls per second
//! above latency (p50, p99, log scale) against offered calls per second; the
//! p99 target a dashed line, the knee a labelled vertical marker, each step a
//! dot — red where it broke.

use plotters::{coord::Shift, prelude::*};

use super::chart::{
    self, legend_at, line, mesh, DrawResult, Drawing, Panel, FAILED, FAULT, HEIGHT, OFFERED, OK,
    P50, P99,
};

/// One step of a sweep, as drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPoint {
    pub offered_per_second: f64,
    pub achieved_per_second: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// p99 within the target and no failure.
    pub held: bool,
}

/// What the chart shows.
pub struct SweepChart<'a> {
    pub title: &'a str,
    pub points: &'a [SweepPoint],
    pub p99_target_ms: f64,
    pub knee_per_second: Option<f64>,
}

const X_OFFERED: &str = "offered calls per second (step)";

impl SweepChart<'_> {
    pub fn svg(&self) -> anyhow::Result<String> {
        chart::svg(self)
    }

    pub fn png(&self) -> anyhow::Result<Vec<u8>> {
        chart::png(self)
    }

    fn most_offered(&self) -> f64 {
        self.points
            .iter()
            .map(|p| p.offered_per_second)
            .fold(1.0, f64::max)
            * 1.08
    }

    fn rates<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> DrawResult<DB::ErrorType> {
        let x_max = self.most_offered();
        let y_max = self
            .points
            .iter()
            .map(|p| p.achieved_per_second.max(p.offered_per_second))
            .fold(1.0, f64::max)
            * 1.25;
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        mesh(&mut chart, X_OFFERED, "calls per second")?;
        line(
            &mut chart,
            vec![(0.0, 0.0), (x_max, x_max)],
            OFFERED,
            1,
            "offered",
        )?;
        let achieved: Vec<(f64, f64)> = self
            .points
            .iter()
            .map(|p| (p.offered_per_second, p.achieved_per_second))
            .collect();
        line(&mut chart, achieved.clone(), OK, 2, "achieved (ok/s)")?;
        self.dots(&mut chart, achieved)?;
        self.knee(&mut chart, y_max, true)?;
        legend_at(&mut chart, SeriesLabelPosition::UpperLeft)
    }

    fn latency<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> DrawResult<DB::ErrorType> {
        let x_max = self.most_offered();
        let highest = self
            .points
            .iter()
            .filter_map(|p| p.p99_ms)
            .fold(self.p99_target_ms, f64::max)
            * 2.0;
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, (0.1f64..highest).log_scale())?;
        mesh(&mut chart, X_OFFERED, "latency (ms, log)")?;
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, self.p99_target_ms), (x_max, self.p99_target_ms)],
                8,
                5,
                FAILED.stroke_width(1),
            ))?
            .label(format!("p99 target {} ms", self.p99_target_ms))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], FAILED.stroke_width(1)));
        let of = |f: fn(&SweepPoint) -> Option<f64>| -> Vec<(f64, f64)> {
            self.points
                .iter()
                .filter_map(|p| f(p).map(|v| (p.offered_per_second, v.max(0.1))))
                .collect()
        };
        line(&mut chart, of(|p| p.p99_ms), P99, 2, "p99")?;
        line(&mut chart, of(|p| p.p50_ms), P50, 2, "p50")?;
        self.dots(&mut chart, of(|p| p.p99_ms))?;
        self.knee(&mut chart, highest, false)?;
        legend_at(&mut chart, SeriesLabelPosition::UpperLeft)
    }

    /// A dot per step: green where it held, red where it broke.
    fn dots<'a, DB: DrawingBackend + 'a, Y: Ranged<ValueType = f64>>(
        &self,
        chart: &mut Panel<'a, DB, Y>,
        at: Vec<(f64, f64)>,
    ) -> DrawResult<DB::ErrorType> {
        let held = |x: f64| {
            self.points
                .iter()
                .find(|p| p.offered_per_second == x)
                .is_some_and(|p| p.held)
        };
        chart.draw_series(at.into_iter().map(|(x, y)| {
            let color = if held(x) { OK } else { FAILED };
            Circle::new((x, y), 4, color.filled())
        }))?;
        Ok(())
    }

    /// The knee as a dashed vertical line, labelled in the upper panel.
    fn knee<'a, DB: DrawingBackend + 'a, Y: Ranged<ValueType = f64>>(
        &self,
        chart: &mut Panel<'a, DB, Y>,
        top: f64,
        labelled: bool,
    ) -> DrawResult<DB::ErrorType> {
        let Some(knee) = self.knee_per_second else {
            return Ok(());
        };
        let bottom = chart.y_range().start;
        chart.draw_series(DashedLineSeries::new(
            [(knee, bottom), (knee, top)],
            6,
            4,
            FAULT.stroke_width(1),
        ))?;
        if labelled {
            chart.draw_series(std::iter::once(Text::new(
                format!("knee {knee:.0}/s"),
                (knee, top * 0.95),
                ("sans-serif", 14).into_font().color(&FAULT),
            )))?;
        }
        Ok(())
    }
}

impl Drawing for SweepChart<'_> {
    const WHAT: &'static str = "the capacity sweep";

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB::ErrorType> {
        root.fill(&WHITE)?;
        let root = root.titled(self.title, ("sans-serif", 24))?;
        let (top, bottom) = root.split_vertically((HEIGHT as f64 * 0.48) as u32);
        self.rates(&top)?;
        self.latency(&bottom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_chart_has_its_axes_the_target_the_knee_and_a_legend() {
        let points: Vec<SweepPoint> = [(60.0, 11.0), (120.0, 11.5), (180.0, 14.0), (240.0, 190.0)]
            .into_iter()
            .map(|(rate, p99)| SweepPoint {
                offered_per_second: rate,
                achieved_per_second: f64::min(rate, 200.0),
                p50_ms: Some(10.5),
                p99_ms: Some(p99),
                held: p99 <= 100.0,
            })
            .collect();
        let chart = SweepChart {
            title: "vfps capacity sweep",
            points: &points,
            p99_target_ms: 100.0,
            knee_per_second: Some(180.0),
        };
        let svg = chart.svg().unwrap();
        for text in [
            "vfps capacity sweep",
            "offered calls per second (step)",
            "calls per second",
            "latency (ms, log)",
            "p99 target 100 ms",
            "knee 180/s",
            "\nachieved (ok/s)\n",
            "\np99\n",
            "\np50\n",
        ] {
            assert!(svg.contains(text), "the SVG lacks {text:?}");
        }
        assert_eq!(&chart.png().unwrap()[1..4], b"PNG");
        let without_knee = SweepChart {
            knee_per_second: None,
            ..chart
        };
        assert!(!without_knee.svg().unwrap().contains("knee"));
    }
}
