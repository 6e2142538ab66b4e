//! CSV jobs: upstream's `S3__*` and `CsvProcessing__*` settings, and where
//! job files live without S3.
//!
//! Upstream serves jobs only with `S3__IsEnabled`; here the embedded default
//! (SQLite) keeps job files in a folder beside the database, and PostgreSQL
//! without S3 uses a folder only when `VFPS_JOBS_DIR` names one (a volume every
//! replica shares: a replica runs any replica's job).

use std::{path::PathBuf, time::Duration};

use vfps_jobs::{
    inspect::Limits,
    runner::RunnerSettings,
    service::ServiceSettings,
    storage::{
        s3::{CredentialSource, Credentials, S3Config},
        MAX_PARTS, MIN_PART_BYTES,
    },
};

use super::{
    authorization::list,
    env::{duration, parse_bool, setting, Env},
    StoreConfig,
};

/// Where job files live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobStorage {
    S3(Box<S3Config>),
    Folder(PathBuf),
    /// Jobs are off, for this reason (answered to every job call).
    Off(String),
}

/// How this replica serves and runs CSV jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsConfig {
    pub storage: JobStorage,
    pub runner: RunnerSettings,
    /// Limits and runners per replica (its presigned-URL expiry from `S3__`).
    pub limits: Limits,
    pub presigned_url_expiry: Duration,
    /// `CsvProcessing__Workers` (2): jobs this replica runs at once; 0 runs none.
    pub workers: usize,
    /// `CsvProcessing__PollInterval` (1s): how often an idle runner looks for work.
    pub poll_interval: Duration,
    /// `VFPS_INSTANCE_NAME` (the host name): this replica as a job's runner.
    pub instance: String,
}

impl JobsConfig {
    pub fn service(&self) -> ServiceSettings {
        ServiceSettings {
            limits: self.limits,
            presigned_url_expiry: self.presigned_url_expiry,
            workers: self.workers,
            poll_interval: self.poll_interval,
        }
    }
}

const S3_KEYS: [&str; 10] = [
    "isenabled",
    "serviceurl",
    "accesskey",
    "secretkey",
    "sessiontoken",
    "bucket",
    "region",
    "forcepathstyle",
    "presignedurlexpiry",
    "objectretentiondays",
];

const CSV_KEYS: [&str; 11] = [
    "pseudonymizebatchsize",
    "stalledjobthreshold",
    "maxfilesize",
    "maxcolumns",
    "maxlinelength",
    "workers",
    "pollinterval",
    "leaseduration",
    "checkpointinterval",
    "checkpointrows",
    "outputpartsize",
];

/// The longest `S3__PresignedUrlExpiry` (SigV4's limit).
const MAX_PRESIGNED_URL_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// A count within `min..=max`.
fn count(min: u64, max: u64) -> impl Fn(&str) -> Option<u64> {
    move |raw| {
        raw.trim()
            .parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
    }
}

/// A size in bytes: a number, optionally with KiB, MiB, GiB (or KB, MB, GB).
pub fn parse_bytes(raw: &str) -> Option<u64> {
    let t = raw.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "kb" | "k" => 1 << 10,
        "mib" | "mb" | "m" => 1 << 20,
        "gib" | "gb" | "g" => 1 << 30,
        "tib" | "tb" | "t" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(factor)
}

fn timespan(env: &Env, errors: &mut Vec<String>, key: &str, default: Duration) -> Duration {
    setting(
        env,
        errors,
        key,
        default,
        super::parse_duration,
        "a duration such as 00:15:00 or 15m",
    )
}

impl JobsConfig {
    pub(super) fn from_env(env: &Env, store: &StoreConfig, errors: &mut Vec<String>) -> Self {
        for (prefix, keys, lists) in [
            ("S3__", &S3_KEYS[..], "allowedorigins__"),
            (
                "CsvProcessing__",
                &CSV_KEYS[..],
                "missingvalueplaceholders__",
            ),
        ] {
            for key in env.keys_with_prefix(prefix) {
                let rest = key[prefix.len()..].to_ascii_lowercase();
                if !keys.contains(&rest.as_str()) && !rest.starts_with(lists) {
                    errors.push(format!("{key}: unknown setting"));
                }
            }
        }
        let d = RunnerSettings::default();
        let batch_rows = setting(
            env,
            errors,
            "CsvProcessing__PseudonymizeBatchSize",
            d.batch_rows as u64,
            count(1, 100_000),
            "a number of rows from 1 to 100000",
        ) as usize;
        let mut placeholders = list(env, errors, "CsvProcessing__MissingValuePlaceholders__");
        if env
            .keys_with_prefix("CsvProcessing__MissingValuePlaceholders__")
            .next()
            .is_none()
        {
            placeholders = d.placeholders.clone();
        }
        let lease = duration(env, errors, "CsvProcessing__LeaseDuration", d.lease);
        let checkpoint_interval = duration(
            env,
            errors,
            "CsvProcessing__CheckpointInterval",
            d.checkpoint_interval,
        );
        if checkpoint_interval * 2 > lease {
            errors.push(format!(
                "CsvProcessing__CheckpointInterval ({checkpoint_interval:?}) must be at most half of \
                 CsvProcessing__LeaseDuration ({lease:?}): a runner renews its lease as it checkpoints"
            ));
        }
        let limits = Limits {
            max_file_bytes: setting(
                env,
                errors,
                "CsvProcessing__MaxFileSize",
                Limits::default().max_file_bytes,
                |r| parse_bytes(r).filter(|&n| n > 0),
                "a size such as 10GiB or 500MiB",
            ),
            max_columns: setting(
                env,
                errors,
                "CsvProcessing__MaxColumns",
                Limits::default().max_columns as u64,
                count(1, 100_000),
                "a number of columns from 1 to 100000",
            ) as usize,
            max_record_bytes: setting(
                env,
                errors,
                "CsvProcessing__MaxLineLength",
                Limits::default().max_record_bytes as u64,
                |r| parse_bytes(r).filter(|&n| (1..=(256 << 20)).contains(&n)),
                "a size from 1 byte to 256MiB",
            ) as usize,
        };
        let runner = RunnerSettings {
            batch_rows,
            checkpoint_rows: setting(
                env,
                errors,
                "CsvProcessing__CheckpointRows",
                d.checkpoint_rows,
                count(1, 1_000_000),
                "a number of rows from 1 to 1000000",
            ),
            checkpoint_interval,
            lease,
            stalled: timespan(env, errors, "CsvProcessing__StalledJobThreshold", d.stalled),
            max_record_bytes: limits.max_record_bytes,
            part_bytes: setting(
                env,
                errors,
                "CsvProcessing__OutputPartSize",
                d.part_bytes as u64,
                |r| parse_bytes(r).filter(|&n| (1..=(5u64 << 30)).contains(&n)),
                "a size such as 8MiB (S3 needs at least 5MiB)",
            ) as usize,
            placeholders,
            restart_from_zero: setting(
                env,
                errors,
                "VFPS_UNSAFE_JOBS_RESTART_FROM_ZERO",
                false,
                parse_bool,
                "true or false",
            ),
            pipeline_depth: d.pipeline_depth,
        };
        let s3_enabled = setting(
            env,
            errors,
            "S3__IsEnabled",
            false,
            parse_bool,
            "true or false",
        );
        let presigned_url_expiry = timespan(
            env,
            errors,
            "S3__PresignedUrlExpiry",
            Duration::from_secs(15 * 60),
        );
        let storage = if s3_enabled {
            Self::check_parts(env, errors, &runner, &limits);
            Self::s3(env, errors, presigned_url_expiry)
        } else if let Some(dir) = env.text("VFPS_JOBS_DIR") {
            JobStorage::Folder(PathBuf::from(dir))
        } else {
            match store {
                StoreConfig::Sqlite(path) => {
                    let mut dir = path.clone().into_os_string();
                    dir.push(".jobs");
                    JobStorage::Folder(PathBuf::from(dir))
                }
                StoreConfig::Postgres(_) => JobStorage::Off(
                    "CSV jobs need S3 (S3__IsEnabled=true and S3__*) or VFPS_JOBS_DIR \
                     on a volume every replica shares"
                        .into(),
                ),
            }
        };
        let instance = env
            .text("VFPS_INSTANCE_NAME")
            .or_else(|| env.text("HOSTNAME"))
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
            })
            .unwrap_or_else(|| "vfps".into());
        Self {
            storage,
            runner,
            limits,
            presigned_url_expiry,
            workers: setting(
                env,
                errors,
                "CsvProcessing__Workers",
                2,
                count(0, 64),
                "a number of jobs from 0 to 64",
            ) as usize,
            poll_interval: duration(
                env,
                errors,
                "CsvProcessing__PollInterval",
                Duration::from_secs(1),
            ),
            instance: format!("{instance}/{}", std::process::id()),
        }
    }

    /// S3 takes at most 10,000 parts of at least 5 MiB (but the last): the
    /// part size must hold the largest input in 10,000 parts. Refused rather
    /// than grown here, because a runner holds up to a part in memory: the
    /// operator sizes the part and the pod's memory together.
    fn check_parts(env: &Env, errors: &mut Vec<String>, runner: &RunnerSettings, limits: &Limits) {
        let part = runner.part_bytes as u64;
        let shown = |key: &str, bytes: u64| match env.text(key) {
            Some(raw) => format!("{key}={raw:?} ({bytes} bytes)"),
            None => format!("{key} ({bytes} bytes, its default)"),
        };
        if part < MIN_PART_BYTES as u64 {
            errors.push(format!(
                "{} is smaller than S3's smallest part (5MiB, {MIN_PART_BYTES} bytes)",
                shown("CsvProcessing__OutputPartSize", part)
            ));
            return;
        }
        let max_file = limits.max_file_bytes;
        if part.saturating_mul(u64::from(MAX_PARTS)) < max_file {
            let needed = max_file.div_ceil(u64::from(MAX_PARTS)).div_ceil(1 << 20);
            errors.push(format!(
                "{} holds at most {MAX_PARTS} × {part} bytes in S3's {MAX_PARTS} parts, less than {}:                  set CsvProcessing__OutputPartSize to at least {needed}MiB (a runner holds up to a part in memory),                  or lower CsvProcessing__MaxFileSize",
                shown("CsvProcessing__OutputPartSize", part),
                shown("CsvProcessing__MaxFileSize", max_file),
            ));
        }
    }

    /// Where the bucket's credentials come from, in AWS's order: given in
    /// `S3__*`, AWS's environment variables, then a role's web identity (what
    /// an EKS pod with IAM roles for service accounts is given).
    fn credentials(env: &Env, errors: &mut Vec<String>, region: &str) -> CredentialSource {
        let pair = |errors: &mut Vec<String>, key: &str, secret: &str, token: &str| {
            let (k, s) = (env.text(key), env.text(secret));
            if k.is_none() && s.is_none() {
                return None;
            }
            for (name, value) in [(key, &k), (secret, &s)] {
                if value.is_none() {
                    errors.push(format!(
                        "{name} is required with {key} and {secret} (one is set)"
                    ));
                }
            }
            Some(CredentialSource::Static(Credentials {
                access_key: k.unwrap_or_default(),
                secret_key: s.unwrap_or_default(),
                session_token: env.text(token),
            }))
        };
        if let Some(given) = pair(errors, "S3__AccessKey", "S3__SecretKey", "S3__SessionToken") {
            return given;
        }
        if env.text("S3__SessionToken").is_some() {
            errors.push("S3__SessionToken needs S3__AccessKey and S3__SecretKey".into());
        }
        let get = |k: &str| env.text(k);
        if let Some(given) = vfps_aws::credentials::from_environment(&get, region, errors) {
            return given;
        }
        errors.push(
            "S3__AccessKey and S3__SecretKey are required with S3__IsEnabled=true \
             (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN)"
                .into(),
        );
        CredentialSource::Static(Credentials {
            access_key: String::new(),
            secret_key: String::new(),
            session_token: None,
        })
    }

    fn s3(env: &Env, errors: &mut Vec<String>, presigned_url_expiry: Duration) -> JobStorage {
        let before = errors.len();
        let mut required = |key: &str| {
            env.text(key).unwrap_or_else(|| {
                errors.push(format!("{key} is required with S3__IsEnabled=true"));
                String::new()
            })
        };
        let service_url = required("S3__ServiceUrl");
        let bucket = required("S3__Bucket");
        let http = service_url.starts_with("http://") || service_url.starts_with("https://");
        if !service_url.is_empty() && !http {
            errors.push(format!(
                "S3__ServiceUrl={service_url:?} is not valid: expected an http(s) URL"
            ));
        }
        let region = env.text("S3__Region").unwrap_or_else(|| "us-east-1".into());
        let expiry_ok = presigned_url_expiry <= MAX_PRESIGNED_URL_EXPIRY;
        if !expiry_ok {
            // Refused, not cut: the service announces the expiry to clients.
            errors.push(format!(
                "S3__PresignedUrlExpiry={:?} is longer than S3's limit for presigned URLs, 7 days (7.00:00:00)",
                env.text("S3__PresignedUrlExpiry").unwrap_or_default()
            ));
        }
        let config = S3Config {
            service_url,
            credentials: Self::credentials(env, errors, &region),
            bucket,
            region,
            force_path_style: setting(
                env,
                errors,
                "S3__ForcePathStyle",
                true,
                parse_bool,
                "true or false",
            ),
            presigned_url_expiry,
            object_retention_days: setting(
                env,
                errors,
                "S3__ObjectRetentionDays",
                30,
                count(0, 36_500),
                "a number of days (0 leaves the bucket's lifecycle alone)",
            ) as u32,
            allowed_origins: list(env, errors, "S3__AllowedOrigins__"),
        };
        // What only the settings together tell (a bucket name the addressing
        // style cannot take over https, …), once each one alone is valid.
        if errors.len() == before && expiry_ok {
            if let Err(e) = config.check() {
                errors.push(e);
            }
        }
        JobStorage::S3(Box::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vfps_jobs::storage::s3::WebIdentity;

    fn load(vars: &[(&str, &str)]) -> Result<JobsConfig, Vec<String>> {
        let env = Env::new(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let mut errors = Vec::new();
        let store = StoreConfig::Sqlite(PathBuf::from("/data/vfps.sqlite"));
        let config = JobsConfig::from_env(&env, &store, &mut errors);
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }

    #[test]
    fn the_embedded_default_keeps_job_files_beside_the_database() {
        let c = load(&[]).unwrap();
        assert_eq!(
            c.storage,
            JobStorage::Folder("/data/vfps.sqlite.jobs".into())
        );
        assert_eq!(c.runner.batch_rows, 1000);
        assert_eq!(c.runner.stalled, Duration::from_secs(600));
        assert_eq!(c.runner.placeholders, ["NA", "NULL"]);
    }

    #[test]
    fn upstreams_s3_settings_are_taken() {
        let c = load(&[
            ("S3__IsEnabled", "true"),
            ("S3__ServiceUrl", "http://minio:9000"),
            ("S3__AccessKey", "key"),
            ("S3__SecretKey", "secret"),
            ("S3__Bucket", "vfps"),
            ("S3__PresignedUrlExpiry", "00:05:00"),
            ("S3__AllowedOrigins__0", "https://vfps.example.org"),
            ("CsvProcessing__MissingValuePlaceholders__0", "n/a"),
            ("CsvProcessing__PseudonymizeBatchSize", "500"),
            ("CsvProcessing__StalledJobThreshold", "00:02:00"),
        ])
        .unwrap();
        let JobStorage::S3(s3) = c.storage else {
            panic!("not S3")
        };
        assert_eq!(s3.region, "us-east-1");
        assert!(s3.force_path_style);
        assert_eq!(s3.object_retention_days, 30);
        assert_eq!(s3.presigned_url_expiry, Duration::from_secs(300));
        assert_eq!(s3.allowed_origins, ["https://vfps.example.org"]);
        assert_eq!(c.runner.placeholders, ["n/a"]);
        assert_eq!(c.runner.batch_rows, 500);
        assert_eq!(c.runner.stalled, Duration::from_secs(120));
    }

    #[test]
    fn every_bad_key_is_named_and_no_secret_is_echoed() {
        let errors = load(&[
            ("S3__IsEnabled", "true"),
            ("S3__SecretKey", "hunter2"),
            ("S3__Buckett", "x"),
            ("CsvProcessing__PseudonymizeBatchSize", "0"),
            ("CsvProcessing__MaxFileSize", "lots"),
            ("CsvProcessing__CheckpointInterval", "20s"),
        ])
        .unwrap_err();
        let all = errors.join("\n");
        for expected in [
            "S3__Buckett: unknown setting",
            "S3__ServiceUrl is required",
            "S3__Bucket is required",
            "CsvProcessing__PseudonymizeBatchSize=\"0\"",
            "CsvProcessing__MaxFileSize=\"lots\"",
            "must be at most half of CsvProcessing__LeaseDuration",
        ] {
            assert!(all.contains(expected), "{expected} missing from {all}");
        }
        assert!(!all.contains("hunter2"));
    }

    #[test]
    fn postgresql_without_s3_or_a_shared_folder_has_no_jobs() {
        let env = Env::new([]);
        let mut errors = Vec::new();
        let options = vfps_store::postgres::npgsql::parse("Host=db", None, None)
            .unwrap()
            .options;
        let store = StoreConfig::Postgres(Box::new(options));
        let c = JobsConfig::from_env(&env, &store, &mut errors);
        assert!(matches!(c.storage, JobStorage::Off(m) if m.contains("VFPS_JOBS_DIR")));
    }

    const S3_ON: [(&str, &str); 5] = [
        ("S3__IsEnabled", "true"),
        ("S3__ServiceUrl", "https://s3.eu-central-1.amazonaws.com"),
        ("S3__AccessKey", "AKIAIOSFODNN7EXAMPLE"),
        ("S3__SecretKey", "hunter2"),
        ("S3__Bucket", "vfps"),
    ];

    fn with_s3(more: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut vars = S3_ON.to_vec();
        vars.retain(|(k, _)| !more.iter().any(|(m, _)| m == k));
        vars.extend_from_slice(more);
        vars
    }

    fn s3_of(c: JobsConfig) -> S3Config {
        match c.storage {
            JobStorage::S3(s3) => *s3,
            other => panic!("not S3: {other:?}"),
        }
    }

    #[test]
    fn a_presigned_url_expiry_past_seven_days_is_refused_not_cut() {
        let errors = load(&with_s3(&[("S3__PresignedUrlExpiry", "8.00:00:00")])).unwrap_err();
        assert!(
            errors.iter().any(
                |e| e.contains("S3__PresignedUrlExpiry=\"8.00:00:00\"") && e.contains("7 days")
            ),
            "{errors:?}"
        );
        let week = load(&with_s3(&[("S3__PresignedUrlExpiry", "7.00:00:00")])).unwrap();
        assert_eq!(week.presigned_url_expiry, Duration::from_secs(7 * 86_400));
    }

    #[test]
    fn the_part_size_must_hold_the_largest_file_in_s3_s_10000_parts() {
        let errors = load(&with_s3(&[("CsvProcessing__MaxFileSize", "60GiB")])).unwrap_err();
        let all = errors.join("\n");
        assert!(
            all.contains("CsvProcessing__OutputPartSize (5242880 bytes, its default)")
                && all.contains("CsvProcessing__MaxFileSize=\"60GiB\" (64424509440 bytes)")
                && all.contains("at least 7MiB"),
            "{all}"
        );
        load(&with_s3(&[
            ("CsvProcessing__MaxFileSize", "60GiB"),
            ("CsvProcessing__OutputPartSize", "7MiB"),
        ]))
        .unwrap();
        let small = load(&with_s3(&[("CsvProcessing__OutputPartSize", "1MiB")])).unwrap_err();
        assert!(
            small.join("\n").contains("smaller than S3's smallest part"),
            "{small:?}"
        );
        // A folder has no part limit.
        load(&[("CsvProcessing__MaxFileSize", "60GiB")]).unwrap();
    }

    #[test]
    fn a_dotted_bucket_cannot_be_a_virtual_host_over_https() {
        let errors = load(&with_s3(&[
            ("S3__Bucket", "vfps.jobs"),
            ("S3__ForcePathStyle", "false"),
        ]))
        .unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| e.contains("S3__Bucket=\"vfps.jobs\"")),
            "{errors:?}"
        );
    }

    #[test]
    fn credentials_come_from_s3_settings_then_aws_variables_then_a_web_identity() {
        let given = s3_of(load(&with_s3(&[("S3__SessionToken", "tok")])).unwrap());
        assert_eq!(
            given.credentials,
            CredentialSource::Static(Credentials {
                access_key: "AKIAIOSFODNN7EXAMPLE".into(),
                secret_key: "hunter2".into(),
                session_token: Some("tok".into()),
            })
        );
        let aws_env = [
            ("S3__IsEnabled", "true"),
            ("S3__ServiceUrl", "https://s3.eu-central-1.amazonaws.com"),
            ("S3__Bucket", "vfps"),
            ("AWS_ACCESS_KEY_ID", "ASIAENV"),
            ("AWS_SECRET_ACCESS_KEY", "envsecret"),
            ("AWS_SESSION_TOKEN", "envtoken"),
        ];
        let from_env = s3_of(load(&aws_env).unwrap());
        assert_eq!(
            from_env.credentials,
            CredentialSource::Static(Credentials {
                access_key: "ASIAENV".into(),
                secret_key: "envsecret".into(),
                session_token: Some("envtoken".into()),
            })
        );
        let dir = vfps_testkit::scratch_dir("irsa");
        let token = dir.join("token");
        std::fs::write(&token, "jwt").unwrap();
        let token = token.to_str().unwrap().to_owned();
        let irsa = [
            ("S3__IsEnabled", "true"),
            ("S3__ServiceUrl", "https://s3.eu-central-1.amazonaws.com"),
            ("S3__Bucket", "vfps"),
            ("S3__Region", "eu-central-1"),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/vfps"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token.as_str()),
        ];
        let role = s3_of(load(&irsa).unwrap());
        assert_eq!(
            role.credentials,
            CredentialSource::WebIdentity(WebIdentity {
                role_arn: "arn:aws:iam::123456789012:role/vfps".into(),
                token_file: PathBuf::from(&token),
                session_name: "vfps".into(),
                sts_endpoint: "https://sts.eu-central-1.amazonaws.com".into(),
            })
        );
        let mut elsewhere = irsa.to_vec();
        elsewhere.push(("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:4566"));
        elsewhere.push(("AWS_ROLE_SESSION_NAME", "vfps-0"));
        let CredentialSource::WebIdentity(w) = s3_of(load(&elsewhere).unwrap()).credentials else {
            panic!("not a web identity")
        };
        assert_eq!(
            (w.sts_endpoint.as_str(), w.session_name.as_str()),
            ("http://127.0.0.1:4566", "vfps-0")
        );
        let missing = [
            ("S3__IsEnabled", "true"),
            ("S3__ServiceUrl", "https://s3.eu-central-1.amazonaws.com"),
            ("S3__Bucket", "vfps"),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/vfps"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/nonexistent/token"),
            ("S3__SessionToken", "orphan"),
        ];
        let all = load(&missing).unwrap_err().join("\n");
        assert!(
            all.contains("AWS_WEB_IDENTITY_TOKEN_FILE=\"/nonexistent/token\" cannot be read"),
            "{all}"
        );
        assert!(
            all.contains("S3__SessionToken needs S3__AccessKey"),
            "{all}"
        );
        assert!(!all.contains("orphan"), "{all}");
    }

    #[test]
    fn sizes_take_units() {
        assert_eq!(parse_bytes("10GiB"), Some(10 << 30));
        assert_eq!(parse_bytes("512 KB"), Some(512 << 10));
        assert_eq!(parse_bytes("77"), Some(77));
        assert_eq!(parse_bytes("1 parsec"), None);
    }
}
