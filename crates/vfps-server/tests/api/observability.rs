//! What the metrics port says about Creates: the coalescer's batch sizes, queue
//! waits, statement round trips and queue depth, and retries by cause; and
//! about Gets: their lookup batches.

use crate::{
    helpers::{backend_env, spawn_app, spawn_app_with, Backend},
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

/// Concurrent Gets each get their own answer (`NOT_FOUND` for an unknown
/// pseudonym, whichever batch it shared with known ones). On PostgreSQL they
/// are looked up in batches (`vfps_get_batch_size`); on SQLite directly.
async fn concurrent_gets_each_get_their_own_answer(backend: Backend) {
    let app = spawn_app(backend).await;
    app.namespace("g", 5, 16).await;
    let originals = ["a", "b", "c"];
    let mut known = Vec::new();
    for o in originals {
        known.push(app.create("g", o).await.unwrap().pseudonym_value);
    }
    const GETS: usize = 96;
    let calls: Vec<_> = (0..GETS)
        .map(|i| {
            let mut client = app.pseudonyms.clone();
            let pseudonym_value = known
                .get(i % 4)
                .cloned()
                .unwrap_or_else(|| "p-unknown".into());
            tokio::spawn(async move {
                let request = vfps_proto::v1::PseudonymServiceGetRequest {
                    namespace: "g".into(),
                    pseudonym_value,
                };
                (i, client.get(request).await)
            })
        })
        .collect();
    for call in calls {
        let (i, answer) = call.await.unwrap();
        match originals.get(i % 4) {
            Some(original) => {
                let p = answer.unwrap().into_inner().pseudonym.unwrap();
                assert_eq!(p.original_value.as_deref(), Some(*original), "call {i}");
            }
            None => assert_eq!(
                answer.unwrap_err().code(),
                tonic::Code::NotFound,
                "call {i}"
            ),
        }
    }
    let text = app.metrics_text().await;
    let batches = sample(&text, "vfps_get_batch_size_count");
    let rows = sample(&text, "vfps_get_batch_size_sum");
    match backend {
        Backend::Postgres => assert!(
            batches >= 1.0 && rows >= batches && rows <= GETS as f64,
            "{batches} batches of {rows} rows for {GETS} Gets"
        ),
        Backend::Sqlite => assert_eq!(batches, 0.0, "SQLite reads are not batched"),
    }
}

/// Upstream's own metric names, which existing dashboards and alerts query:
/// `vfps_upsert_duration_seconds` (one upsert attempt per Create),
/// `vfps_batch_upsert_duration_seconds` (one statement per batch), and the
/// cache gauges `vfps_cache_entries`, `vfps_cache_hits_total`,
/// `vfps_cache_misses_total`.
async fn upstreams_metric_names_are_exported(backend: Backend) {
    let mut env = crate::helpers::backend_env(backend).0;
    env.push((
        "Pseudonymization__Caching__Pseudonyms__IsEnabled".into(),
        "true".into(),
    ));
    let app = crate::helpers::spawn_app_with(env).await;
    app.namespace("m", 5, 16).await;
    for original in ["one", "two"] {
        app.create("m", original).await.unwrap();
    }
    // The repeated original is answered from the cache while the cache is
    // trusted: always on SQLite, on PostgreSQL while the monitor's lease
    // (1 s from each probe) holds — on a loaded machine a probe can come late
    // and the cache, unsure, misses and upserts. Repeated until it hits.
    let mut text = String::new();
    for _ in 0..50 {
        app.create("m", "one").await.unwrap();
        text = app.metrics_text().await;
        if sample(&text, "vfps_cache_hits_total") >= 1.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        sample(&text, "vfps_cache_hits_total"),
        1.0,
        "the repeated original: {text}"
    );
    // Every miss is one upsert attempt and one batch statement.
    let misses = sample(&text, "vfps_cache_misses_total");
    assert!(misses >= 2.0, "{text}");
    assert_eq!(
        sample(&text, "vfps_upsert_duration_seconds_count"),
        misses,
        "{text}"
    );
    assert!(sample(&text, "vfps_upsert_duration_seconds_sum") > 0.0);
    assert_eq!(
        sample(&text, "vfps_batch_upsert_duration_seconds_count"),
        misses
    );
    assert_eq!(
        sample(
            &text,
            "vfps_batch_upsert_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        misses
    );
    assert_eq!(
        sample(&text, "vfps_cache_entries"),
        3.0,
        "two pseudonyms and their namespace"
    );
}

on_both_backends!(
    creates_show_in_the_latency_metrics,
    concurrent_gets_each_get_their_own_answer,
    upstreams_metric_names_are_exported
);

/// Every metric the chart's Grafana dashboard queries is one the server
/// exports (a renamed metric would leave a panel silently empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_queries_only_exported_metrics() {
    let (mut env, _) = backend_env(Backend::Sqlite);
    env.push(("VFPS_METRICS_COUNT_INTERVAL".into(), "100ms".into()));
    let app = spawn_app_with(env).await;
    app.namespace("m", 5, 16).await;
    app.create("m", "one").await.unwrap();
    // The per-namespace gauge appears with the first count after a namespace.
    let mut text = app.metrics_text().await;
    for _ in 0..50 {
        if text.contains("vfps_pseudonyms{") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        text = app.metrics_text().await;
    }
    let exported: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_whitespace().next())
        .collect();
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../charts/vfps/dashboards/vfps.json"
    ))
    .unwrap();
    let json: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let mut queried = Vec::new();
    for panel in json["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("vfps_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                queried.push(name);
            }
        }
    }
    assert!(queried.len() >= 8, "{queried:?}");
    for name in queried {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(&name);
        assert!(
            exported.contains(family),
            "the dashboard queries {name}, which the server does not export"
        );
    }
}
