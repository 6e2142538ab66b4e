//! A connection pool that never hands out a connection it has reason to distrust.
//!
//! Connections are opened with the multi-host list and, when configured,
//! `target_session_attrs=read-write`, so a new connection always lands on the
//! primary. A connection is marked *broken* (and dropped instead of being returned
//! to the pool) on any transient error — in particular `read_only_sql_transaction`
//! from a primary that was demoted under it — and on a client-side timeout, after
//! which its protocol state is unknown. Each connection's background task counts
//! server warnings, so a commit that came back with "canceling wait for synchronous
//! replication" can be refused instead of acknowledged.

use std::{
    collections::HashMap,
    future::poll_fn,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
};

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use tokio_postgres::{AsyncMessage, Client, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::npgsql::{PgOptions, TargetSession};

/// A pooled connection and what its background task observed.
pub struct PgConnection {
    pub client: Client,
    /// Set when the connection must not be reused.
    broken: Arc<AtomicBool>,
    /// Server notices of severity WARNING seen so far on this connection.
    warnings: Arc<AtomicU64>,
    /// Statements prepared on this connection, by their SQL text: the hot
    /// statements skip a parse round trip and planning after first use.
    statements: HashMap<&'static str, Statement>,
}

impl PgConnection {
    pub fn mark_broken(&self) {
        self.broken.store(true, Ordering::Relaxed);
    }
    pub fn warnings(&self) -> u64 {
        self.warnings.load(Ordering::SeqCst)
    }

    /// The prepared statement for `sql`, preparing it on first use.
    pub async fn prepared(
        &mut self,
        sql: &'static str,
    ) -> Result<Statement, tokio_postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).await?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }
}

pub struct Manager {
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
}

impl Manager {
    /// Fails only on TLS settings that cannot work (an unreadable root file).
    pub fn new(o: &PgOptions) -> Result<Self, String> {
        let mut c = tokio_postgres::Config::new();
        for (host, port) in &o.hosts {
            c.host(host);
            c.port(*port);
        }
        if let Some(db) = &o.database {
            c.dbname(db);
        }
        if let Some(user) = &o.username {
            c.user(user);
        }
        if let Some(pw) = &o.password {
            c.password(pw);
        }
        c.application_name(&o.application_name)
            .connect_timeout(o.connect_timeout)
            .keepalives(true)
            .keepalives_idle(o.tcp_keepalive)
            .keepalives_interval(std::time::Duration::from_secs(1))
            .keepalives_retries(3)
            // Unacknowledged data for this long kills the socket: a blackholed peer
            // is noticed in seconds even mid-statement.
            .tcp_user_timeout(o.tcp_keepalive)
            .target_session_attrs(match o.target_session {
                TargetSession::Any => tokio_postgres::config::TargetSessionAttrs::Any,
                TargetSession::ReadWrite => tokio_postgres::config::TargetSessionAttrs::ReadWrite,
            })
            .ssl_mode(o.ssl.mode.postgres());
        Ok(Self {
            config: c,
            tls: super::tls::connector(&o.ssl)?,
        })
    }
}

impl managed::Manager for Manager {
    type Type = PgConnection;
    type Error = tokio_postgres::Error;

    async fn create(&self) -> Result<PgConnection, tokio_postgres::Error> {
        let (client, mut connection) = self.config.connect(self.tls.clone()).await?;
        let broken = Arc::new(AtomicBool::new(false));
        let warnings = Arc::new(AtomicU64::new(0));
        let (b, w) = (broken.clone(), warnings.clone());
        tokio::spawn(async move {
            while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notice(notice)) => {
                        if notice.severity() == "WARNING" {
                            w.fetch_add(1, Ordering::SeqCst);
                            tracing::warn!(
                                code = notice.code().code(),
                                "database warning on a pooled connection"
                            );
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "database connection ended");
                        break;
                    }
                }
            }
            b.store(true, Ordering::Relaxed);
        });
        // Never let the server cancel a statement: a cancelled wait for the
        // synchronous standby would report a single-copy commit as success.
        client
            .batch_execute("SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0")
            .await?;
        Ok(PgConnection {
            client,
            broken,
            warnings,
            statements: HashMap::new(),
        })
    }

    async fn recycle(
        &self,
        conn: &mut PgConnection,
        _: &Metrics,
    ) -> RecycleResult<tokio_postgres::Error> {
        if conn.broken.load(Ordering::Relaxed) || conn.client.is_closed() {
            return Err(RecycleError::message("connection marked broken"));
        }
        Ok(())
    }
}

pub type Pool = managed::Pool<Manager>;
