//! The baseline: pgbench running the same statements against the same server.

pub(super) const UPSERT: &str = "INSERT INTO pseudonyms (namespace, original_value, pseudonym_value, created_at, last_updated_at)
  VALUES ('bench', gen_random_uuid()::text, md5(random()::text), now(), now())
  ON CONFLICT DO NOTHING;";

/// Rows per statement and clients of the database's own ceiling: the same
/// rows inserted as vfps's coalescer would at its largest, with pgbench's cheap
/// client in place of gRPC.
pub(super) const BATCH_ROWS: usize = 32;

pub(super) const BATCH_CLIENTS: usize = 8;

/// [`UPSERT`] with [`BATCH_ROWS`] rows per statement.
pub(super) fn batch_upsert() -> String {
    format!(
        "INSERT INTO pseudonyms (namespace, original_value, pseudonym_value, created_at, last_updated_at)
  SELECT 'bench', gen_random_uuid()::text, md5(random()::text), now(), now()
  FROM generate_series(1, {BATCH_ROWS}) ORDER BY 2
  ON CONFLICT DO NOTHING;"
    )
}

/// Rows `lookup-1` … `lookup-N` that Get and pgbench's SELECT look up, with the
/// pseudonym value `sha256(k)` in hex, computable on both sides.
pub(super) const LOOKUP_ROWS: u64 = 100_000;

/// The lookup row (`1..=LOOKUP_ROWS`) client `c` reads on its `i`-th call:
/// spread over the rows, different per client.
pub(super) fn lookup_key(c: usize, i: u64) -> u64 {
    (c as u64 * 7919 + i * 104_729) % LOOKUP_ROWS + 1
}

/// The lookup SELECT of a Get, as pgbench runs it.
pub(super) const LOOKUP: &str = "\\set k random(1, 100000)
SELECT namespace, original_value, pseudonym_value, created_at, last_updated_at
  FROM pseudonyms WHERE namespace = 'bench' AND pseudonym_value = encode(sha256(:k::text::bytea), 'hex');";

/// pgbench's tps for `sql` with `clients` clients, prepared statements.
pub(super) fn pgbench(
    cluster: &vfps_testkit::PgCluster,
    db: &vfps_testkit::TestDatabase,
    sql: &str,
    clients: usize,
    seconds: u64,
) -> f64 {
    let script = std::env::temp_dir().join(format!("vfps-bench-{}.sql", std::process::id()));
    std::fs::write(&script, sql).unwrap();
    let out = std::process::Command::new(cluster.bindir().join("pgbench"))
        .args([
            "-n",
            "-h",
            "127.0.0.1",
            "-p",
            &cluster.port().to_string(),
            "-U",
            &db.name,
        ])
        .args([
            "-c",
            &clients.to_string(),
            "-j",
            if clients > 1 { "2" } else { "1" },
            "-M",
            "prepared",
            "-T",
            &seconds.to_string(),
            "-f",
        ])
        .arg(&script)
        .arg(&db.name)
        .env("PGPASSWORD", "pw")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pgbench failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .expect("pgbench printed tps")
}

/// The rows Gets look up and re-Creates find: `lookup-<k>` for `k` in
/// `1..=LOOKUP_ROWS`, pseudonym `sha256(k)` in hex.
pub(super) fn insert_lookup_rows(
    cluster: &vfps_testkit::PgCluster,
    db: &vfps_testkit::TestDatabase,
) {
    cluster
        .psql(
            &db.name,
            &format!(
                "INSERT INTO pseudonyms SELECT 'bench', 'lookup-' || k, \
                 encode(sha256(k::text::bytea), 'hex'), now(), now() \
                 FROM generate_series(1, {LOOKUP_ROWS}) k ON CONFLICT DO NOTHING"
            ),
        )
        .unwrap();
    // Vacuumed now, not by autovacuum in the middle of the Gets: the rows just
    // inserted (the Creates' and these) would have it run during the Get phase,
    // on the Gets' cores, and long before pgbench's SELECTs.
    cluster
        .psql(&db.name, "VACUUM (ANALYZE) pseudonyms")
        .unwrap();
}
