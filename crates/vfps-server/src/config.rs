//! Configuration by the deployed vfps's names, so a deployment switches unchanged.
//!
//! Sources, lowest to highest precedence: defaults, environment variables
//! (case-insensitive, `__` as the section separator, as ASP.NET reads them), then
//! command-line flags. Every setting is checked before any port is bound, and every
//! bad key is reported at once, naming the key and the problem (never a password).
//!
//! [`Settings`] is a set of sections, one per concern. Each section parses and
//! validates its own keys and records what is wrong instead of failing fast, so
//! [`Settings::load`] only composes them and one run names every bad key.

mod appsettings;
mod authorization;
mod caching;
mod env;
mod init_namespaces;
mod jobs;
mod limits;
mod listen;
mod store;
mod traces;
mod ui;
mod unsafe_erasure;

use std::{path::PathBuf, time::Duration};

use self::env::{duration, parse_bool, setting, Env};
pub use self::{
    authorization::{Authorization, NamespaceRule},
    caching::{CacheLimits, Caching},
    env::parse_duration,
    init_namespaces::InitNamespace,
    jobs::{parse_bytes, JobStorage, JobsConfig},
    limits::{Batching, Calls, MetricsConfig, Readiness, Shutdown, Telemetry},
    listen::Listen,
    store::StoreConfig,
    traces::{Headers, RootSampler, Tracing, DEFAULT_OTLP_ENDPOINT},
    ui::UiConfig,
};

/// Everything `vfps serve` needs, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where pseudonyms are kept, and how PostgreSQL sessions are limited.
    pub store: StoreConfig,
    /// The address and ports the three servers bind.
    pub listen: Listen,
    /// Whether start-up migrates PostgreSQL (SQLite is always migrated).
    pub migrations: Migrations,
    /// `Pseudonymization__Caching__*`: the per-replica namespace and pseudonym caches.
    pub caching: Caching,
    /// How concurrent Creates are coalesced into upserts, and how many may wait.
    pub batching: Batching,
    /// Limits every call is held to, whatever its transport.
    pub calls: Calls,
    /// How a SIGTERM is drained.
    pub shutdown: Shutdown,
    /// When the replica takes itself out of rotation.
    pub readiness: Readiness,
    /// How fresh the exported metrics are.
    pub metrics: MetricsConfig,
    /// How logs are written.
    pub telemetry: Telemetry,
    /// `Tracing__*`: OpenTelemetry traces, off by default.
    pub tracing: Tracing,
    /// Namespaces to create at start-up if missing, so a deployment can ship them.
    pub init_namespaces: Vec<InitNamespace>,
    /// `VFPS_UNSAFE_ERASURE_*`: the harness's self-test of P8 only.
    pub unsafe_erasure: vfps_store::erasure::UnsafeErasure,
    /// `VFPS_UNSAFE_REVEALING_PSEUDONYMS`: the harness's self-test of P10
    /// only (see `vfps_core::generate::reveal_for_self_test`).
    pub unsafe_revealing: bool,
    /// `VFPS_KEYS`: the key source that wraps the namespaces' keys
    /// (`file:PATH`); with one, new namespaces' originals are sealed at rest
    /// (docs/privacy.md). Unset: originals are stored as they are.
    pub keys: Option<vfps_keys::KeySource>,
    /// `VFPS_KEYS_PREVIOUS`: a key source whose wrapped keys are still
    /// opened while `vfps keys rewrap` rewraps them under `VFPS_KEYS` (a
    /// wrapping-key rotation); only with `VFPS_KEYS`.
    pub keys_previous: Option<vfps_keys::KeySource>,
    /// `VFPS_KEYS_REFRESH_INTERVAL` (5 s): how often a replica looks for a
    /// namespace's new key version (a rotation) to seal new originals
    /// under; it re-seals the older versions' originals two intervals
    /// after it learns of one.
    pub keys_refresh: Duration,
    /// `Authorization__*`: who may call what.
    pub authorization: Authorization,
    /// `VFPS_GRPC_REFLECTION`: whether gRPC server reflection is served.
    pub grpc_reflection: bool,
    /// `VFPS_TLS_*`: TLS on the API ports; `None` (the default) is plaintext.
    pub tls: Option<Tls>,
    /// `S3__*`, `CsvProcessing__*`: CSV jobs.
    pub jobs: JobsConfig,
    /// `VFPS_UI_*`: the admin UI's sessions.
    pub ui: UiConfig,
}

/// `VFPS_TLS_CERT_FILE` and `VFPS_TLS_KEY_FILE` (PEM, both or neither),
/// `VFPS_TLS_CLIENT_CA_FILE` (mTLS) and `VFPS_TLS_RELOAD_INTERVAL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Clients must present a certificate signed by one of these.
    pub client_ca_file: Option<PathBuf>,
    /// How often the files are checked for a rotated certificate.
    pub reload_interval: Duration,
}

impl Tls {
    fn from_env(env: &Env, errors: &mut Vec<String>) -> Option<Self> {
        let path = |key: &str| env.text(key).map(PathBuf::from);
        let (cert, key) = (path("VFPS_TLS_CERT_FILE"), path("VFPS_TLS_KEY_FILE"));
        let client_ca_file = path("VFPS_TLS_CLIENT_CA_FILE");
        let reload_interval = duration(
            env,
            errors,
            "VFPS_TLS_RELOAD_INTERVAL",
            Duration::from_secs(10),
        );
        match (cert, key) {
            (Some(cert_file), Some(key_file)) => Some(Self {
                cert_file,
                key_file,
                client_ca_file,
                reload_interval: reload_interval.max(Duration::from_millis(100)),
            }),
            (None, None) => {
                if client_ca_file.is_some() {
                    errors.push(
                        "VFPS_TLS_CLIENT_CA_FILE needs VFPS_TLS_CERT_FILE and VFPS_TLS_KEY_FILE"
                            .into(),
                    );
                }
                None
            }
            _ => {
                errors.push("VFPS_TLS_CERT_FILE and VFPS_TLS_KEY_FILE must be set together".into());
                None
            }
        }
    }
}

/// `ForceRunDatabaseMigrations` or `--force-migrations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrations {
    /// Migrate PostgreSQL at start-up, as upstream does when asked; otherwise
    /// `vfps migrate` is expected to have brought the schema up to date.
    pub force: bool,
}

/// Command-line overrides; `None` leaves the environment's value. Global: the
/// same before or after a subcommand.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Flags {
    /// PostgreSQL connection string (Npgsql keyword form); overrides ConnectionStrings__PostgreSQL.
    #[arg(long, global = true, value_name = "CONNECTION_STRING")]
    pub postgres: Option<String>,
    /// SQLite file used when no PostgreSQL connection string is set [default: vfps.sqlite].
    #[arg(long, global = true, value_name = "PATH")]
    pub sqlite_path: Option<PathBuf>,
    /// Address to listen on [default: 0.0.0.0].
    #[arg(long, global = true, value_name = "IP")]
    pub listen_address: Option<String>,
    /// REST and FHIR port [default: 8080].
    #[arg(long, global = true)]
    pub http_port: Option<u16>,
    /// gRPC port [default: 8081].
    #[arg(long, global = true)]
    pub grpc_port: Option<u16>,
    /// Prometheus metrics port [default: 8082].
    #[arg(long, global = true)]
    pub metrics_port: Option<u16>,
    /// Apply database migrations at start-up.
    #[arg(long, global = true)]
    pub force_migrations: bool,
}

/// All configuration problems found, one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "invalid configuration:")?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl Settings {
    /// Builds and validates settings from environment variables and flags; the
    /// notes are worth logging once logging is set up.
    pub fn load(
        vars: impl IntoIterator<Item = (String, String)>,
        flags: &Flags,
    ) -> Result<(Self, Vec<String>), ConfigErrors> {
        Self::load_in(std::env::current_dir().ok().as_deref(), vars, flags)
    }

    /// [`Settings::load`] with `content_root` as the working directory.
    pub fn load_in(
        content_root: Option<&std::path::Path>,
        vars: impl IntoIterator<Item = (String, String)>,
        flags: &Flags,
    ) -> Result<(Self, Vec<String>), ConfigErrors> {
        let mut errors = Vec::new();
        let mut notes = Vec::new();
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        let var = |key: &str| {
            vars.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        // Layered as ASP.NET layers them, each over the one before:
        // `appsettings.json` and `appsettings.<environment>.json` in the
        // working directory (upstream's image reads them from its own),
        // `VFPS_APPSETTINGS_FILE`, then the environment.
        let environment = var("ASPNETCORE_ENVIRONMENT")
            .or_else(|| var("DOTNET_ENVIRONMENT"))
            .unwrap_or_else(|| "Production".to_owned());
        let mut files: Vec<(String, std::path::PathBuf, bool)> = Vec::new();
        if let Some(root) = content_root {
            for name in [
                "appsettings.json".to_owned(),
                format!("appsettings.{environment}.json"),
            ] {
                files.push((name.clone(), root.join(name), false));
            }
        }
        if let Some(path) = var("VFPS_APPSETTINGS_FILE") {
            files.push(("VFPS_APPSETTINGS_FILE".to_owned(), path.into(), true));
        }
        let mut layered = Vec::new();
        for (what, path, required) in files {
            if !required && !path.exists() {
                continue;
            }
            match appsettings::read(&path) {
                Ok(pairs) => {
                    notes.push(format!(
                        "read {} settings from {}",
                        pairs.len(),
                        path.display()
                    ));
                    layered.extend(pairs);
                }
                Err(e) if required => {
                    errors.push(format!("{what}={:?}: {e}", path.display().to_string()))
                }
                Err(e) => errors.push(format!("{}: {e}", path.display())),
            }
        }
        // Upstream's own appsettings.json says BackingStore=PostgreSQL with an
        // empty connection string: from a file it is not a demand (the SQLite
        // default stays usable with that file); from the environment it is.
        if var("Pseudonymization__BackingStore").is_none() {
            layered.retain(|(k, _)| !k.eq_ignore_ascii_case("Pseudonymization__BackingStore"));
        }
        layered.extend(vars);
        let env = Env::new(layered);
        // Every section is parsed even after one failed, so all problems are
        // reported together; fields are evaluated in the order written.
        let store = StoreConfig::from_env(&env, flags, &mut errors, &mut notes);
        let jobs = JobsConfig::from_env(&env, &store, &mut errors);
        let settings = Self {
            store,
            listen: Listen::from_env(&env, flags, &mut errors),
            migrations: Migrations::from_env(&env, flags, &mut errors),
            caching: Caching::from_env(&env, &mut errors),
            calls: Calls::from_env(&env, &mut errors),
            shutdown: Shutdown::from_env(&env, &mut errors),
            metrics: MetricsConfig::from_env(&env, &mut errors),
            batching: Batching::from_env(&env, &mut errors),
            readiness: Readiness::from_env(&env, &mut errors),
            telemetry: Telemetry::from_env(&env, &mut errors),
            tracing: Tracing::from_env(&env, &mut errors, &mut notes),
            init_namespaces: init_namespaces::from_env(&env, &mut errors),
            unsafe_erasure: unsafe_erasure::from_env(&env, &mut errors),
            keys: match env.get("VFPS_KEYS").filter(|v| !v.trim().is_empty()) {
                Some(v) => match vfps_keys::KeySource::parse_with(v.trim(), &|k| env.text(k)) {
                    Ok(source) => Some(source),
                    Err(e) => {
                        errors.push(e);
                        None
                    }
                },
                None => None,
            },
            keys_previous: match env
                .get("VFPS_KEYS_PREVIOUS")
                .filter(|v| !v.trim().is_empty())
            {
                Some(_) if env.get("VFPS_KEYS").is_none_or(|v| v.trim().is_empty()) => {
                    errors.push(
                        "VFPS_KEYS_PREVIOUS is set without VFPS_KEYS: set VFPS_KEYS to the key \
                         source keys are rewrapped under"
                            .into(),
                    );
                    None
                }
                Some(v) => match vfps_keys::KeySource::parse_with(v.trim(), &|k| env.text(k)) {
                    Ok(source) => Some(source),
                    Err(e) => {
                        errors.push(format!("VFPS_KEYS_PREVIOUS: {e}"));
                        None
                    }
                },
                None => None,
            },
            keys_refresh: {
                let every = duration(
                    &env,
                    &mut errors,
                    "VFPS_KEYS_REFRESH_INTERVAL",
                    Duration::from_secs(5),
                );
                if every.is_zero() {
                    errors.push("VFPS_KEYS_REFRESH_INTERVAL must be greater than zero".into());
                }
                every
            },
            unsafe_revealing: setting(
                &env,
                &mut errors,
                "VFPS_UNSAFE_REVEALING_PSEUDONYMS",
                false,
                parse_bool,
                "true or false",
            ),
            authorization: Authorization::from_env(&env, &mut errors),
            grpc_reflection: authorization::reflection(&env, &mut errors),
            tls: Tls::from_env(&env, &mut errors),
            jobs,
            ui: UiConfig::from_env(&env, &mut errors),
        };
        if settings.keys.is_none() {
            for ns in &settings.init_namespaces {
                if ns.settings.method.is_keyed() {
                    errors.push(format!(
                        "initial namespace {}: {} keys each pseudonym with a key held apart \
                         from the database: set VFPS_KEYS",
                        ns.name,
                        ns.settings.method.wire_name()
                    ));
                }
            }
        }
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        Ok((settings, notes))
    }
}

impl Migrations {
    fn from_env(env: &Env, flags: &Flags, errors: &mut Vec<String>) -> Self {
        let force = flags.force_migrations
            || setting(
                env,
                errors,
                "ForceRunDatabaseMigrations",
                false,
                parse_bool,
                "true or false",
            );
        Self { force }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn load(vars: &[(&str, &str)]) -> Result<Settings, ConfigErrors> {
        Settings::load(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            &Flags::default(),
        )
        .map(|(s, _)| s)
    }

    #[test]
    fn nothing_configured_means_sqlite_and_default_ports() {
        let s = load(&[]).unwrap();
        assert_eq!(s.store, StoreConfig::Sqlite(PathBuf::from("vfps.sqlite")));
        assert_eq!(
            (
                s.listen.http_port,
                s.listen.grpc_port,
                s.listen.metrics_port
            ),
            (8080, 8081, 8082)
        );
        assert_eq!(s.caching, Caching::default());
        assert!(!s.caching.namespaces && !s.caching.pseudonyms);
    }

    #[test]
    fn upstream_names_are_read_case_insensitively() {
        let s = load(&[
            (
                "CONNECTIONSTRINGS__POSTGRESQL",
                "Host=db;Database=vfps;Username=u",
            ),
            ("PGPASSWORD", "secret"),
            ("ForceRunDatabaseMigrations", "True"),
            ("Pseudonymization__Caching__Namespaces__IsEnabled", "true"),
            ("Pseudonymization__Caching__Pseudonyms__IsEnabled", "True"),
            ("Pseudonymization__Caching__SizeLimit", "65534"),
            ("Init__v1__Namespaces__0__Name", "demo"),
            (
                "Init__v1__Namespaces__0__PseudonymGenerationMethod",
                "PSEUDONYM_GENERATION_METHOD_UUID4",
            ),
            ("Init__v1__Namespaces__0__PseudonymPrefix", "d-"),
            ("Init__v1__Namespaces__0__PseudonymDeletionAllowed", "True"),
            ("Init__v1__Namespaces__0__MultiPseudonym", "true"),
            ("Init__v1__Namespaces__1__Name", "other"),
        ])
        .unwrap();
        let StoreConfig::Postgres(pg) = &s.store else {
            panic!("expected postgres")
        };
        assert_eq!(pg.password.as_deref(), Some("secret"));
        assert!(s.migrations.force);
        assert_eq!(
            s.caching,
            Caching {
                namespaces: true,
                pseudonyms: true,
                absolute_expiration: Duration::from_secs(3600),
                size_limit: 65534,
                ..Caching::default()
            }
        );
        assert_eq!(s.init_namespaces.len(), 2);
        assert_eq!(s.init_namespaces[0].settings.length, 36);
        assert_eq!(s.init_namespaces[0].settings.prefix.as_deref(), Some("d-"));
        assert_eq!(s.init_namespaces[1].settings.length, 32);
        assert!(s.init_namespaces[0].settings.deletable);
        assert!(!s.init_namespaces[1].settings.deletable);
        assert!(s.init_namespaces[0].settings.multi);
        assert!(!s.init_namespaces[1].settings.multi);
    }

    #[test]
    fn every_bad_key_is_reported_at_once_without_the_password() {
        let e = load(&[
            (
                "ConnectionStrings__PostgreSQL",
                "Host=db;Port=x;Password=hunter2",
            ),
            ("VFPS_HTTP_PORT", "99999"),
            ("ForceRunDatabaseMigrations", "maybe"),
            ("VFPS_MAX_CALL_DEADLINE", "soon"),
            ("Pseudonymization__Caching__SizeLimit", "0"),
            ("Init__v1__Namespaces__0__Name", "n"),
            ("Init__v1__Namespaces__0__PseudonymLength", "0"),
        ])
        .unwrap_err();
        let text = e.to_string();
        assert_eq!(e.0.len(), 6, "{text}");
        for needle in [
            "Port",
            "VFPS_HTTP_PORT",
            "Pseudonymization__Caching__SizeLimit",
            "ForceRunDatabaseMigrations",
            "VFPS_MAX_CALL_DEADLINE",
            "Init__v1__Namespaces__0",
        ] {
            assert!(text.contains(needle), "{needle} missing from {text}");
        }
        assert!(!text.contains("hunter2"));
    }

    /// A misspelt authorization key would silently leave a check out (no
    /// audience check, authorization off): refused, named as it was set.
    #[test]
    fn unknown_authorization_keys_are_refused() {
        let e = load(&[
            ("Authorization__IsEnabled", "true"),
            ("Authorization__Authority", "https://idp.example/realms/x"),
            ("Authorization__Audiance", "vfps"),
            ("Authorization__AdminRole__0", "admin"),
        ])
        .unwrap_err();
        let all = e.0.join("\n");
        for needle in [
            "Authorization__Audiance: unknown setting",
            "Authorization__AdminRole__0: unknown setting",
        ] {
            assert!(all.contains(needle), "{needle:?} missing from:\n{all}");
        }
        assert_eq!(e.0.len(), 2, "{all}");
        let fine = load(&[
            ("Authorization__IsEnabled", "true"),
            ("Authorization__Authority", "https://idp.example/realms/x"),
            ("Authorization__ClientSecret", "s"),
            ("authorization__audience", "vfps"),
        ]);
        assert!(fine.is_ok(), "{fine:?}");
    }

    /// Upstream's settings for its admin UI's sign-in start the service (they
    /// stopped it once, as unknown) and are taken; a bad value is named.
    #[test]
    fn upstreams_ui_sign_in_settings_are_taken() {
        let c = load(&[
            ("Authorization__IsEnabled", "true"),
            ("Authorization__Authority", "https://idp.example/realms/x"),
            ("Authorization__ClientId", "vfps-ui"),
            ("Authorization__ClientSecret", "hunter2"),
            ("Authorization__UsePushedAuthorizationRequests", "false"),
        ])
        .unwrap();
        let a = &c.authorization;
        assert_eq!(a.client_id.as_deref(), Some("vfps-ui"));
        assert_eq!(a.client_secret.as_deref(), Some("hunter2"));
        assert!(!a.use_pushed_authorization_requests);
        assert!(Authorization::default().use_pushed_authorization_requests);
        let e =
            load(&[("Authorization__UsePushedAuthorizationRequests", "sometimes")]).unwrap_err();
        let all = e.0.join("\n");
        assert!(
            all.contains("Authorization__UsePushedAuthorizationRequests"),
            "{all}"
        );
    }

    /// An init namespace's every bad field is named, with why.
    #[test]
    fn init_namespaces_name_every_bad_field() {
        let long = "n".repeat(2000);
        let e = load(&[
            ("Init__v1__Namespaces__0__Name", long.as_str()),
            ("Init__v1__Namespaces__1__Name", "ok"),
            ("Init__v1__Namespaces__1__PseudonymGenerationMethod", "NOPE"),
            ("Init__v1__Namespaces__1__PseudonymLength", "abc"),
            ("Init__v1__Namespaces__2__Name", "d"),
            ("Init__v1__Namespaces__2__PseudonymDeletionAllowed", "maybe"),
            ("Init__v1__Namespaces__2__MultiPseudonym", "several"),
            ("Init__v1__Namespaces__3__Name", "hashed"),
            (
                "Init__v1__Namespaces__3__PseudonymGenerationMethod",
                "PSEUDONYM_GENERATION_METHOD_SHA256_HEX_ENCODED",
            ),
            ("Init__v1__Namespaces__3__MultiPseudonym", "true"),
        ])
        .unwrap_err();
        let all = e.0.join("\n");
        for needle in [
            "Init__v1__Namespaces__0__Name: ",
            "128",
            "Init__v1__Namespaces__1__PseudonymGenerationMethod=\"NOPE\"",
            "Init__v1__Namespaces__1__PseudonymLength=\"abc\"",
            "Init__v1__Namespaces__2__PseudonymDeletionAllowed=\"maybe\" is not true or false",
            "Init__v1__Namespaces__2__MultiPseudonym=\"several\" is not true or false",
            "Init__v1__Namespaces__3: a multi-pseudonym namespace needs a random generation method",
        ] {
            assert!(all.contains(needle), "{needle:?} missing from:\n{all}");
        }
        assert!(!all.contains("non-blank"), "{all}");
    }

    /// A keyed initial namespace needs a key source.
    #[test]
    fn a_keyed_initial_namespace_needs_vfps_keys() {
        let keyed = [
            ("Init__v1__Namespaces__0__Name", "keyed"),
            (
                "Init__v1__Namespaces__0__PseudonymGenerationMethod",
                "HmacSha256HexEncoded",
            ),
        ];
        let all = load(&keyed).unwrap_err().0.join("\n");
        assert!(
            all.contains("initial namespace keyed: PSEUDONYM_GENERATION_METHOD_HMAC_SHA256")
                && all.contains("VFPS_KEYS"),
            "{all}"
        );
        let with_keys = [keyed[0], keyed[1], ("VFPS_KEYS", "file:/etc/vfps/keys")];
        let s = load(&with_keys).unwrap();
        assert_eq!(s.init_namespaces[0].settings.length, 64);
    }

    /// A previous key source only beside a current one; a refresh interval
    /// above zero.
    #[test]
    fn key_rotation_settings_are_checked() {
        let all = load(&[("VFPS_KEYS_PREVIOUS", "file:/etc/vfps/old.keys")])
            .unwrap_err()
            .0
            .join("\n");
        assert!(
            all.contains("VFPS_KEYS_PREVIOUS is set without VFPS_KEYS"),
            "{all}"
        );
        let all = load(&[
            ("VFPS_KEYS", "file:/etc/vfps/keys"),
            ("VFPS_KEYS_PREVIOUS", "vault:x"),
            ("VFPS_KEYS_REFRESH_INTERVAL", "0s"),
        ])
        .unwrap_err()
        .0
        .join("\n");
        assert!(
            all.contains("VFPS_KEYS_PREVIOUS: ")
                && all.contains("VFPS_KEYS_REFRESH_INTERVAL must be greater than zero"),
            "{all}"
        );
        let s = load(&[
            ("VFPS_KEYS", "file:/etc/vfps/keys"),
            ("VFPS_KEYS_PREVIOUS", "file:/etc/vfps/old.keys"),
        ])
        .unwrap();
        assert!(s.keys_previous.is_some());
        assert_eq!(s.keys_refresh, Duration::from_secs(5));
    }

    #[test]
    fn upstream_cache_settings_take_timespans_and_per_cache_limits() {
        let s = load(&[
            ("Pseudonymization__Caching__Namespaces__IsEnabled", "true"),
            (
                "Pseudonymization__Caching__AbsoluteExpiration",
                "0.01:00:00",
            ),
            ("Pseudonymization__Caching__SizeLimit", "100"),
            ("Pseudonymization__Caching__Pseudonyms__SizeLimit", "5000"),
            (
                "Pseudonymization__Caching__Namespaces__AbsoluteExpiration",
                "00:05:00",
            ),
        ])
        .unwrap();
        let c = s.caching;
        assert_eq!(c.namespace_cache(), (Duration::from_secs(300), 100));
        assert_eq!(c.pseudonym_cache(), (Duration::from_secs(3600), 5000));
        let e = load(&[
            ("Pseudonymization__Caching__Pseudonyms__SizeLimit", "0"),
            (
                "Pseudonymization__Caching__Namespaces__AbsoluteExpiration",
                "1.25:00:00",
            ),
        ])
        .unwrap_err();
        assert_eq!(e.0.len(), 2, "{e}");
    }

    #[test]
    fn an_upstream_appsettings_file_is_read_and_the_environment_overrides_it() {
        let dir = std::env::temp_dir().join(format!("vfps-appsettings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("appsettings.json");
        std::fs::write(
            &file,
            r#"{"Init": {"v1": {"Namespaces": [{"Name": "default", "PseudonymGenerationMethod": "SecureRandomBase64UrlEncoded", "PseudonymLength": 32, "PseudonymPrefix": "default-"}]}},
                "Pseudonymization": {"Caching": {"SizeLimit": 100, "AbsoluteExpiration": "0.00:10:00"}}}"#,
        )
        .unwrap();
        let path = file.display().to_string();
        let s = load(&[
            ("VFPS_APPSETTINGS_FILE", path.as_str()),
            ("Pseudonymization__Caching__SizeLimit", "7"),
        ])
        .unwrap();
        assert_eq!(s.init_namespaces.len(), 1);
        assert_eq!(s.init_namespaces[0].name, "default");
        assert_eq!(
            s.init_namespaces[0].settings.prefix.as_deref(),
            Some("default-")
        );
        assert_eq!(s.caching.size_limit, 7, "the environment wins");
        assert_eq!(s.caching.absolute_expiration, Duration::from_secs(600));
        std::fs::write(&file, "not json").unwrap();
        let e = load(&[("VFPS_APPSETTINGS_FILE", path.as_str())]).unwrap_err();
        assert!(e.0[0].contains("not JSON"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_section_has_its_default() {
        let s = load(&[]).unwrap();
        assert_eq!(
            s.listen,
            Listen {
                address: IpAddr::from([0, 0, 0, 0]),
                http_port: 8080,
                grpc_port: 8081,
                metrics_port: 8082,
            }
        );
        assert_eq!(s.migrations, Migrations { force: false });
        assert_eq!(
            s.batching,
            Batching {
                max_batch: 256,
                max_queue: 4096,
                workers: None,
            }
        );
        assert_eq!(
            s.calls,
            Calls {
                max_deadline: Duration::from_secs(30),
                max_request_bytes: 65536,
            }
        );
        assert_eq!(
            s.shutdown,
            Shutdown {
                pre_stop_delay: Duration::ZERO,
                timeout: Duration::from_secs(20),
            }
        );
        assert_eq!(
            s.readiness,
            Readiness {
                database_grace: Duration::from_secs(30),
            }
        );
        assert_eq!(
            s.metrics,
            MetricsConfig {
                count_interval: Duration::from_secs(60),
            }
        );
        assert_eq!(s.telemetry, Telemetry { log_json: false });
        assert!(s.init_namespaces.is_empty());

        let s = load(&[("ConnectionStrings__PostgreSQL", "Host=db;Username=u")]).unwrap();
        let StoreConfig::Postgres(pg) = &s.store else {
            panic!("expected postgres")
        };
        assert_eq!(pg.idle_in_transaction_timeout, Duration::from_secs(10));
    }

    #[test]
    fn the_create_batch_workers_default_to_the_store_and_can_be_set() {
        let unset = load(&[]).unwrap().batching;
        assert_eq!(unset.workers, None);
        assert_eq!(unset.limits(2).workers, 2, "the store's default");
        let s = load(&[
            ("VFPS_CREATE_BATCH_WORKERS", " 3 "),
            ("VFPS_MAX_CREATE_BATCH", "7"),
            ("VFPS_MAX_CREATE_QUEUE", "9"),
        ])
        .unwrap();
        assert_eq!(s.batching.workers, Some(3));
        let limits = s.batching.limits(2);
        assert_eq!(
            (limits.workers, limits.max_batch, limits.max_queue),
            (3, 7, 9)
        );
        let e = load(&[("VFPS_CREATE_BATCH_WORKERS", "257")]).unwrap_err();
        assert_eq!(
            e.0,
            ["VFPS_CREATE_BATCH_WORKERS=\"257\" is not valid: expected an integer from 1 to 256"]
        );
    }

    #[test]
    fn the_idle_in_transaction_timeout_is_applied_to_postgres() {
        let s = load(&[
            ("ConnectionStrings__PostgreSQL", "Host=db;Username=u"),
            ("VFPS_IDLE_IN_TRANSACTION_SESSION_TIMEOUT", "250ms"),
        ])
        .unwrap();
        let StoreConfig::Postgres(pg) = &s.store else {
            panic!("expected postgres")
        };
        assert_eq!(pg.idle_in_transaction_timeout, Duration::from_millis(250));
    }

    #[test]
    fn bad_keys_in_different_sections_are_reported_together() {
        let e = load(&[
            ("VFPS_IDLE_IN_TRANSACTION_SESSION_TIMEOUT", "0s"),
            ("VFPS_GRPC_PORT", "8080"),
            ("VFPS_SHUTDOWN_TIMEOUT", "forever"),
            ("VFPS_MAX_CREATE_BATCH", "0"),
            ("VFPS_CREATE_BATCH_WORKERS", "0"),
            ("VFPS_READINESS_DATABASE_GRACE", "-1s"),
            ("VFPS_LOG_JSON", "maybe"),
        ])
        .unwrap_err();
        assert_eq!(
            e.0,
            [
                "VFPS_IDLE_IN_TRANSACTION_SESSION_TIMEOUT must be at least 1ms",
                "VFPS_HTTP_PORT, VFPS_GRPC_PORT and VFPS_METRICS_PORT must differ (got 8080, 8080, 8082)",
                "VFPS_SHUTDOWN_TIMEOUT=\"forever\" is not valid: expected a duration such as 500ms, 5s or 2m",
                "VFPS_MAX_CREATE_BATCH=\"0\" is not valid: expected an integer from 1 to 10000",
                "VFPS_CREATE_BATCH_WORKERS=\"0\" is not valid: expected an integer from 1 to 256",
                "VFPS_READINESS_DATABASE_GRACE=\"-1s\" is not valid: expected a duration such as 500ms, 5s or 2m",
                "VFPS_LOG_JSON=\"maybe\" is not valid: expected true or false",
            ]
        );
    }

    #[test]
    fn settings_that_would_spin_or_overflow_are_refused() {
        let e = load(&[
            ("VFPS_METRICS_COUNT_INTERVAL", "0"),
            ("VFPS_MAX_CALL_DEADLINE", "2562047788015215h"),
        ])
        .unwrap_err();
        let all = e.0.join("\n");
        for needle in [
            "VFPS_METRICS_COUNT_INTERVAL must be greater than zero",
            "VFPS_MAX_CALL_DEADLINE=\"2562047788015215h\" is not valid",
        ] {
            assert!(all.contains(needle), "{needle:?} missing from:\n{all}");
        }
    }

    #[test]
    fn appsettings_in_the_working_directory_are_read_as_aspnet_layers_them() {
        let dir = std::env::temp_dir().join(format!("vfps-content-root-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("appsettings.json"),
            r#"{"MetricsPort": 9001, "Kestrel": {"Endpoints": {"Http": {"Url": "http://0.0.0.0:9000"}}}}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("appsettings.Production.json"),
            r#"{"MetricsPort": 9002, "Pseudonymization": {"BackingStore": "PostgreSQL"},
                "ConnectionStrings": {"PostgreSQL": ""}}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("appsettings.Staging.json"),
            r#"{"MetricsPort": 9003}"#,
        )
        .unwrap();
        let load = |vars: &[(&str, &str)]| {
            Settings::load_in(
                Some(&dir),
                vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
                &Flags::default(),
            )
        };
        // Upstream's stock BackingStore=PostgreSQL with an empty connection
        // string, from a file: the SQLite default still serves.
        let s = load(&[]).unwrap().0;
        assert_eq!((s.listen.http_port, s.listen.metrics_port), (9000, 9002));
        assert!(matches!(s.store, StoreConfig::Sqlite(_)));
        let e = load(&[("Pseudonymization__BackingStore", "PostgreSQL")]).unwrap_err();
        assert!(e.0[0].contains("BackingStore=PostgreSQL but"), "{e:?}");
        let s = load(&[("ASPNETCORE_ENVIRONMENT", "Staging")]).unwrap().0;
        assert_eq!(s.listen.metrics_port, 9003, "the environment's file");
        let s = load(&[("MetricsPort", "9004")]).unwrap().0;
        assert_eq!(s.listen.metrics_port, 9004, "the environment wins");

        std::fs::write(dir.join("appsettings.Production.json"), "{").unwrap();
        let e = load(&[]).unwrap_err();
        assert!(
            e.0[0].contains("appsettings.Production.json: not JSON"),
            "{e:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_postgresql_backing_store_without_its_connection_string_is_refused() {
        let e = load(&[("Pseudonymization__BackingStore", "PostgreSQL")]).unwrap_err();
        assert!(
            e.0[0].starts_with(
                "Pseudonymization__BackingStore=PostgreSQL but ConnectionStrings__PostgreSQL"
            ),
            "{e:?}"
        );
        let e = load(&[
            ("pseudonymization__backingstore", "sqlite"),
            ("ConnectionStrings__PostgreSQL", "Host=db;Username=u"),
        ])
        .unwrap_err();
        assert!(e.0[0].contains("remove one of them"), "{e:?}");
        let e = load(&[("Pseudonymization__BackingStore", "InMemory")]).unwrap_err();
        assert!(e.0[0].contains("expected PostgreSQL or SQLite"), "{e:?}");
        assert!(matches!(
            load(&[
                ("Pseudonymization__BackingStore", "postgresql"),
                ("ConnectionStrings__PostgreSQL", "Host=db;Username=u"),
            ])
            .unwrap()
            .store,
            StoreConfig::Postgres(_)
        ));
        assert!(matches!(
            load(&[("Pseudonymization__BackingStore", "SQLite")])
                .unwrap()
                .store,
            StoreConfig::Sqlite(_)
        ));
    }

    #[test]
    fn upstreams_kestrel_endpoints_and_metrics_port_set_the_ports() {
        let s = load(&[
            ("Kestrel__Endpoints__Http__Url", "http://0.0.0.0:9090"),
            ("KESTREL__ENDPOINTS__HTTPGRPC__URL", "http://+:9091/"),
            (
                "Kestrel__Endpoints__Http__Protocols",
                "Http1AndHttp2AndHttp3",
            ),
            ("MetricsPort", "9092"),
        ])
        .unwrap();
        assert_eq!(
            (
                s.listen.http_port,
                s.listen.grpc_port,
                s.listen.metrics_port
            ),
            (9090, 9091, 9092)
        );
        let s = load(&[
            ("Kestrel__Endpoints__Http__Url", "http://*:9090"),
            ("VFPS_HTTP_PORT", "9000"),
        ])
        .unwrap();
        assert_eq!(s.listen.http_port, 9000, "VFPS_HTTP_PORT wins");

        let e = load(&[
            ("Kestrel__Endpoints__Http__Url", "https://0.0.0.0:8443"),
            ("Kestrel__Endpoints__HttpGrpc__Url", "http://localhost:9091"),
            ("Kestrel__Endpoints__Https__Url", "http://0.0.0.0:9443"),
            ("MetricsPort", "eighty"),
        ])
        .unwrap_err();
        let all = e.0.join("\n");
        for needle in [
            "Kestrel__Endpoints__Http__Url=\"https://0.0.0.0:8443\" is not valid: https endpoints are configured with VFPS_TLS_*",
            "Kestrel__Endpoints__HttpGrpc__Url=\"http://localhost:9091\" is not valid: host \"localhost\" given",
            "Kestrel__Endpoints__Https__Url: unknown endpoint",
            "MetricsPort=\"eighty\" is not valid",
        ] {
            assert!(all.contains(needle), "{needle:?} missing from:\n{all}");
        }
    }

    #[test]
    fn a_flag_overrides_a_bad_variable_of_its_section() {
        let s = Settings::load(
            [("VFPS_HTTP_PORT".to_owned(), "not a port".to_owned())],
            &Flags {
                http_port: Some(9000),
                ..Flags::default()
            },
        )
        .unwrap()
        .0;
        assert_eq!(s.listen.http_port, 9000);
    }

    #[test]
    fn authorization_reads_upstreams_names() {
        let s = load(&[
            ("Authorization__IsEnabled", "true"),
            ("Authorization__Authority", "https://idp.example/realms/x"),
            ("Authorization__Audience", "vfps"),
            ("Authorization__RoleClaimType", "realm_access.roles"),
            ("Authorization__AdminRoles__0", "vfps-admin"),
            ("Authorization__AdminRoles__1", "root"),
            ("Authorization__NamespaceRules__0__Namespace", "research"),
            ("Authorization__NamespaceRules__0__ReadRoles__0", "reader"),
            ("Authorization__NamespaceRules__0__WriteRoles__0", "writer"),
            ("Authorization__NamespaceRules__0__WriteRoles__1", "loader"),
            (
                "Authorization__NamespaceRules__0__ReverseLookupRoles__0",
                "trustee",
            ),
            ("authorization__namespacerules__1__namespace", "*"),
            ("Authorization__NamespaceRules__1__ReadRoles__0", "auditor"),
            ("VFPS_GRPC_REFLECTION", "false"),
        ])
        .unwrap();
        let a = &s.authorization;
        assert!(a.enabled);
        assert_eq!(a.authority.as_deref(), Some("https://idp.example/realms/x"));
        assert_eq!(a.audience.as_deref(), Some("vfps"));
        assert_eq!(a.role_claim_type, "realm_access.roles");
        assert_eq!(a.admin_roles, ["vfps-admin", "root"]);
        assert_eq!(
            a.namespace_rules,
            [
                NamespaceRule {
                    namespace: "research".into(),
                    read_roles: vec!["reader".into()],
                    write_roles: vec!["writer".into(), "loader".into()],
                    reverse_lookup_roles: vec!["trustee".into()],
                    erase_roles: Vec::new(),
                },
                NamespaceRule {
                    namespace: "*".into(),
                    read_roles: vec!["auditor".into()],
                    ..NamespaceRule::default()
                },
            ]
        );
        assert!(!s.grpc_reflection);
        let off = load(&[]).unwrap();
        assert!(!off.authorization.enabled && off.grpc_reflection);
    }

    #[test]
    fn bad_authorization_settings_are_named() {
        let e = load(&[
            ("Authorization__IsEnabled", "sometimes"),
            ("Authorization__Authority", "http://idp.local"),
            ("Authorization__AdminRoles__x", "a"),
            ("Authorization__NamespaceRules__0__ReadRoles__0", "r"),
            ("Authorization__NamespaceRules__1__Namespace", "n"),
            ("Authorization__NamespaceRules__1__OwnerRoles__0", "o"),
            ("VFPS_TOKEN_CACHE_DURATION", "1h"),
        ])
        .unwrap_err();
        let all = e.0.join("\n");
        for needle in [
            "Authorization__IsEnabled=\"sometimes\"",
            "plain http; set Authorization__RequireHttpsMetadata=false",
            "Authorization__AdminRoles__x: the index must be a number",
            "Authorization__NamespaceRules__0__Namespace: a namespace name or * is required",
            "__ownerroles__0: unknown field",
            "VFPS_TOKEN_CACHE_DURATION must be at most 5m",
        ] {
            assert!(all.contains(needle), "{needle:?} missing from:\n{all}");
        }
        let plain = load(&[
            ("Authorization__Authority", "http://idp.local"),
            ("Authorization__RequireHttpsMetadata", "false"),
        ])
        .unwrap();
        assert_eq!(
            plain.authorization.authority.as_deref(),
            Some("http://idp.local")
        );
    }

    #[test]
    fn tracing_is_off_by_default_and_reads_upstreams_names() {
        let off = load(&[]).unwrap().tracing;
        assert_eq!(off, Tracing::default());
        assert!(!off.enabled);
        assert_eq!(off.root_sampler, RootSampler::AlwaysOn);
        assert_eq!(off.sampling_probability, 0.1);
        assert_eq!(off.otlp_endpoint, DEFAULT_OTLP_ENDPOINT);
        let s = load(&[
            ("Tracing__IsEnabled", "true"),
            ("Tracing__ServiceName", "vfps-eu"),
            ("Tracing__RootSampler", "TraceIdRatioBasedSampler"),
            ("Tracing__SamplingProbability", "0.25"),
            ("Tracing__Otlp__Endpoint", "http://collector:4317"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://elsewhere:4317"),
        ])
        .unwrap();
        assert_eq!(
            s.tracing,
            Tracing {
                enabled: true,
                service_name: "vfps-eu".into(),
                root_sampler: RootSampler::TraceIdRatioBased,
                sampling_probability: 0.25,
                otlp_endpoint: "http://collector:4317".into(),
                ..Tracing::default()
            }
        );
        // The short names, and the standard variable when upstream's is empty
        // (as upstream's appsettings.json ships it).
        let s = load(&[
            ("Tracing__RootSampler", "alwaysoff"),
            ("Tracing__Otlp__Endpoint", ""),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example:4317"),
        ])
        .unwrap();
        assert_eq!(s.tracing.root_sampler, RootSampler::AlwaysOff);
        assert_eq!(s.tracing.otlp_endpoint, "https://otel.example:4317");
    }

    #[test]
    fn the_exporters_standard_headers_and_timeout_are_read_the_signals_first() {
        let d = load(&[]).unwrap().tracing;
        assert_eq!(d.otlp_timeout, Duration::from_secs(10));
        assert_eq!(d.otlp_headers.iter().count(), 0);
        let s = load(&[
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-ignored=1"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                " Authorization=Basic%20dXNlcjpwdw== , x-tenant = eu ,",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ])
        .unwrap()
        .tracing;
        let headers: Vec<(&str, &str)> = s
            .otlp_headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            headers,
            [("authorization", "Basic dXNlcjpwdw=="), ("x-tenant", "eu")]
        );
        assert_eq!(s.otlp_timeout, Duration::from_millis(2500));
        // A credential is never shown, its name is.
        let shown = format!("{:?}", s.otlp_headers);
        assert!(
            shown.contains("authorization") && !shown.contains("dXNlcjpwdw"),
            "{shown}"
        );
    }

    #[test]
    fn bad_exporter_headers_and_timeouts_are_named_without_the_secret() {
        for (raw, wanted) in [
            ("authorization", "entry 1 is not key=value"),
            (
                "a=1,bad name=2",
                "entry 2: \"bad name\" is not a header name",
            ),
            (
                "authorization=Bearer%zz-secret",
                "entry 1 (authorization): the value is not a valid header value",
            ),
            (
                "authorization=line%0Abreak-secret",
                "entry 1 (authorization): the value is not a valid header value",
            ),
        ] {
            let e = load(&[("OTEL_EXPORTER_OTLP_HEADERS", raw)]).unwrap_err();
            assert_eq!(
                e.0,
                [format!("OTEL_EXPORTER_OTLP_HEADERS is not valid: {wanted}")],
                "{raw}"
            );
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        for bad in ["0", "-5", "10s"] {
            let e = load(&[("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", bad)]).unwrap_err();
            assert_eq!(
                e.0,
                [format!("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT={bad:?} is not valid: expected a positive number of milliseconds, such as 10000")]
            );
        }
    }

    #[test]
    fn bad_tracing_settings_are_named_with_their_values() {
        let e = load(&[
            ("Tracing__IsEnabled", "yes please"),
            ("Tracing__RootSampler", "SometimesSampler"),
            ("Tracing__SamplingProbability", "1.5"),
            ("Tracing__Otlp__Endpoint", "collector:4317"),
        ])
        .unwrap_err();
        assert_eq!(
            e.0,
            [
                "Tracing__IsEnabled=\"yes please\" is not valid: expected true or false",
                "Tracing__RootSampler=\"SometimesSampler\" is not valid: expected AlwaysOnSampler, AlwaysOffSampler or TraceIdRatioBasedSampler",
                "Tracing__SamplingProbability=\"1.5\" is not valid: expected a probability from 0 to 1, such as 0.1",
                "Tracing__Otlp__Endpoint=\"collector:4317\" is not valid: expected an http:// or https:// URL such as http://localhost:4317",
            ]
        );
        for bad in ["-0.1", "NaN", "ten percent"] {
            let e = load(&[("Tracing__SamplingProbability", bad)]).unwrap_err();
            assert!(e.0[0].starts_with("Tracing__SamplingProbability="), "{e}");
        }
        let e = load(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://")]).unwrap_err();
        assert!(
            e.0[0].starts_with("OTEL_EXPORTER_OTLP_ENDPOINT=\"http://\""),
            "{e}"
        );
    }

    #[test]
    fn durations_parse_in_every_accepted_form() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("5"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("00:05:00"), Some(Duration::from_secs(300)));
        // .NET TimeSpan, as upstream's settings write it.
        assert_eq!(
            parse_duration("0.01:00:00"),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(
            parse_duration("1.00:00:00"),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(
            parse_duration("00:00:01.5"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_duration("00:00:00.0000001"),
            Some(Duration::from_nanos(100))
        );
        assert_eq!(
            parse_duration("36:00:00"),
            Some(Duration::from_secs(129_600))
        );
        for bad in [
            "1.24:00:00",
            "00:60:00",
            "00:00:60",
            "0.01:00",
            "a.01:00:00",
            "00:00:01.x",
            "-1:00:00",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert_eq!(parse_duration("5 parsecs"), None);
        assert_eq!(parse_duration("-1s"), None);
        // Beyond a hundred years: refused, not a panic or an overflowing deadline.
        for huge in [
            "100000000000000000000",
            "100000000000000000000s",
            "2562047788015215h",
            "999999999.00:00:00",
            "1e400",
        ] {
            assert_eq!(parse_duration(huge), None, "{huge}");
        }
        assert_eq!(parse_duration("876000h"), Some(env::MAX_DURATION));
    }
}
