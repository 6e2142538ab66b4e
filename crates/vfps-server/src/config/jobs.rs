//! CSV jobs: upstream's `S3__*` and `CsvProcessing__*` settings, and where
//! job files live without S3.
//!
//! Upstream serves jobs only with `S3__IsEnabled`; here the embedded default
//! (SQLite) keeps job files in a folder beside the database, and PostgreSQL
//! without S3 uses a folder only when `VFPS_JOBS_DIR` names one (a volume every
//! replica shares: a replica runs any replica's job).

use std::{path::PathBuf, time::Duration};

use vfps_jobs::{
    inspect::Limits, runner::RunnerSettings, service::ServiceSettings, storage::s3::S3Config,
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

const S3_KEYS: [&str; 9] = [
    "isenabled",
    "serviceurl",
    "accesskey",
    "secretkey",
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

    fn s3(env: &Env, errors: &mut Vec<String>, presigned_url_expiry: Duration) -> JobStorage {
        let mut required = |key: &str| {
            env.text(key).unwrap_or_else(|| {
                errors.push(format!("{key} is required with S3__IsEnabled=true"));
                String::new()
            })
        };
        let service_url = required("S3__ServiceUrl");
        let access_key = required("S3__AccessKey");
        let secret_key = required("S3__SecretKey");
        let bucket = required("S3__Bucket");
        let http = service_url.starts_with("http://") || service_url.starts_with("https://");
        if !service_url.is_empty() && !http {
            errors.push(format!(
                "S3__ServiceUrl={service_url:?} is not valid: expected an http(s) URL"
            ));
        }
        let config = S3Config {
            service_url,
            access_key,
            secret_key,
            bucket,
            region: env.text("S3__Region").unwrap_or_else(|| "us-east-1".into()),
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
        JobStorage::S3(Box::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn sizes_take_units() {
        assert_eq!(parse_bytes("10GiB"), Some(10 << 30));
        assert_eq!(parse_bytes("512 KB"), Some(512 << 10));
        assert_eq!(parse_bytes("77"), Some(77));
        assert_eq!(parse_bytes("1 parsec"), None);
    }
}
