//! Builds the application (store, listeners) and runs it until shutdown.
//!
//! Shutdown is a parameter: [`Application::run`] serves until the token is
//! cancelled, then drains — not-ready and `NOT_SERVING` first, a pre-stop delay
//! while traffic moves away, then the listeners stop accepting and in-flight calls
//! get the shutdown timeout to finish.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic_health::ServingStatus;
use vfps_core::{now_micros, ErrorKind, Namespace, NamespaceName, NamespaceUid};
use vfps_proto::v1::{
    csv_job_service_server::CsvJobServiceServer, namespace_service_server::NamespaceServiceServer,
    pseudonym_service_server::PseudonymServiceServer,
};
use vfps_store::{
    postgres::{PgStore, TargetSession},
    sqlite::{ServingLock, SqliteStore},
    Store,
};

use crate::{
    auth::Auth,
    config::{Settings, StoreConfig},
    grpc::{CsvJobApi, NamespaceApi, PseudonymApi},
    metrics::Metrics,
    service::Service,
    state::{AppState, Health},
};

/// The gRPC service names whose health is reported (plus the server as a whole, "").
const HEALTH_SERVICES: [&str; 4] = [
    "",
    "vfps.api.v1.NamespaceService",
    "vfps.api.v1.PseudonymService",
    "vfps.api.v1.CsvJobService",
];

pub struct Application {
    grpc: TcpListener,
    http: TcpListener,
    metrics: TcpListener,
    /// TLS for the API ports, loaded (and checked) at build time.
    tls: Option<crate::tls::Acceptor>,
    state: AppState,
    settings: Settings,
    /// This process's claim on its SQLite file, held while it serves.
    sqlite_lock: Option<ServingLock>,
}

/// CSV jobs on the configured object store, or why there are none.
fn open_jobs(
    settings: &Settings,
    store: Arc<dyn Store>,
    metrics: &Metrics,
    pressure: Arc<crate::service::Interactive>,
    keys: Option<Arc<vfps_keys::Keyring>>,
) -> Result<vfps_jobs::service::Jobs, String> {
    use crate::config::JobStorage;
    let config = &settings.jobs;
    let objects: Arc<dyn vfps_jobs::storage::ObjectStore> = match &config.storage {
        JobStorage::Off(why) => return Err(why.clone()),
        JobStorage::Folder(dir) => {
            Arc::new(vfps_jobs::storage::folder::Folder::new(dir).map_err(|e| {
                format!(
                    "CSV jobs are off: the folder {} cannot be used: {e}",
                    dir.display()
                )
            })?)
        }
        JobStorage::S3(s3) => Arc::new(
            vfps_jobs::storage::s3::S3::new(s3.as_ref().clone())
                .map_err(|e| format!("CSV jobs are off: {e}"))?,
        ),
    };
    tracing::info!(store = %objects.describe(), runners = config.workers, instance = %config.instance, "CSV jobs on");
    if config.runner.restart_from_zero {
        tracing::warn!("VFPS_UNSAFE_JOBS_RESTART_FROM_ZERO: resumed CSV jobs start again from their first row (for the harness's self-test only)");
    }
    // Jobs share at most half of the store's batch workers' connections, so
    // the API's Creates keep the rest.
    let slots = (store.write_parallelism() / 2).max(1);
    let ctx = vfps_jobs::runner::Context {
        store,
        objects,
        settings: Arc::new(config.runner.clone()),
        slots: Arc::new(tokio::sync::Semaphore::new(slots)),
        runner: config.instance.clone(),
        observer: metrics.jobs(),
        pressure,
        keys,
    };
    Ok(vfps_jobs::service::Jobs::new(ctx, config.service()))
}

/// Applies the object store's lifecycle and CORS rules, retrying until it
/// answers (a store that is down at start-up does not stop the API).
async fn configure_objects(jobs: vfps_jobs::service::Jobs, shutdown: CancellationToken) {
    let objects = jobs.context().objects.clone();
    let mut wait = Duration::from_secs(1);
    loop {
        match objects.configure().await {
            Ok(()) => return,
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, "cannot configure the CSV jobs' bucket yet; retrying");
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot configure the CSV jobs' bucket (lifecycle and CORS rules)");
                return;
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(Duration::from_secs(60));
    }
}

/// Opens the configured store; migrates SQLite always and PostgreSQL when forced.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    if settings.unsafe_revealing {
        vfps_core::generate::reveal_for_self_test();
        tracing::warn!("VFPS_UNSAFE_REVEALING_PSEUDONYMS: pseudonyms carry a host tag and their time, and follow the originals' order (for the harness's self-test only)");
    }
    Ok(match &settings.store {
        StoreConfig::Sqlite(path) => {
            let path = path.clone();
            let shown = path.display().to_string();
            let store = tokio::task::spawn_blocking(move || SqliteStore::open(&path))
                .await?
                .with_context(|| format!("cannot open the SQLite database {shown}"))?;
            tracing::info!(path = %store.path().display(), "using the embedded SQLite store");
            Arc::new(store)
        }
        StoreConfig::Postgres(options) => {
            let store = PgStore::new(options)?.with_unsafe_erasure(settings.unsafe_erasure);
            if settings.unsafe_erasure != Default::default() {
                tracing::warn!(modes = ?settings.unsafe_erasure, "VFPS_UNSAFE_ERASURE_*: erasures are unsafe (for the harness's self-test only)");
            }
            tracing::info!(hosts = ?options.hosts, database = ?options.database, "using the PostgreSQL store");
            if options.hosts.len() > 1 && options.target_session == TargetSession::Any {
                tracing::warn!(
                    "ConnectionStrings__PostgreSQL lists several hosts with Target Session Attributes=any: \
                     a standby listed first takes the writes and fails them; use read-write"
                );
            }
            if settings.migrations.force {
                let report = store.migrate().await.context("database migration failed")?;
                tracing::info!(applied = ?report.applied, "database migrations done");
            }
            store.spawn_monitor()?;
            let store = Arc::new(store);
            crate::restore_cli::report_at_start(store.clone());
            store
        }
    })
}

impl Application {
    /// Opens the store and binds every port; nothing is served yet.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let tls = settings
            .tls
            .as_ref()
            .map(crate::tls::Acceptor::new)
            .transpose()?;
        let sqlite_lock = match &settings.store {
            StoreConfig::Sqlite(path) => Some(ServingLock::acquire(path)?),
            StoreConfig::Postgres(_) => None,
        };
        let store = open_store(&settings).await?;
        let metrics = Metrics::new()?;
        let sessions = Arc::new(match &settings.ui.session_key {
            Some(secret) => crate::auth::session::SessionKey::from_secret(secret),
            None => crate::auth::session::SessionKey::random(),
        });
        let auth = Auth::new(
            &settings.authorization,
            store.clone(),
            metrics.clone(),
            sessions.clone(),
        );
        if auth.enabled() && !sessions.is_shared() {
            tracing::warn!(
                "VFPS_UI_SESSION_KEY is not set: admin UI sessions are sealed with a key of this                  process, so a restart or another replica signs users out; set the same key on every replica"
            );
        }
        if auth.enabled() {
            tracing::info!(
                identity_provider = settings
                    .authorization
                    .authority
                    .as_deref()
                    .unwrap_or("none"),
                admin_roles = settings.authorization.admin_roles.len(),
                namespace_rules = settings.authorization.namespace_rules.len(),
                "authorization is on"
            );
            if settings.authorization.authority.is_some()
                && settings.authorization.audience.is_none()
            {
                tracing::warn!(
                    "Authorization__Audience is not set: every access token the identity provider \
                     signs for any client is accepted by this API (only ID tokens are refused); set \
                     the audience the provider puts in tokens meant for vfps"
                );
            }
        } else {
            tracing::warn!(
                "authorization is off (Authorization__IsEnabled=false): anyone who reaches the API ports \
                 may create, reverse-look-up, list and delete pseudonyms"
            );
        }
        let keys = match &settings.keys {
            Some(source) => {
                let keyring = crate::keys::keyring(&settings, source, store.clone())?;
                tracing::info!(source = %keyring.describe(), "new namespaces' originals are sealed at rest");
                Some(Arc::new(keyring))
            }
            None => None,
        };
        let service = Service::new(
            store.clone(),
            settings.batching,
            settings.caching,
            metrics.clone(),
        )
        .with_keys(keys.clone());
        let jobs = crate::jobs::JobApi::new(
            open_jobs(&settings, store, &metrics, service.interactive(), keys),
            auth.clone(),
            metrics.clone(),
        );
        let bind = |port: u16| {
            let addr = SocketAddr::new(settings.listen.address, port);
            async move {
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr}"))
            }
        };
        let grpc = bind(settings.listen.grpc_port).await?;
        let http = bind(settings.listen.http_port).await?;
        let metrics_listener = bind(settings.listen.metrics_port).await?;
        Ok(Self {
            grpc,
            http,
            metrics: metrics_listener,
            tls,
            state: AppState {
                service,
                metrics,
                auth,
                jobs,
                ui: Arc::new(crate::ui::Ui::new(
                    &settings.ui,
                    &settings.authorization,
                    settings.tls.is_some(),
                )),
                health: Arc::new(Health::default()),
                max_call_deadline: settings.calls.max_deadline,
                readiness_database_grace: settings.readiness.database_grace,
            },
            settings,
            sqlite_lock,
        })
    }

    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc
            .local_addr()
            .expect("bound listener has an address")
    }
    pub fn http_addr(&self) -> SocketAddr {
        self.http
            .local_addr()
            .expect("bound listener has an address")
    }
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics
            .local_addr()
            .expect("bound listener has an address")
    }

    /// Serves until `shutdown` is cancelled, then drains and returns.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let Self {
            grpc,
            http,
            metrics,
            tls,
            state,
            settings,
            // Released when serving ends.
            sqlite_lock: _sqlite_lock,
        } = self;
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            grpc = %grpc.local_addr()?,
            http = %http.local_addr()?,
            metrics = %metrics.local_addr()?,
            tls = match &settings.tls {
                None => "off",
                Some(t) if t.client_ca_file.is_some() => "on, client certificates required",
                Some(_) => "on",
            },
            "vfps listening"
        );
        let background = CancellationToken::new();
        if let Some(keyring) = state.service.keys().cloned() {
            tokio::spawn(crate::keys::refresh_and_reseal(
                keyring,
                state.service.store().clone(),
                settings.keys_refresh,
                background.clone(),
            ));
        }
        tokio::spawn(create_initial_namespaces(
            state.clone(),
            settings.init_namespaces.clone(),
            background.clone(),
        ));
        tokio::spawn(crate::metrics::refresh_counts(
            state.metrics.clone(),
            state.service.store().clone(),
            settings.metrics.count_interval,
            background.clone(),
        ));

        // Runners stop when the drain starts: each leaves its job at a
        // checkpoint with its lease given up, for another replica.
        let jobs_stop = CancellationToken::new();
        let runners = match state.jobs.jobs() {
            Ok(jobs) => {
                tokio::spawn(configure_objects(jobs.clone(), background.clone()));
                Some(jobs.spawn_runners(jobs_stop.clone()))
            }
            Err(e) => {
                tracing::info!(reason = %e.message, "CSV jobs are off");
                None
            }
        };

        let (reporter, health_service) = tonic_health::server::health_reporter();
        tokio::spawn(report_health(
            state.clone(),
            reporter.clone(),
            background.clone(),
        ));
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(vfps_proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let (reflection_v1, reflection_v1alpha) = if settings.grpc_reflection {
            (
                Some(reflection().build_v1()?),
                Some(reflection().build_v1alpha()?),
            )
        } else {
            (None, None)
        };

        // Cancelled once the pre-stop delay is over: listeners stop accepting.
        let stop = CancellationToken::new();
        let traced = settings.tracing.enabled;
        let grpc_router = tonic::transport::Server::builder()
            .http2_max_pending_accept_reset_streams(Some(crate::http::MAX_PENDING_RESET_STREAMS))
            .layer(tower::util::option_layer(
                traced.then(crate::telemetry::requests::TraceLayer::grpc),
            ))
            .add_service(health_service)
            .add_optional_service(reflection_v1)
            .add_optional_service(reflection_v1alpha)
            .add_service(
                NamespaceServiceServer::new(NamespaceApi {
                    state: state.clone(),
                })
                .accept_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(settings.calls.max_request_bytes),
            )
            .add_service(
                PseudonymServiceServer::new(PseudonymApi {
                    state: state.clone(),
                })
                .accept_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(settings.calls.max_request_bytes),
            )
            .add_service(
                CsvJobServiceServer::new(CsvJobApi {
                    state: state.clone(),
                })
                .accept_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(settings.calls.max_request_bytes),
            );
        let http_router =
            crate::router::router(state.clone(), settings.calls.max_request_bytes, traced);
        let stopped = || stop.clone().cancelled_owned();
        type Served<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;
        let (grpc_server, http_server): (Served<Result<(), tonic::transport::Error>>, Served<()>) =
            match &tls {
                None => (
                    Box::pin(grpc_router.serve_with_incoming_shutdown(
                        tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true)),
                        stopped(),
                    )),
                    Box::pin(crate::http::serve(http, http_router, stopped())),
                ),
                Some(acceptor) => {
                    tokio::spawn(
                        acceptor.clone().watch(
                            settings
                                .tls
                                .as_ref()
                                .map_or(Duration::from_secs(10), |t| t.reload_interval),
                            background.clone(),
                        ),
                    );
                    (
                        Box::pin(grpc_router.serve_with_incoming_shutdown(
                            acceptor.incoming(grpc, stop.clone()),
                            stopped(),
                        )),
                        Box::pin(crate::http::serve(
                            acceptor.incoming(http, stop.clone()),
                            http_router,
                            stopped(),
                        )),
                    )
                }
            };
        let metrics_router = axum::Router::new()
            .merge(crate::http::health_routes().with_state(state.clone()))
            .route(
                "/metrics",
                axum::routing::get({
                    let state = state.clone();
                    move || {
                        let state = state.clone();
                        async move {
                            (
                                [(
                                    axum::http::header::CONTENT_TYPE,
                                    "text/plain; version=0.0.4",
                                )],
                                state.metrics.render(
                                    state.service.store().as_ref(),
                                    state.service.cache_entries(),
                                ),
                            )
                        }
                    }
                }),
            );
        let metrics_server = crate::http::serve(metrics, metrics_router, stopped());

        let mut servers = tokio::spawn(async move {
            let (g, (), ()) = tokio::join!(grpc_server, http_server, metrics_server);
            g.context("gRPC server failed")
        });

        tokio::select! {
            result = &mut servers => {
                background.cancel();
                return result.context("server task panicked")?;
            }
            _ = shutdown.cancelled() => {}
        }

        tracing::info!(
            pre_stop_delay = ?settings.shutdown.pre_stop_delay,
            shutdown_timeout = ?settings.shutdown.timeout,
            "shutdown requested: draining"
        );
        state.health.start_draining();
        jobs_stop.cancel();
        {
            let _writing = state.health.grpc_status.lock().await;
            for name in HEALTH_SERVICES {
                reporter
                    .set_service_status(name, ServingStatus::NotServing)
                    .await;
            }
        }
        tokio::time::sleep(settings.shutdown.pre_stop_delay).await;
        stop.cancel();
        let drained = tokio::time::timeout(settings.shutdown.timeout, async {
            let served = (&mut servers).await;
            if let Some(runners) = runners {
                let _ = runners.await;
            }
            served
        })
        .await;
        background.cancel();
        match drained {
            Ok(result) => {
                result.context("server task panicked")??;
                tracing::info!("drain finished within the shutdown timeout");
            }
            Err(_) => {
                servers.abort();
                tracing::warn!(
                    shutdown_timeout = ?settings.shutdown.timeout,
                    "drain did not finish within the shutdown timeout; remaining calls were cut off"
                );
            }
        }
        Ok(())
    }
}

/// Creates the configured namespaces, retrying until the database answers.
async fn create_initial_namespaces(
    state: AppState,
    wanted: Vec<crate::config::InitNamespace>,
    shutdown: CancellationToken,
) {
    for init in wanted {
        let Ok(name) = NamespaceName::parse(&init.name) else {
            continue;
        };
        loop {
            let now = now_micros();
            let ns = Namespace {
                name: name.clone(),
                uid: NamespaceUid::random(),
                description: init.description.clone(),
                // Sealed where there is a key source, as a namespace
                // created through the API is.
                settings: init
                    .settings
                    .clone()
                    .with_sealed(state.service.keys().is_some()),
                created_at: now,
                last_updated_at: now,
            };
            match state.service.store().create_namespace(&ns).await {
                Ok(()) => {
                    tracing::info!(namespace = %name, "created initial namespace");
                    break;
                }
                Err(e) if e.kind == ErrorKind::AlreadyExists => break,
                Err(e) => {
                    tracing::warn!(namespace = %name, error = %e, "cannot create initial namespace yet; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
    }
    if let Some(keyring) = state.service.keys().cloned() {
        crate::keys::check(&state, &keyring, &shutdown).await;
    }
    state.health.mark_initialised();
}

/// Keeps gRPC health in step with readiness until draining starts; never
/// writes `SERVING` after the drain wrote `NOT_SERVING`.
async fn report_health(
    state: AppState,
    reporter: tonic_health::server::HealthReporter,
    shutdown: CancellationToken,
) {
    let mut last = None;
    loop {
        {
            let _writing = state.health.grpc_status.lock().await;
            if state.health.is_draining() {
                return;
            }
            let serving = state.readiness().is_ok();
            if last != Some(serving) {
                let status = if serving {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                for name in HEALTH_SERVICES {
                    reporter.set_service_status(name, status).await;
                }
                last = Some(serving);
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
}

/// A server started in this process (tests, benchmarks, harness self-tests).
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// Cancel to shut the server down; then await `handle`.
    pub shutdown: CancellationToken,
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Starts a server on 127.0.0.1 configured by `vars` (environment-style settings);
/// ports are taken from `flags` (0 picks a free one).
pub async fn spawn(
    vars: Vec<(String, String)>,
    flags: crate::config::Flags,
) -> anyhow::Result<Running> {
    let flags = crate::config::Flags {
        listen_address: Some(flags.listen_address.unwrap_or_else(|| "127.0.0.1".into())),
        http_port: Some(flags.http_port.unwrap_or(0)),
        grpc_port: Some(flags.grpc_port.unwrap_or(0)),
        metrics_port: Some(flags.metrics_port.unwrap_or(0)),
        ..flags
    };
    let (settings, _) = Settings::load(vars, &flags)?;
    let app = Application::build(settings).await?;
    let (grpc_addr, http_addr, metrics_addr) =
        (app.grpc_addr(), app.http_addr(), app.metrics_addr());
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(app.run(shutdown.clone()));
    Ok(Running {
        grpc_addr,
        http_addr,
        metrics_addr,
        shutdown,
        handle,
    })
}
