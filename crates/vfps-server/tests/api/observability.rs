//! What the metrics port says about Creates: the coalescer's batch sizes, queue
//! waits, statement round trips and queue depth, and retries by cause.

use crate::{
    helpers::{spawn_app, Backend},
    on_both_backends,
};

/// The value of the one sample whose name and labels are exactly `series`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

async fn creates_show_in_the_latency_metrics(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("m", 5, 16).await;
    for original in ["one", "two", "one"] {
        app.create("m", original).await.unwrap();
    }
    let text = app.metrics_text().await;

    let batches = sample(&text, "vfps_create_batch_size_count");
    assert!(batches >= 3.0, "one batch per sequential Create: {batches}");
    assert!(
        sample(&text, "vfps_create_batch_size_sum") >= batches,
        "every batch has at least one row"
    );
    assert!(sample(&text, "vfps_create_batch_size_bucket{le=\"1\"}") >= 1.0);
    assert_eq!(
        sample(&text, "vfps_create_queue_wait_seconds_count"),
        batches,
        "one wait per caller, and every caller was alone in its batch"
    );
    let waited = sample(&text, "vfps_create_queue_wait_seconds_sum");
    assert!((0.0..5.0).contains(&waited), "{waited}");
    assert_eq!(
        sample(&text, "vfps_create_batch_round_trip_seconds_count"),
        batches,
        "one statement per batch"
    );
    let round_trips = sample(&text, "vfps_create_batch_round_trip_seconds_sum");
    assert!(round_trips > 0.0 && round_trips < 30.0, "{round_trips}");
    assert_eq!(
        sample(&text, "vfps_create_queue_depth"),
        0.0,
        "nothing waits once every Create is answered"
    );
    for reason in ["unavailable", "timeout", "serialization", "overloaded"] {
        assert_eq!(
            sample(
                &text,
                &format!("vfps_store_retries_total{{reason=\"{reason}\"}}")
            ),
            0.0,
            "{reason}: no retries against a healthy database"
        );
    }
}

on_both_backends!(creates_show_in_the_latency_metrics);
