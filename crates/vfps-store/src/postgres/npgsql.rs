//! Parses PostgreSQL connection strings in Npgsql keyword form, the format the
//! deployed vfps is configured with (`Host=a,b:5433;Database=vfps;...`).

use std::time::Duration;

use super::tls::{SslMode, SslOptions};

/// Which servers a connection may land on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetSession {
    Any,
    /// A writable primary (`read-write` or `primary`).
    ReadWrite,
}

/// Everything vfps takes from a connection string. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct PgOptions {
    pub hosts: Vec<(String, u16)>,
    pub database: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Npgsql `Timeout` (seconds): how long one host may take to complete a
    /// connection (TCP, TLS, start-up, authentication, the read-write check)
    /// before the next is tried.
    pub connect_timeout: Duration,
    /// Npgsql `Host Recheck Seconds` (10): how long what a host did at its
    /// last connection attempt decides the order hosts are tried in.
    pub host_recheck: Duration,
    /// Client-side limit on one statement (Npgsql `Command Timeout`, seconds).
    /// Enforced by the client, never as `statement_timeout`: a server-side cancel
    /// of a commit waiting for its synchronous standby reports success.
    pub command_timeout: Duration,
    pub max_pool_size: usize,
    /// Npgsql `Minimum Pool Size` (0): idle connections beyond it are closed
    /// after `Connection Idle Lifetime`.
    pub min_pool_size: usize,
    /// Npgsql `Connection Idle Lifetime` (300 s): how long a connection may sit
    /// idle in the pool before it is closed (while the pool holds more than
    /// `Minimum Pool Size`).
    pub idle_lifetime: Duration,
    /// Npgsql `Connection Pruning Interval` (10 s): how often idle connections
    /// are looked at.
    pub pruning_interval: Duration,
    /// Npgsql `Target Session Attributes`; unset, `ReadWrite` when several hosts
    /// are listed (a standby listed first must not take the writes), else `Any`.
    pub target_session: TargetSession,
    /// `idle_in_transaction_session_timeout` of every session: a backstop that
    /// ends a session left inside a transaction (not a connection-string keyword;
    /// `VFPS_IDLE_IN_TRANSACTION_SESSION_TIMEOUT`).
    pub idle_in_transaction_timeout: Duration,
    pub application_name: String,
    /// TCP keepalive idle time and user timeout, so a dead or blackholed peer is
    /// noticed in seconds rather than minutes.
    pub tcp_keepalive: Duration,
    /// `SSL Mode`, `Root Certificate`, `Trust Server Certificate`.
    pub ssl: SslOptions,
    /// Npgsql `Search Path`: the session's `search_path`; migrations create the
    /// first schema of it if it is missing.
    pub search_path: Option<String>,
}

impl PgOptions {
    /// The first schema of `Search Path`, unquoted, if one is set.
    pub fn first_schema(&self) -> Option<String> {
        let first = self.search_path.as_deref()?.split(',').next()?.trim();
        let unquoted = first
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .map_or_else(|| first.to_owned(), |s| s.replace("\"\"", "\""));
        (!unquoted.is_empty()).then_some(unquoted)
    }
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOptions")
            .field("hosts", &self.hosts)
            .field("database", &self.database)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("host_recheck", &self.host_recheck)
            .field("command_timeout", &self.command_timeout)
            .field("max_pool_size", &self.max_pool_size)
            .field("target_session", &self.target_session)
            .field(
                "idle_in_transaction_timeout",
                &self.idle_in_transaction_timeout,
            )
            .field("ssl", &self.ssl)
            .field("search_path", &self.search_path)
            .finish_non_exhaustive()
    }
}

/// A connection-string problem, naming the keyword and never the password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ConnectionStrings__PostgreSQL: {0}")]
pub struct ParseError(pub String);

/// The result of parsing: options plus keywords accepted but not acted upon.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub options: PgOptions,
    pub ignored_keywords: Vec<String>,
}

fn normalise(key: &str) -> String {
    key.chars()
        .filter(|c| !c.is_whitespace() && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Seconds; fractions are accepted (a superset of Npgsql), so a blackholed host
/// can cost well under a second.
fn seconds(key: &str, value: &str) -> Result<Duration, ParseError> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n >= 0.0 && *n < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| ParseError(format!("{key} must be a number of seconds, got {value:?}")))
}

/// Splits `k=v;k=v` with optional single or double quotes around values.
fn pairs(raw: &str) -> Result<Vec<(String, String)>, ParseError> {
    let mut out = Vec::new();
    let mut rest = raw;
    loop {
        // Empty segments (`a=1;;b=2`, a leading `;`) are nothing, as in Npgsql.
        rest = rest.trim_start_matches(|c: char| c == ';' || c.is_whitespace());
        if rest.is_empty() {
            break;
        }
        let Some((key, after)) = rest.split_once('=') else {
            return Err(ParseError(format!(
                "expected keyword=value, found {:?}",
                rest.split(';').next().unwrap_or(rest).trim()
            )));
        };
        let after = after.trim_start();
        let (value, remaining) = match after.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let body = &after[1..];
                let end = body
                    .find(q)
                    .ok_or_else(|| ParseError(format!("unterminated quote in {}", key.trim())))?;
                let remaining = body[end + 1..].trim_start();
                let remaining = remaining.strip_prefix(';').unwrap_or(remaining);
                (body[..end].to_owned(), remaining)
            }
            _ => match after.split_once(';') {
                Some((v, r)) => (v.trim().to_owned(), r),
                None => (after.trim().to_owned(), ""),
            },
        };
        out.push((key.trim().to_owned(), value));
        rest = remaining;
    }
    Ok(out)
}

/// Keywords Npgsql knows that vfps accepts without acting on them (compared
/// without spaces or underscores, in lower case): a connection string written
/// for the upstream service keeps working, and each is noted at start-up.
const NPGSQL_IGNORED: &[&str] = &[
    "passfile",
    "enlist",
    "clientencoding",
    "encoding",
    "timezone",
    "checkcertificaterevocation",
    "sslnegotiation",
    "gssencryptionmode",
    "integratedsecurity",
    "kerberosservicename",
    "krbsrvname",
    "includerealm",
    "persistsecurityinfo",
    "logparameters",
    "includeerrordetail",
    "channelbinding",
    "requireauth",
    "pooling",
    "connectionlifetime",
    "loadbalancetimeout",
    "cancellationtimeout",
    "internalcommandtimeout",
    "loadbalancehosts",
    "eftemplatedatabase",
    "efadmindatabase",
    "tcpkeepalive",
    "tcpkeepaliveinterval",
    "readbuffersize",
    "writebuffersize",
    "socketreceivebuffersize",
    "socketsendbuffersize",
    "maxautoprepare",
    "autoprepareminusages",
    "noresetonclose",
    "options",
    "servercompatibilitymode",
    "arraynullabilitymode",
    "multiplexing",
    "writecoalescingbufferthresholdbytes",
    "loadtablecomposites",
    "usesslstream",
    "convertinfinitydatetime",
    "continuousprocessing",
    "backendtimeouts",
    "preloadreader",
    "useextendedtypes",
    "useperfcounters",
];

/// Parses a connection string; `PGUSER`/`PGPASSWORD` fill in a missing user or password.
pub fn parse(
    raw: &str,
    pguser: Option<&str>,
    pgpassword: Option<&str>,
) -> Result<Parsed, ParseError> {
    let mut host_list: Option<String> = None;
    let mut port: u16 = 5432;
    let mut target_session = None;
    let mut o = PgOptions {
        hosts: Vec::new(),
        database: None,
        username: None,
        password: None,
        connect_timeout: Duration::from_secs(15),
        host_recheck: Duration::from_secs(10),
        command_timeout: Duration::from_secs(30),
        max_pool_size: 100,
        min_pool_size: 0,
        idle_lifetime: Duration::from_secs(300),
        pruning_interval: Duration::from_secs(10),
        target_session: TargetSession::Any,
        idle_in_transaction_timeout: Duration::from_secs(10),
        application_name: "vfps".into(),
        tcp_keepalive: Duration::from_secs(5),
        ssl: SslOptions::default(),
        search_path: None,
    };
    let mut ignored = Vec::new();
    // Every problem, not only the first.
    let mut errors: Vec<String> = Vec::new();
    for (key, value) in pairs(raw)? {
        let applied = (|| -> Result<(), ParseError> {
            match normalise(&key).as_str() {
                "host" | "server" | "hostname" => host_list = Some(value),
                "port" => {
                    port = value
                        .trim()
                        .parse()
                        .map_err(|_| ParseError(format!("Port must be a TCP port number, got {value:?}")))?
                }
                "database" | "db" => o.database = Some(value),
                "username" | "userid" | "user" | "uid" | "username " => o.username = Some(value),
                "password" | "psw" | "pwd" => o.password = Some(value),
                "timeout" => o.connect_timeout = seconds("Timeout", &value)?,
                "commandtimeout" => o.command_timeout = seconds("Command Timeout", &value)?,
                "maximumpoolsize" | "maxpoolsize" => {
                    o.max_pool_size = match value.trim().parse::<usize>() {
                        Ok(n) if n > 0 => n,
                        _ => {
                            return Err(ParseError(format!(
                                "Maximum Pool Size must be a positive integer, got {value:?}"
                            )))
                        }
                    }
                }
                "minimumpoolsize" | "minpoolsize" => {
                    o.min_pool_size = value.trim().parse::<usize>().map_err(|_| {
                        ParseError(format!(
                            "Minimum Pool Size must be a non-negative integer, got {value:?}"
                        ))
                    })?
                }
                "connectionidlelifetime" => {
                    o.idle_lifetime = seconds("Connection Idle Lifetime", &value)?
                }
                "connectionpruninginterval" => {
                    o.pruning_interval = seconds("Connection Pruning Interval", &value)?
                }
                "targetsessionattributes" => {
                    target_session = Some(match value.trim().to_ascii_lowercase().as_str() {
                        "any" => TargetSession::Any,
                        "read-write" | "readwrite" | "primary" => TargetSession::ReadWrite,
                        other => {
                            return Err(ParseError(format!(
                                "Target Session Attributes {other:?} is not supported (use any, read-write or primary)"
                            )))
                        }
                    })
                }
                "sslmode" => {
                    o.ssl.mode = SslMode::parse(&value).ok_or_else(|| {
                        ParseError(format!(
                            "SSL Mode {value:?} is not one of Disable, Allow, Prefer, Require, VerifyCA, VerifyFull"
                        ))
                    })?
                }
                "rootcertificate" => o.ssl.root_certificate = Some(value.trim().into()),
                "trustservercertificate" => {
                    o.ssl.trust_server_certificate =
                        match value.trim().to_ascii_lowercase().as_str() {
                            "true" | "yes" | "1" => true,
                            "false" | "no" | "0" => false,
                            _ => {
                                return Err(ParseError(format!(
                                    "Trust Server Certificate must be true or false, got {value:?}"
                                )))
                            }
                        }
                }
                "sslcertificate" | "sslkey" | "sslpassword" | "clientcertificate"
                | "clientcertificatekey" => {
                    return Err(ParseError(format!(
                        "{key} (a client certificate) is not supported by this build; authenticate with a password"
                    )))
                }
                "applicationname" => o.application_name = value,
                "searchpath" => {
                    if value.chars().any(|c| c.is_control()) || value.trim().is_empty() {
                        return Err(ParseError(
                            "Search Path must be a non-empty list of schemas".into(),
                        ));
                    }
                    o.search_path = Some(value.trim().to_owned())
                }
                "keepalive" | "tcpkeepalivetime" => o.tcp_keepalive = seconds("Keepalive", &value)?,
                "hostrecheckseconds" => {
                    o.host_recheck = seconds("Host Recheck Seconds", &value)?
                }
                known if NPGSQL_IGNORED.contains(&known) => ignored.push(key.clone()),
                // Npgsql refuses what it does not know; a misspelt keyword
                // (SSL Mod=VerifyFull) must not silently weaken a connection.
                _ => {
                    return Err(ParseError(format!(
                        "{key:?} is not an Npgsql connection string keyword (misspelt?)"
                    )))
                }
            }
            Ok(())
        })();
        if let Err(e) = applied {
            errors.push(e.0);
        }
    }
    match host_list {
        None => errors.push("Host is required".into()),
        Some(host_list) => {
            for entry in host_list
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
            {
                match entry.rsplit_once(':') {
                    // A bare IPv6 address has several colons and no port.
                    Some((h, p)) if !h.contains(':') || h.ends_with(']') => match p.parse() {
                        Ok(p) => o.hosts.push((h.trim_matches(['[', ']']).to_owned(), p)),
                        Err(_) => errors.push(format!("Host entry {entry:?} has an invalid port")),
                    },
                    _ => o.hosts.push((entry.to_owned(), port)),
                }
            }
            if o.hosts.is_empty() && errors.is_empty() {
                errors.push("Host must name at least one host".into());
            }
        }
    }
    if o.min_pool_size > o.max_pool_size {
        errors.push(format!(
            "Minimum Pool Size ({}) must not exceed Maximum Pool Size ({})",
            o.min_pool_size, o.max_pool_size
        ));
    }
    if o.pruning_interval.is_zero() || o.idle_lifetime < o.pruning_interval {
        errors.push(format!(
            "Connection Pruning Interval ({} s) must be positive and not longer than \
             Connection Idle Lifetime ({} s)",
            o.pruning_interval.as_secs_f64(),
            o.idle_lifetime.as_secs_f64()
        ));
    }
    if !errors.is_empty() {
        return Err(ParseError(errors.join("; ")));
    }
    o.target_session = target_session.unwrap_or(if o.hosts.len() > 1 {
        TargetSession::ReadWrite
    } else {
        TargetSession::Any
    });
    if o.username.is_none() {
        o.username = pguser.map(str::to_owned);
    }
    if o.password.is_none() {
        o.password = pgpassword.map(str::to_owned);
    }
    Ok(Parsed {
        options: o,
        ignored_keywords: ignored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_upstream_chart_string() {
        let p = parse(
            "Host=vfps-db-rw:5432;Database=vfps;Username=app;Maximum Pool Size=25;Gss Encryption Mode=Disable;",
            None,
            Some("pw"),
        )
        .unwrap();
        assert_eq!(p.options.hosts, vec![("vfps-db-rw".to_owned(), 5432)]);
        assert_eq!(p.options.max_pool_size, 25);
        assert_eq!(p.options.password.as_deref(), Some("pw"));
        assert_eq!(p.ignored_keywords, vec!["Gss Encryption Mode".to_owned()]);
    }

    #[test]
    fn idle_connections_are_pruned_as_npgsql_says() {
        let p = parse("Host=h", None, None).unwrap().options;
        assert_eq!(
            (p.min_pool_size, p.idle_lifetime, p.pruning_interval),
            (0, Duration::from_secs(300), Duration::from_secs(10))
        );
        let p = parse(
            "Host=h;Minimum Pool Size=2;Connection Idle Lifetime=60;Connection Pruning Interval=5",
            None,
            None,
        )
        .unwrap();
        assert!(p.ignored_keywords.is_empty(), "{:?}", p.ignored_keywords);
        let o = p.options;
        assert_eq!(
            (o.min_pool_size, o.idle_lifetime, o.pruning_interval),
            (2, Duration::from_secs(60), Duration::from_secs(5))
        );
        for (bad, names) in [
            ("Minimum Pool Size=-1", "Minimum Pool Size"),
            (
                "Maximum Pool Size=2;Minimum Pool Size=3",
                "Minimum Pool Size (3)",
            ),
            (
                "Connection Idle Lifetime=5;Connection Pruning Interval=10",
                "Connection Pruning Interval (10 s)",
            ),
            (
                "Connection Pruning Interval=0",
                "Connection Pruning Interval (0 s)",
            ),
            ("Connection Idle Lifetime=soon", "Connection Idle Lifetime"),
        ] {
            let e = parse(&format!("Host=h;{bad}"), None, None).unwrap_err();
            assert!(e.0.contains(names), "{bad}: {}", e.0);
        }
    }

    #[test]
    fn multi_host_with_default_port_and_session_attrs() {
        let p = parse(
            "Host=a,b:5433,c;Port=6000;Target Session Attributes=read-write;Timeout=2;Command Timeout=9;Password='x;y'",
            Some("u"),
            Some("ignored"),
        )
        .unwrap()
        .options;
        assert_eq!(
            p.hosts,
            vec![("a".into(), 6000), ("b".into(), 5433), ("c".into(), 6000)]
        );
        assert_eq!(p.target_session, TargetSession::ReadWrite);
        assert_eq!(p.connect_timeout, Duration::from_secs(2));
        assert_eq!(p.command_timeout, Duration::from_secs(9));
        let frac = parse("Host=a;Timeout=0.25", None, None).unwrap().options;
        assert_eq!(frac.connect_timeout, Duration::from_millis(250));
        assert!(parse("Host=a;Timeout=-1", None, None).is_err());
        assert_eq!(p.host_recheck, Duration::from_secs(10), "Npgsql's default");
        let recheck = parse("Host=a,b;Host Recheck Seconds=3", None, None).unwrap();
        assert_eq!(recheck.options.host_recheck, Duration::from_secs(3));
        assert!(
            recheck.ignored_keywords.is_empty(),
            "{:?}",
            recheck.ignored_keywords
        );
        let e = parse("Host=a;Host Recheck Seconds=soon", None, None).unwrap_err();
        assert!(e.0.contains("Host Recheck Seconds"), "{e:?}");
        assert_eq!(p.password.as_deref(), Some("x;y"));
        assert_eq!(p.username.as_deref(), Some("u"));
    }

    #[test]
    fn several_hosts_mean_the_primary_unless_any_is_asked_for() {
        let session = |cs: &str| parse(cs, None, None).unwrap().options.target_session;
        assert_eq!(session("Host=a,b"), TargetSession::ReadWrite);
        assert_eq!(session("Host=a"), TargetSession::Any);
        assert_eq!(
            session("Host=a,b;Target Session Attributes=any"),
            TargetSession::Any
        );
        assert_eq!(
            session("Host=a;Target Session Attributes=primary"),
            TargetSession::ReadWrite
        );
    }

    #[test]
    fn empty_segments_are_skipped() {
        let p = parse(";Host=a;;Port=5433; ;Maximum Pool Size=3;", None, None).unwrap();
        assert_eq!(p.options.hosts, vec![("a".to_owned(), 5433)]);
        assert_eq!(p.options.max_pool_size, 3);
        assert!(p.ignored_keywords.is_empty(), "{:?}", p.ignored_keywords);
    }

    /// Npgsql refuses a keyword it does not know; so does vfps: a misspelt
    /// `SSL Mode` must not quietly leave the certificate unverified.
    #[test]
    fn unknown_keywords_are_refused_and_every_problem_is_named_at_once() {
        let e = parse(
            "Host=a;SSL Mod=VerifyFull;Pasword=hunter2;Timeout=abc;Command Timeout=xyz;Maximum Pool Size=q",
            None,
            None,
        )
        .unwrap_err();
        for named in [
            "\"SSL Mod\"",
            "\"Pasword\"",
            "Timeout must",
            "Command Timeout must",
            "Maximum Pool Size must",
        ] {
            assert!(e.0.contains(named), "{named} missing: {e}");
        }
        assert!(!e.0.contains("hunter2"), "{e}");
        // Npgsql's own keywords that vfps does not act on are still accepted.
        let p = parse(
            "Host=a;Pooling=true;Include Error Detail=true;Tcp Keepalive=true",
            None,
            None,
        )
        .unwrap();
        assert_eq!(p.ignored_keywords.len(), 3, "{:?}", p.ignored_keywords);
    }

    #[test]
    fn bad_values_name_the_keyword_and_hide_the_password() {
        let e = parse("Host=a;Port=abc;Password=hunter2", None, None).unwrap_err();
        assert!(e.0.contains("Port"), "{e}");
        let e = parse("Host=a;Maximum Pool Size=0", None, None).unwrap_err();
        assert!(e.0.contains("Maximum Pool Size"));
        let e = parse("Database=x", None, None).unwrap_err();
        assert!(e.0.contains("Host"));
        let opts = parse("Host=a;Password=hunter2", None, None)
            .unwrap()
            .options;
        assert!(!format!("{opts:?}").contains("hunter2"));
    }
}
