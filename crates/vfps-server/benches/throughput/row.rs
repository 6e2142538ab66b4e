//! One concurrency's row: vfps's Create/s and Get/s against pgbench's on the same
//! server, CPU per 1,000 Creates against its budget, latencies and memory.

use super::*;

/// Targets of the performance issue, printed next to each ratio.
pub(super) const CREATE_TARGET_ONE: f64 = 0.85;

pub(super) const CREATE_TARGET_MANY: f64 = 2.0;

pub(super) const GET_TARGET: f64 = 1.5;

/// The Create target at `clients`.
pub(super) fn create_target(clients: usize) -> f64 {
    if clients == 1 {
        CREATE_TARGET_ONE
    } else {
        CREATE_TARGET_MANY
    }
}

/// Where a Create's time went, means in ms: as its client saw it, in the
/// server, waiting in the coalescer's queue, and the batch statement's round
/// trip (its commit included).
#[derive(Clone, Copy)]
pub(super) struct CreateTime {
    pub(super) client_ms: f64,
    pub(super) server_ms: f64,
    pub(super) wait_ms: f64,
    pub(super) statement_ms: f64,
}

/// One row of results at one concurrency.
pub(super) struct Row {
    pub(super) clients: usize,
    pub(super) vfps_create: f64,
    pub(super) create_latency: (f64, f64),
    pub(super) pgbench_tps: f64,
    /// CPU-seconds per 1,000 Creates: clients, server, whole machine.
    pub(super) create_cpu: CpuSplit,
    /// Mean rows per upsert statement.
    pub(super) create_batch: f64,
    pub(super) create_time: CreateTime,
    /// Whole-machine CPU-seconds per 1,000 pgbench upserts.
    pub(super) pgbench_cpu: f64,
    pub(super) get_cpu: CpuSplit,
    pub(super) get_batch: f64,
    pub(super) pgbench_select_cpu: f64,
    /// CPU-seconds per 1,000 health Checks.
    pub(super) health_cpu: CpuSplit,
    /// gRPC health Checks/s with the same clients and channels: a call that
    /// touches no database, the most calls/s this client and server pair can
    /// make on this machine whatever the database does.
    pub(super) grpc_ceiling: f64,
    /// Rows/s of [`batch_upsert`] from pgbench with [`BATCH_CLIENTS`] clients:
    /// what the database alone can insert, batched, on this machine.
    pub(super) db_ceiling: f64,
    /// Server resident memory after the Create phase, and its peak, MiB.
    pub(super) rss: (f64, f64),
    pub(super) vfps_get: f64,
    pub(super) get_latency: (f64, f64),
    pub(super) pgbench_select_tps: f64,
    /// Creates of originals that already have a pseudonym (the lookup rows).
    pub(super) vfps_recreate: f64,
    pub(super) recreate_latency: (f64, f64),
    pub(super) sqlite_create: f64,
    pub(super) sqlite_latency: (f64, f64),
}

pub(super) async fn measure(
    cluster: &vfps_testkit::PgCluster,
    clients: usize,
    seconds: u64,
) -> Row {
    let (db, server) = postgres_server(cluster, clients, Vec::new()).await;

    eprintln!("[{clients} clients] warming up ...");
    creates(&server.grpc, clients, 2, None).await;
    eprintln!("[{clients} clients] vfps Create (PostgreSQL) ...");
    let batches = histogram(&server, "vfps_create_batch_size").await;
    let latencies = Latencies::start(&server, Latencies::CREATE).await;
    let mark = CpuMark::now(server.pid());
    let (n, lat) = creates(&server.grpc, clients, seconds, None).await;
    let create_cpu = mark.per_1000(server.pid(), n);
    let create_batch = mean_since(&server, "vfps_create_batch_size", batches).await;
    let [server_ms, wait_ms, statement_ms] = latencies.means(&server).await;
    let create_time = CreateTime {
        client_ms: lat.iter().map(|l| f64::from(*l)).sum::<f64>()
            / lat.len().max(1) as f64
            / 1000.0,
        server_ms,
        wait_ms,
        statement_ms,
    };
    let rss = (
        memory_mib(server.pid(), "VmRSS"),
        memory_mib(server.pid(), "VmHWM"),
    );

    eprintln!("[{clients} clients] gRPC health Check, no database (the call's own ceiling) ...");
    let mark = CpuMark::now(server.pid());
    let (h, _) = health_checks(&server.grpc, clients, seconds).await;
    let health_cpu = mark.per_1000(server.pid(), h);

    eprintln!("[{clients} clients] pgbench, same upsert, same clients ...");
    let mark = machine_busy_seconds();
    let pgbench_tps = pgbench(cluster, &db, UPSERT, clients, seconds);
    let pgbench_cpu = (machine_busy_seconds() - mark) / (pgbench_tps * seconds as f64 / 1000.0);
    // One caller has nothing to batch: no ceiling of batched rows there.
    let db_ceiling = if clients > 1 {
        eprintln!(
            "[{clients} clients] pgbench, {BATCH_ROWS}-row upserts, {BATCH_CLIENTS} clients (the database's own ceiling) ..."
        );
        pgbench(cluster, &db, &batch_upsert(), BATCH_CLIENTS, seconds) * BATCH_ROWS as f64
    } else {
        f64::NAN
    };

    eprintln!("[{clients} clients] vfps Get (PostgreSQL) ...");
    insert_lookup_rows(cluster, &db);
    let batches = histogram(&server, "vfps_get_batch_size").await;
    let mark = CpuMark::now(server.pid());
    let (g, glat) = gets(&server.grpc, clients, seconds).await;
    let get_cpu = mark.per_1000(server.pid(), g);
    let get_batch = mean_since(&server, "vfps_get_batch_size", batches).await;
    eprintln!("[{clients} clients] vfps re-Create of existing originals (PostgreSQL) ...");
    let chans = Arc::new(channels(&server.grpc, 4));
    let (r, rlat) = drive(clients, seconds, move |c, i| {
        let mut client = chans[c % chans.len()].clone();
        let k = lookup_key(c, i);
        async move {
            client
                .create(PseudonymServiceCreateRequest {
                    namespace: "bench".into(),
                    original_value: format!("lookup-{k}"),
                })
                .await
                .is_ok()
        }
    })
    .await;
    drop(server);
    eprintln!("[{clients} clients] pgbench, same lookup SELECT, same clients ...");
    let mark = machine_busy_seconds();
    let pgbench_select_tps = pgbench(cluster, &db, LOOKUP, clients, seconds);
    let pgbench_select_cpu =
        (machine_busy_seconds() - mark) / (pgbench_select_tps * seconds as f64 / 1000.0);

    eprintln!("[{clients} clients] vfps Create (SQLite) ...");
    let dir = std::env::temp_dir().join(format!(
        "vfps-bench-sqlite-{}-{clients}",
        std::process::id()
    ));
    let sqlite = start(vec![(
        "VFPS_SQLITE_PATH".into(),
        dir.join("bench.sqlite").display().to_string(),
    )])
    .await;
    let (s, slat) = creates(&sqlite.grpc, clients, seconds, None).await;
    drop(sqlite);
    let _ = std::fs::remove_dir_all(&dir);

    let per_second = |n: u64| n as f64 / seconds as f64;
    Row {
        clients,
        vfps_create: per_second(n),
        create_latency: (percentile(&lat, 0.5), percentile(&lat, 0.99)),
        pgbench_tps,
        create_cpu,
        create_batch,
        create_time,
        pgbench_cpu,
        get_cpu,
        get_batch,
        health_cpu,
        pgbench_select_cpu,
        grpc_ceiling: per_second(h),
        db_ceiling,
        rss,
        vfps_get: per_second(g),
        get_latency: (percentile(&glat, 0.5), percentile(&glat, 0.99)),
        pgbench_select_tps,
        vfps_recreate: per_second(r),
        recreate_latency: (percentile(&rlat, 0.5), percentile(&rlat, 0.99)),
        sqlite_create: per_second(s),
        sqlite_latency: (percentile(&slat, 0.5), percentile(&slat, 0.99)),
    }
}

/// Closed-loop Gets of the lookup rows over four channels.
pub(super) async fn gets(grpc: &str, clients: usize, seconds: u64) -> (u64, Vec<u32>) {
    let chans = Arc::new(channels(grpc, 4));
    drive(clients, seconds, move |c, i| {
        let mut client = chans[c % chans.len()].clone();
        let value = hex_sha256(&lookup_key(c, i).to_string());
        async move {
            client
                .get(PseudonymServiceGetRequest {
                    namespace: "bench".into(),
                    pseudonym_value: value,
                })
                .await
                .is_ok()
        }
    })
    .await
}

/// `grpc.health.v1.Health/Check` calls, closed loop, over the same four
/// channels as the Creates.
pub(super) async fn health_checks(grpc: &str, clients: usize, seconds: u64) -> (u64, Vec<u32>) {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let chans: Arc<Vec<_>> = Arc::new(
        (0..4)
            .map(|_| {
                HealthClient::new(
                    Channel::from_shared(grpc.to_owned())
                        .unwrap()
                        .connect_lazy(),
                )
            })
            .collect(),
    );
    drive(clients, seconds, move |c, _| {
        let mut client = chans[c % chans.len()].clone();
        async move {
            client
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .is_ok()
        }
    })
    .await
}

impl Row {
    /// The most Creates/s if a Create cost no more than its gRPC call and its
    /// database work: one caller, a gRPC round trip and pgbench's one-row upsert
    /// one after the other; many, the gRPC call and a row of a large batch, the
    /// two costs added on the same cores.
    pub(super) fn create_ceiling(&self) -> f64 {
        let database = if self.clients == 1 {
            self.pgbench_tps
        } else {
            self.db_ceiling
        };
        1.0 / (1.0 / self.grpc_ceiling + 1.0 / database)
    }

    /// The most Gets/s likewise: one caller, a gRPC round trip and pgbench's
    /// SELECT one after the other; many, the gRPC call alone (Gets could be
    /// batched, so the one-row SELECT's cost is no floor).
    pub(super) fn get_ceiling(&self) -> f64 {
        if self.clients == 1 {
            1.0 / (1.0 / self.grpc_ceiling + 1.0 / self.pgbench_select_tps)
        } else {
            self.grpc_ceiling
        }
    }
}

/// CPU-seconds per 1,000 calls the machine's `cores` may spend, all busy, to
/// reach `target` × `baseline_per_second` calls/s.
pub(super) fn budget_per_1000(cores: f64, target: f64, baseline_per_second: f64) -> f64 {
    cores * 1000.0 / (target * baseline_per_second)
}
