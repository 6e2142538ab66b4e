//! The address and the three ports the servers bind, from vfps's own names or
//! upstream's Kestrel ones.

use std::net::IpAddr;

use super::{
    env::{setting, Env},
    Flags,
};

/// `VFPS_LISTEN_ADDRESS` and the ports, each overridable by its flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen {
    /// The one address all three servers bind, so a pod exposes them together.
    pub address: IpAddr,
    /// `VFPS_HTTP_PORT`: REST and FHIR, separate from gRPC as upstream serves them.
    pub http_port: u16,
    /// `VFPS_GRPC_PORT`: the `vfps.api.v1` services, health and reflection.
    pub grpc_port: u16,
    /// `VFPS_METRICS_PORT`: Prometheus, kept off the API ports so scraping needs
    /// no access to the API.
    pub metrics_port: u16,
}

impl Listen {
    /// Each port from its flag, else its variable; a flag hides a bad variable.
    pub(super) fn from_env(env: &Env, flags: &Flags, errors: &mut Vec<String>) -> Self {
        let port = |errors: &mut Vec<String>, key: &str, flag: Option<u16>, default: u16| {
            flag.unwrap_or_else(|| {
                setting(
                    env,
                    errors,
                    key,
                    default,
                    |s| s.trim().parse().ok(),
                    "a TCP port (0-65535)",
                )
            })
        };
        let upstream = UpstreamListen::from_env(env, errors);
        let http_port = port(
            errors,
            "VFPS_HTTP_PORT",
            flags.http_port,
            upstream.http_port.unwrap_or(8080),
        );
        let grpc_port = port(
            errors,
            "VFPS_GRPC_PORT",
            flags.grpc_port,
            upstream.grpc_port.unwrap_or(8081),
        );
        let metrics_port = port(
            errors,
            "VFPS_METRICS_PORT",
            flags.metrics_port,
            upstream.metrics_port.unwrap_or(8082),
        );
        let address = match &flags.listen_address {
            Some(raw) => raw.parse().unwrap_or_else(|_| {
                errors.push(format!("--listen-address={raw:?} is not an IP address"));
                IpAddr::from([0, 0, 0, 0])
            }),
            None => setting(
                env,
                errors,
                "VFPS_LISTEN_ADDRESS",
                IpAddr::from([0, 0, 0, 0]),
                |s| s.trim().parse().ok(),
                "an IP address",
            ),
        };
        // Port 0 picks a free port each time, so only fixed ports can collide.
        let fixed: Vec<u16> = [http_port, grpc_port, metrics_port]
            .into_iter()
            .filter(|p| *p != 0)
            .collect();
        if fixed.len() != fixed.iter().collect::<std::collections::HashSet<_>>().len() {
            errors.push(format!(
                "VFPS_HTTP_PORT, VFPS_GRPC_PORT and VFPS_METRICS_PORT must differ (got {http_port}, {grpc_port}, {metrics_port})"
            ));
        }
        Self {
            address,
            http_port,
            grpc_port,
            metrics_port,
        }
    }
}

/// The ports as upstream's settings give them (ASP.NET Core's Kestrel
/// endpoints and `MetricsPort`), under the `VFPS_*` ones and the flags.
#[derive(Debug, Default)]
struct UpstreamListen {
    http_port: Option<u16>,
    grpc_port: Option<u16>,
    metrics_port: Option<u16>,
}

impl UpstreamListen {
    pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Self {
        let endpoint = |errors: &mut Vec<String>, key: &str| -> Option<u16> {
            let raw = env.get(key)?;
            match kestrel_port(raw) {
                Ok(port) => Some(port),
                Err(why) => {
                    errors.push(format!("{key}={raw:?} is not valid: {why}"));
                    None
                }
            }
        };
        let http_port = endpoint(errors, "Kestrel__Endpoints__Http__Url");
        let grpc_port = endpoint(errors, "Kestrel__Endpoints__HttpGrpc__Url");
        for key in env.keys_with_prefix("Kestrel__Endpoints__") {
            let rest = key["Kestrel__Endpoints__".len()..].to_ascii_lowercase();
            let known = ["http__", "httpgrpc__"]
                .iter()
                .any(|endpoint| rest.starts_with(endpoint));
            if !known {
                errors.push(format!(
                    "{key}: unknown endpoint (vfps serves Kestrel__Endpoints__Http for REST \
                     and FHIR, Kestrel__Endpoints__HttpGrpc for gRPC)"
                ));
            }
        }
        let metrics_port = env.get("MetricsPort").map(|raw| {
            raw.trim().parse().unwrap_or_else(|_| {
                errors.push(format!(
                    "MetricsPort={raw:?} is not valid: expected a TCP port (0-65535)"
                ));
                8082
            })
        });
        Self {
            http_port,
            grpc_port,
            metrics_port,
        }
    }
}

/// The port of a Kestrel endpoint URL (`http://0.0.0.0:8080`, `http://+:8080`,
/// `http://*:8080`, `http://[::]:8080`). Only the port is taken: vfps listens
/// on one address for all its ports (`VFPS_LISTEN_ADDRESS`), so a URL naming a
/// host is refused rather than silently widened or narrowed.
pub(super) fn kestrel_port(raw: &str) -> Result<u16, String> {
    let raw = raw.trim();
    let Some(rest) = raw.strip_prefix("http://") else {
        return Err(if raw.starts_with("https://") {
            "https endpoints are configured with VFPS_TLS_* (docs/security.md)".to_owned()
        } else {
            "expected http://<host>:<port>, such as http://0.0.0.0:8080".to_owned()
        });
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| "the URL names no port".to_owned())?;
    if !matches!(host, "0.0.0.0" | "+" | "*" | "[::]") {
        return Err(format!(
            "host {host:?} given: vfps listens on one address for every port; \
             use 0.0.0.0, + or * here and set VFPS_LISTEN_ADDRESS"
        ));
    }
    port.parse()
        .map_err(|_| format!("port {port:?} is not a TCP port (0-65535)"))
}
