//! Metrics of CSV jobs: rows, batches, checkpoints, takeovers and how runs end.

use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts, Registry};
use vfps_jobs::runner::{Observer, Outcome};

pub struct JobMetrics {
    rows: IntCounter,
    batch_round_trip: Histogram,
    checkpoint: Histogram,
    takeovers: IntCounter,
    runs: IntCounterVec,
}

const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

impl JobMetrics {
    pub(super) fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let m = Self {
            rows: IntCounter::new(
                "vfps_csv_job_rows_total",
                "CSV rows written by this replica's job runners (redone rows included)",
            )?,
            batch_round_trip: Histogram::with_opts(
                HistogramOpts::new(
                    "vfps_csv_job_batch_seconds",
                    "One batch of a CSV job answered by the database (upsert or lookup)",
                )
                .buckets(SECONDS.to_vec()),
            )?,
            checkpoint: Histogram::with_opts(
                HistogramOpts::new(
                    "vfps_csv_job_checkpoint_seconds",
                    "One checkpoint: the output made durable and the progress recorded",
                )
                .buckets(SECONDS.to_vec()),
            )?,
            takeovers: IntCounter::new(
                "vfps_csv_job_takeovers_total",
                "CSV jobs this replica resumed from another runner's checkpoint",
            )?,
            runs: IntCounterVec::new(
                Opts::new(
                    "vfps_csv_job_runs_total",
                    "Runs of CSV jobs on this replica, by how they ended",
                ),
                &["outcome"],
            )?,
        };
        registry.register(Box::new(m.rows.clone()))?;
        registry.register(Box::new(m.batch_round_trip.clone()))?;
        registry.register(Box::new(m.checkpoint.clone()))?;
        registry.register(Box::new(m.takeovers.clone()))?;
        registry.register(Box::new(m.runs.clone()))?;
        Ok(m)
    }
}

impl Observer for JobMetrics {
    fn rows(&self, rows: u64) {
        self.rows.inc_by(rows);
    }
    fn batch(&self, _rows: usize, took: Duration) {
        self.batch_round_trip.observe(took.as_secs_f64());
    }
    fn checkpoint(&self, took: Duration) {
        self.checkpoint.observe(took.as_secs_f64());
    }
    fn takeover(&self) {
        self.takeovers.inc();
    }
    fn ended(&self, outcome: &Outcome) {
        self.runs.with_label_values(&[outcome.name()]).inc();
    }
}
