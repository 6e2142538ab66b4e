//! `Tracing__*`, by upstream's names: OpenTelemetry traces exported over OTLP/gRPC.

use std::{fmt, time::Duration};

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

use super::env::{parse_bool, setting, Env};

/// Where the OTLP exporter sends spans when no endpoint is configured (the
/// OpenTelemetry default for OTLP/gRPC, as upstream's exporter uses it).
pub const DEFAULT_OTLP_ENDPOINT: &str = "http://localhost:4317";

/// Whether and how calls are traced. Off by default, as upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Tracing {
    /// `Tracing__IsEnabled`: off installs no tracing layer at all.
    pub enabled: bool,
    /// `Tracing__ServiceName` (`vfps`): the `service.name` of every span.
    pub service_name: String,
    /// `Tracing__RootSampler` (`AlwaysOnSampler`): decides for calls that arrive
    /// without a trace context; a caller's sampling decision is always followed.
    pub root_sampler: RootSampler,
    /// `Tracing__SamplingProbability` (0.1): the share of root traces kept by
    /// `TraceIdRatioBasedSampler`.
    pub sampling_probability: f64,
    /// `Tracing__Otlp__Endpoint`, else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, else [`DEFAULT_OTLP_ENDPOINT`]: the OTLP/gRPC
    /// collector (`http://` or `https://`).
    pub otlp_endpoint: String,
    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`
    /// (`key=value,…`, values percent-decoded): sent with every export.
    pub otlp_headers: Headers,
    /// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT`
    /// (milliseconds, 10,000): how long one export may take, retries included.
    pub otlp_timeout: Duration,
}

/// Headers for the collector (often a credential): their names are shown,
/// their values never.
#[derive(Clone, Default, PartialEq)]
pub struct Headers(Vec<(AsciiMetadataKey, AsciiMetadataValue)>);

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| k.as_str()))
            .finish()
    }
}

impl Headers {
    pub fn iter(&self) -> impl Iterator<Item = &(AsciiMetadataKey, AsciiMetadataValue)> {
        self.0.iter()
    }

    /// `key=value` pairs separated by commas, blanks around them ignored,
    /// values percent-decoded (the OpenTelemetry exporters' format). The
    /// error names the entry by position, never its value.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let mut headers = Vec::new();
        for (i, entry) in raw
            .split(',')
            .enumerate()
            .filter(|(_, e)| !e.trim().is_empty())
        {
            let n = i + 1;
            let (key, value) = entry
                .split_once('=')
                .ok_or_else(|| format!("entry {n} is not key=value"))?;
            let key = AsciiMetadataKey::from_bytes(key.trim().to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("entry {n}: {:?} is not a header name", key.trim()))?;
            let value = percent_decode(value.trim())
                .and_then(|v| AsciiMetadataValue::try_from(v).ok())
                .ok_or_else(|| {
                    format!("entry {n} ({key}): the value is not a valid header value")
                })?;
            headers.push((key, value));
        }
        Ok(Self(headers))
    }
}

/// `%XX` escapes decoded; `None` for a broken escape or bytes that are no UTF-8.
fn percent_decode(raw: &str) -> Option<String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut bytes = raw.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

/// Upstream's root samplers, each under a parent-based sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootSampler {
    AlwaysOn,
    AlwaysOff,
    TraceIdRatioBased,
}

impl RootSampler {
    /// Upstream's names (`AlwaysOnSampler`, …) and the same without `Sampler`,
    /// in any case.
    fn parse(raw: &str) -> Option<Self> {
        let name = raw.trim().to_ascii_lowercase();
        match name.strip_suffix("sampler").unwrap_or(&name) {
            "alwayson" => Some(Self::AlwaysOn),
            "alwaysoff" => Some(Self::AlwaysOff),
            "traceidratiobased" => Some(Self::TraceIdRatioBased),
            _ => None,
        }
    }
}

impl Default for Tracing {
    fn default() -> Self {
        Self {
            enabled: false,
            service_name: "vfps".into(),
            root_sampler: RootSampler::AlwaysOn,
            sampling_probability: 0.1,
            otlp_endpoint: DEFAULT_OTLP_ENDPOINT.into(),
            otlp_headers: Headers::default(),
            otlp_timeout: Duration::from_secs(10),
        }
    }
}

impl Tracing {
    /// Checked whether tracing is on or not, so a mistake shows before it is
    /// switched on. Upstream's `Tracing__Exporter` and `Tracing__Jaeger__*` are
    /// accepted; spans always go over OTLP (Jaeger takes OTLP too).
    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>, notes: &mut Vec<String>) -> Self {
        let d = Self::default();
        let text = |key: &str| env.text(key);
        let enabled = setting(
            env,
            errors,
            "Tracing__IsEnabled",
            d.enabled,
            parse_bool,
            "true or false",
        );
        let root_sampler = setting(
            env,
            errors,
            "Tracing__RootSampler",
            d.root_sampler,
            RootSampler::parse,
            "AlwaysOnSampler, AlwaysOffSampler or TraceIdRatioBasedSampler",
        );
        let sampling_probability = setting(
            env,
            errors,
            "Tracing__SamplingProbability",
            d.sampling_probability,
            |v| {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
            },
            "a probability from 0 to 1, such as 0.1",
        );
        let (endpoint_key, otlp_endpoint) = [
            "Tracing__Otlp__Endpoint",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
        .into_iter()
        .find_map(|key| text(key).map(|v| (key, v)))
        .unwrap_or(("", d.otlp_endpoint));
        if !endpoint_key.is_empty() && !valid_endpoint(&otlp_endpoint) {
            errors.push(format!(
                "{endpoint_key}={otlp_endpoint:?} is not valid: expected an http:// or https:// URL such as {DEFAULT_OTLP_ENDPOINT}"
            ));
        }
        // The standard variables: the signal's own, else the general one.
        let standard = |name: &str| {
            [
                format!("OTEL_EXPORTER_OTLP_TRACES_{name}"),
                format!("OTEL_EXPORTER_OTLP_{name}"),
            ]
            .into_iter()
            .find_map(|key| text(&key).map(|v| (key, v)))
        };
        let otlp_headers = match standard("HEADERS") {
            None => d.otlp_headers,
            Some((key, raw)) => Headers::parse(&raw).unwrap_or_else(|e| {
                errors.push(format!("{key} is not valid: {e}"));
                Headers::default()
            }),
        };
        let otlp_timeout = match standard("TIMEOUT") {
            None => d.otlp_timeout,
            Some((key, raw)) => match raw.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    errors.push(format!(
                        "{key}={raw:?} is not valid: expected a positive number of milliseconds, such as 10000"
                    ));
                    d.otlp_timeout
                }
            },
        };
        if let Some(exporter) = text("Tracing__Exporter") {
            if enabled && !exporter.eq_ignore_ascii_case("otlp") {
                notes.push(format!(
                    "Tracing__Exporter={exporter:?} is ignored: spans are exported over OTLP/gRPC to {otlp_endpoint}"
                ));
            }
        }
        Self {
            enabled,
            service_name: text("Tracing__ServiceName").unwrap_or(d.service_name),
            root_sampler,
            sampling_probability,
            otlp_endpoint,
            otlp_headers,
            otlp_timeout,
        }
    }
}

/// `http(s)://host[:port][/path]`, with a host.
fn valid_endpoint(raw: &str) -> bool {
    let Some(rest) = raw
        .strip_prefix("http://")
        .or_else(|| raw.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    !authority.is_empty()
        && !authority.starts_with(':')
        && !authority.contains(char::is_whitespace)
        && raw.parse::<axum::http::Uri>().is_ok()
}
