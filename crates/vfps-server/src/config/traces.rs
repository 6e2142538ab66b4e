//! `Tracing__*`, by upstream's names: OpenTelemetry traces exported over OTLP/gRPC.

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
