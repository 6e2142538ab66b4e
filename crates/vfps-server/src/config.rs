//! Configuration by the deployed vfps's names, so a deployment switches unchanged.
//!
//! Sources, lowest to highest precedence: defaults, environment variables
//! (case-insensitive, `__` as the section separator, as ASP.NET reads them), then
//! command-line flags. Every setting is checked before any port is bound, and every
//! bad key is reported at once, naming the key and the problem (never a password).

use std::{collections::BTreeMap, net::IpAddr, path::PathBuf, time::Duration};

use vfps_core::{GenerationMethod, NamespaceSettings};
use vfps_store::postgres::{npgsql, PgOptions};

/// Where pseudonyms are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    Postgres(Box<PgOptions>),
    Sqlite(PathBuf),
}

/// A namespace to create at start-up if missing (`Init__v1__Namespaces__N__*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitNamespace {
    pub name: String,
    pub description: String,
    pub settings: NamespaceSettings,
}

/// Everything `vfps serve` needs, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub store: StoreConfig,
    pub listen_address: IpAddr,
    pub http_port: u16,
    pub grpc_port: u16,
    pub metrics_port: u16,
    /// Migrate at start-up (always for SQLite).
    pub force_migrations: bool,
    pub init_namespaces: Vec<InitNamespace>,
    /// `Pseudonymization__Caching__*`.
    pub caching: Caching,
    /// Upper bound of a call's deadline, and the deadline of calls without one.
    pub max_call_deadline: Duration,
    /// After SIGTERM: time spent not-ready but still serving, so load balancers
    /// stop sending before the listeners close.
    pub pre_stop_delay: Duration,
    /// After the pre-stop delay: time in-flight calls get to finish.
    pub shutdown_timeout: Duration,
    /// Most Creates coalesced into one upsert.
    pub max_create_batch: usize,
    /// Most Creates waiting for a batch; more are answered `UNAVAILABLE` at once.
    pub max_create_queue: usize,
    /// How long the database may be unreachable from this replica before the
    /// replica reports itself not ready.
    pub readiness_database_grace: Duration,
    pub pseudonym_count_interval: Duration,
    pub log_json: bool,
}

/// `Pseudonymization__Caching__*`, as upstream: one absolute expiration and size
/// limit (entries) for both caches, each cache switched on by itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caching {
    pub namespaces: bool,
    pub pseudonyms: bool,
    pub absolute_expiration: Duration,
    pub size_limit: usize,
}

impl Default for Caching {
    fn default() -> Self {
        Self {
            namespaces: false,
            pseudonyms: false,
            absolute_expiration: Duration::from_secs(3600),
            size_limit: 32,
        }
    }
}

/// Command-line overrides; `None` leaves the environment's value.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Flags {
    /// PostgreSQL connection string (Npgsql keyword form); overrides ConnectionStrings__PostgreSQL.
    #[arg(long, value_name = "CONNECTION_STRING")]
    pub postgres: Option<String>,
    /// SQLite file used when no PostgreSQL connection string is set [default: vfps.sqlite].
    #[arg(long, value_name = "PATH")]
    pub sqlite_path: Option<PathBuf>,
    /// Address to listen on [default: 0.0.0.0].
    #[arg(long, value_name = "IP")]
    pub listen_address: Option<String>,
    /// REST and FHIR port [default: 8080].
    #[arg(long)]
    pub http_port: Option<u16>,
    /// gRPC port [default: 8081].
    #[arg(long)]
    pub grpc_port: Option<u16>,
    /// Prometheus metrics port [default: 8082].
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Apply database migrations at start-up.
    #[arg(long)]
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

/// Parses a duration: `500ms`, `5s`, `2m`, `1h`, a bare number of seconds, or a
/// .NET TimeSpan `hh:mm:ss`.
pub fn parse_duration(raw: &str) -> Option<Duration> {
    let t = raw.trim();
    if t.contains(':') {
        let parts: Vec<&str> = t.split(':').collect();
        if parts.len() != 3 {
            return None;
        }
        let h: u64 = parts[0].parse().ok()?;
        let m: u64 = parts[1].parse().ok()?;
        let s: f64 = parts[2].parse().ok()?;
        if m >= 60 || !(0.0..60.0).contains(&s) {
            return None;
        }
        return Some(Duration::from_secs(h * 3600 + m * 60) + Duration::from_secs_f64(s));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    if !n.is_finite() || n < 0.0 {
        return None;
    }
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

fn parse_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// Case-insensitive view of the environment.
struct Env(BTreeMap<String, (String, String)>);

impl Env {
    fn new(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        Self(
            vars.into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), (k, v)))
                .collect(),
        )
    }
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(&key.to_ascii_lowercase())
            .map(|(_, v)| v.as_str())
    }
    fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let p = prefix.to_ascii_lowercase();
        self.0.iter().filter_map(move |(k, (_, v))| {
            k.strip_prefix(p.as_str()).map(|rest| (rest, v.as_str()))
        })
    }
}

/// Parses a setting, recording a problem instead of failing fast.
fn setting<T>(
    env: &Env,
    errors: &mut Vec<String>,
    key: &str,
    default: T,
    parse: impl Fn(&str) -> Option<T>,
    expected: &str,
) -> T {
    match env.get(key) {
        None => default,
        Some(raw) => parse(raw).unwrap_or_else(|| {
            errors.push(format!("{key}={raw:?} is not valid: expected {expected}"));
            default
        }),
    }
}

impl Settings {
    /// Builds and validates settings from environment variables and flags.
    pub fn load(
        vars: impl IntoIterator<Item = (String, String)>,
        flags: &Flags,
    ) -> Result<(Self, Vec<String>), ConfigErrors> {
        let env = Env::new(vars);
        let mut errors = Vec::new();
        let mut notes = Vec::new();

        let connection_string = flags
            .postgres
            .clone()
            .or_else(|| env.get("ConnectionStrings__PostgreSQL").map(str::to_owned))
            .filter(|s| !s.trim().is_empty());
        let store = match connection_string {
            Some(cs) => {
                match npgsql::parse(&cs, env.get("PGUSER"), env.get("PGPASSWORD")) {
                    Ok(parsed) => {
                        for k in parsed.ignored_keywords {
                            notes.push(format!("ConnectionStrings__PostgreSQL: keyword {k:?} is accepted and ignored"));
                        }
                        StoreConfig::Postgres(Box::new(parsed.options))
                    }
                    Err(e) => {
                        errors.push(e.to_string());
                        StoreConfig::Sqlite(PathBuf::new())
                    }
                }
            }
            None => StoreConfig::Sqlite(
                flags
                    .sqlite_path
                    .clone()
                    .or_else(|| env.get("VFPS_SQLITE_PATH").map(PathBuf::from))
                    .unwrap_or_else(|| PathBuf::from("vfps.sqlite")),
            ),
        };

        let port = |errors: &mut Vec<String>, key: &str, flag: Option<u16>, default: u16| {
            flag.unwrap_or_else(|| {
                setting(
                    &env,
                    errors,
                    key,
                    default,
                    |s| s.trim().parse().ok(),
                    "a TCP port (0-65535)",
                )
            })
        };
        let http_port = port(&mut errors, "VFPS_HTTP_PORT", flags.http_port, 8080);
        let grpc_port = port(&mut errors, "VFPS_GRPC_PORT", flags.grpc_port, 8081);
        let metrics_port = port(&mut errors, "VFPS_METRICS_PORT", flags.metrics_port, 8082);
        let listen_address = match &flags.listen_address {
            Some(raw) => raw.parse().unwrap_or_else(|_| {
                errors.push(format!("--listen-address={raw:?} is not an IP address"));
                IpAddr::from([0, 0, 0, 0])
            }),
            None => setting(
                &env,
                &mut errors,
                "VFPS_LISTEN_ADDRESS",
                IpAddr::from([0, 0, 0, 0]),
                |s| s.trim().parse().ok(),
                "an IP address",
            ),
        };
        let nonzero = [http_port, grpc_port, metrics_port];
        if nonzero.iter().filter(|p| **p != 0).count()
            != nonzero
                .iter()
                .filter(|p| **p != 0)
                .collect::<std::collections::HashSet<_>>()
                .len()
        {
            errors.push(format!(
                "VFPS_HTTP_PORT, VFPS_GRPC_PORT and VFPS_METRICS_PORT must differ (got {http_port}, {grpc_port}, {metrics_port})"
            ));
        }

        let force_migrations = flags.force_migrations
            || setting(
                &env,
                &mut errors,
                "ForceRunDatabaseMigrations",
                false,
                parse_bool,
                "true or false",
            );
        let defaults = Caching::default();
        let caching = Caching {
            namespaces: setting(
                &env,
                &mut errors,
                "Pseudonymization__Caching__Namespaces__IsEnabled",
                defaults.namespaces,
                parse_bool,
                "true or false",
            ),
            pseudonyms: setting(
                &env,
                &mut errors,
                "Pseudonymization__Caching__Pseudonyms__IsEnabled",
                defaults.pseudonyms,
                parse_bool,
                "true or false",
            ),
            absolute_expiration: setting(
                &env,
                &mut errors,
                "Pseudonymization__Caching__AbsoluteExpiration",
                defaults.absolute_expiration,
                parse_duration,
                "a duration such as 01:00:00 or 3600s",
            ),
            size_limit: setting(
                &env,
                &mut errors,
                "Pseudonymization__Caching__SizeLimit",
                defaults.size_limit,
                |v| v.trim().parse::<usize>().ok().filter(|n| *n > 0),
                "a positive number of entries",
            ),
        };
        let dur = |errors: &mut Vec<String>, key: &str, default: Duration| {
            setting(
                &env,
                errors,
                key,
                default,
                parse_duration,
                "a duration such as 500ms, 5s or 2m",
            )
        };
        let max_call_deadline = dur(
            &mut errors,
            "VFPS_MAX_CALL_DEADLINE",
            Duration::from_secs(30),
        );
        if max_call_deadline.is_zero() {
            errors.push("VFPS_MAX_CALL_DEADLINE must be greater than zero".into());
        }
        let pre_stop_delay = dur(&mut errors, "VFPS_SHUTDOWN_PRE_STOP_DELAY", Duration::ZERO);
        let shutdown_timeout = dur(
            &mut errors,
            "VFPS_SHUTDOWN_TIMEOUT",
            Duration::from_secs(20),
        );
        let pseudonym_count_interval = dur(
            &mut errors,
            "VFPS_METRICS_COUNT_INTERVAL",
            Duration::from_secs(60),
        );
        let max_create_batch = setting(
            &env,
            &mut errors,
            "VFPS_MAX_CREATE_BATCH",
            256usize,
            |s| s.trim().parse().ok().filter(|n| (1..=10_000).contains(n)),
            "an integer from 1 to 10000",
        );
        let max_create_queue = setting(
            &env,
            &mut errors,
            "VFPS_MAX_CREATE_QUEUE",
            4096usize,
            |s| {
                s.trim()
                    .parse()
                    .ok()
                    .filter(|n| (1..=1_000_000).contains(n))
            },
            "an integer from 1 to 1000000",
        );
        let readiness_database_grace = dur(
            &mut errors,
            "VFPS_READINESS_DATABASE_GRACE",
            Duration::from_secs(30),
        );
        let idle_in_transaction_timeout = dur(
            &mut errors,
            "VFPS_IDLE_IN_TRANSACTION_SESSION_TIMEOUT",
            Duration::from_secs(10),
        );
        if idle_in_transaction_timeout < Duration::from_millis(1) {
            errors.push("VFPS_IDLE_IN_TRANSACTION_SESSION_TIMEOUT must be at least 1ms".into());
        }
        let mut store = store;
        if let StoreConfig::Postgres(options) = &mut store {
            options.idle_in_transaction_timeout = idle_in_transaction_timeout;
        }
        let log_json = setting(
            &env,
            &mut errors,
            "VFPS_LOG_JSON",
            false,
            parse_bool,
            "true or false",
        );

        let init_namespaces = init_namespaces(&env, &mut errors);

        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        Ok((
            Self {
                store,
                listen_address,
                http_port,
                grpc_port,
                metrics_port,
                force_migrations,
                init_namespaces,
                caching,
                max_call_deadline,
                pre_stop_delay,
                shutdown_timeout,
                max_create_batch,
                max_create_queue,
                readiness_database_grace,
                pseudonym_count_interval,
                log_json,
            },
            notes,
        ))
    }
}

fn init_namespaces(env: &Env, errors: &mut Vec<String>) -> Vec<InitNamespace> {
    let mut by_index: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    for (rest, value) in env.with_prefix("Init__v1__Namespaces__") {
        let Some((index, field)) = rest.split_once("__") else {
            errors.push(format!(
                "Init__v1__Namespaces__{rest}: expected Init__v1__Namespaces__<N>__<Field>"
            ));
            continue;
        };
        let Ok(index) = index.parse::<u32>() else {
            errors.push(format!(
                "Init__v1__Namespaces__{index}: the index must be a number"
            ));
            continue;
        };
        by_index
            .entry(index)
            .or_default()
            .insert(field.to_owned(), value.to_owned());
    }
    let mut out = Vec::new();
    for (i, fields) in by_index {
        let key = |f: &str| format!("Init__v1__Namespaces__{i}__{f}");
        for f in fields.keys() {
            if ![
                "name",
                "description",
                "pseudonymgenerationmethod",
                "pseudonymlength",
                "pseudonymprefix",
                "pseudonymsuffix",
            ]
            .contains(&f.as_str())
            {
                errors.push(format!("{}: unknown field", key(f)));
            }
        }
        let Some(name) = fields
            .get("name")
            .filter(|n| vfps_core::NamespaceName::parse(n).is_ok())
        else {
            errors.push(format!("{}: a non-blank name is required", key("Name")));
            continue;
        };
        let method = match fields.get("pseudonymgenerationmethod") {
            None => GenerationMethod::SecureRandomBase64UrlEncoded,
            Some(raw) => match GenerationMethod::parse_config(raw) {
                Some(m) => m,
                None => {
                    errors.push(format!(
                        "{}={raw:?} is not a pseudonym generation method",
                        key("PseudonymGenerationMethod")
                    ));
                    continue;
                }
            },
        };
        let length = match fields.get("pseudonymlength") {
            None => method.fixed_length().unwrap_or(32),
            Some(raw) => match raw.trim().parse::<u32>() {
                Ok(n) => n,
                Err(_) => {
                    errors.push(format!(
                        "{}={raw:?} is not a whole number",
                        key("PseudonymLength")
                    ));
                    continue;
                }
            },
        };
        let nonempty = |f: &str| fields.get(f).filter(|v| !v.is_empty()).cloned();
        match NamespaceSettings::parse(
            method,
            length,
            nonempty("pseudonymprefix"),
            nonempty("pseudonymsuffix"),
        ) {
            Ok(settings) => out.push(InitNamespace {
                name: name.clone(),
                description: fields.get("description").cloned().unwrap_or_default(),
                settings,
            }),
            Err(e) => errors.push(format!("Init__v1__Namespaces__{i}: {}", e.message)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
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
            (s.http_port, s.grpc_port, s.metrics_port),
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
            ("Init__v1__Namespaces__1__Name", "other"),
        ])
        .unwrap();
        let StoreConfig::Postgres(pg) = &s.store else {
            panic!("expected postgres")
        };
        assert_eq!(pg.password.as_deref(), Some("secret"));
        assert!(s.force_migrations);
        assert_eq!(
            s.caching,
            Caching {
                namespaces: true,
                pseudonyms: true,
                absolute_expiration: Duration::from_secs(3600),
                size_limit: 65534,
            }
        );
        assert_eq!(s.init_namespaces.len(), 2);
        assert_eq!(s.init_namespaces[0].settings.length, 36);
        assert_eq!(s.init_namespaces[0].settings.prefix.as_deref(), Some("d-"));
        assert_eq!(s.init_namespaces[1].settings.length, 32);
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

    #[test]
    fn durations_parse_in_every_accepted_form() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("5"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("00:05:00"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("5 parsecs"), None);
        assert_eq!(parse_duration("-1s"), None);
    }
}
