//! A connection pool that never hands out a connection it has reason to distrust.
//!
//! Connections are opened with the multi-host list and `target_session_attrs`
//! (read-write by default when several hosts are listed), so a new connection
//! lands on the primary. Every store operation checks a connection out as a
//! [`Lease`]; only a lease that ran to completion returns its connection to the
//! pool. One that failed, or whose future was dropped at an await (deadline,
//! hang-up, shutdown), detaches and closes its connection, which may be inside a
//! transaction, hold locks or have a statement in flight. That is a property of
//! the type, not a convention each operation has to remember.
//!
//! A new connection tries the listed hosts one after another, each attempt
//! (TCP, TLS, start-up, authentication, the read-write check) bounded by
//! `Timeout` as Npgsql bounds it: a paused host accepts the TCP connection
//! in its kernel and never answers the start-up, which would otherwise hold
//! every new connection. What each host did is remembered for
//! `Host Recheck Seconds` ([`HostStates`]): the primary found last is tried
//! first, a host that did not answer last. An attempt waiting on one host
//! leaves the wait as soon as another attempt finds a different host newly
//! usable: connections in flight when a standby is promoted go to it at
//! once instead of each waiting out the paused former primary. While
//! attempts wait on a host that did not answer last time, one of them at a
//! time tries the other hosts again every quarter second, so the promoted
//! standby is found even when every attempt is waiting.
//!
//! A connection older than the last time the database stopped answering the
//! monitor ([`Distrust`]) is not handed out again: a paused or replaced
//! primary keeps idle connections open (its kernel still answers), and each
//! would hold a call until its deadline.
//!
//! [`Steps`] runs each statement of a lease: client-side timed (never
//! `statement_timeout`, which would cancel commits waiting for the synchronous
//! standby), classified, reported to [`Reachability`], and refused when the
//! server sent a WARNING meanwhile — "canceling wait for synchronous replication"
//! means the commit exists on the primary alone.

use std::{
    future::{poll_fn, Future},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use deadpool::managed::{self, Metrics, Object, RecycleError, RecycleResult};
use tokio_postgres::{error::Severity, AsyncMessage, Client, Notification, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;
use vfps_core::Error;

pub use super::hosts::{Distrust, HostStates, Seen};
use super::{
    npgsql::{PgOptions, TargetSession},
    statements::Prepared,
};
use crate::health::Reachability;

/// A pooled connection and what its background task observed.
pub struct PgConnection {
    pub client: Client,
    /// Set by the background task when the connection ended.
    closed: Arc<AtomicBool>,
    /// Server notices of severity WARNING seen so far on this connection.
    warnings: Arc<AtomicU64>,
    /// Statements prepared on this connection, indexed by [`Prepared`]: after
    /// first use a statement costs no parse round trip, no planning and no
    /// lookup by its SQL text.
    statements: [Option<Statement>; Prepared::COUNT],
}

impl PgConnection {
    /// The prepared statement `which`, preparing it on first use.
    pub async fn prepared(&mut self, which: Prepared) -> Result<Statement, tokio_postgres::Error> {
        let slot = which as usize;
        if let Some(s) = &self.statements[slot] {
            return Ok(s.clone());
        }
        let s = self.client.prepare(which.sql()).await?;
        self.statements[slot] = Some(s.clone());
        Ok(s)
    }
}

/// A connection checked out for one store operation; see the module docs.
pub struct Lease {
    object: Option<Object<Manager>>,
    /// When its connection was opened, and the pool's [`Distrust`]: a
    /// statement in flight on a connection the monitor has come to distrust
    /// ends at once instead of at its timeout.
    created: std::time::Instant,
    distrust: Arc<Distrust>,
    /// Set by [`Lease::finish`]: the operation ran to completion and left the
    /// session idle outside any transaction.
    finished: bool,
}

impl Lease {
    pub fn conn(&self) -> &PgConnection {
        self.object
            .as_deref()
            .expect("a lease holds its connection until dropped")
    }

    pub fn conn_mut(&mut self) -> &mut PgConnection {
        self.object
            .as_deref_mut()
            .expect("a lease holds its connection until dropped")
    }

    pub fn client(&self) -> &Client {
        &self.conn().client
    }

    /// The operation ran to completion: the connection may serve the next one.
    pub fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            if !self.finished || object.closed.load(Ordering::SeqCst) {
                // Out of the pool for good; dropping the client closes the socket,
                // and the server rolls back whatever the session had open.
                drop(Object::take(object));
            }
        }
    }
}

/// Runs the statements of one lease; see the module docs.
#[derive(Clone)]
pub struct Steps {
    warnings: Arc<AtomicU64>,
    timeout: Duration,
    created: std::time::Instant,
    distrust: Arc<Distrust>,
    reachability: Arc<Reachability>,
    /// Counts the statements refused for a WARNING.
    refused: Arc<AtomicU64>,
}

impl Steps {
    pub fn new(
        lease: &Lease,
        timeout: Duration,
        reachability: Arc<Reachability>,
        refused: Arc<AtomicU64>,
    ) -> Self {
        Self {
            warnings: lease.conn().warnings.clone(),
            timeout,
            created: lease.created,
            distrust: lease.distrust.clone(),
            reachability,
            refused,
        }
    }

    pub async fn run<T>(
        &self,
        step: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, Error> {
        let warnings = self.warnings.load(Ordering::SeqCst);
        // A paused primary (or one a failover replaced) holds a statement
        // until its timeout; once the monitor finds the primary silent, it
        // ends here, its outcome unknown as at a timeout (the connection is
        // then closed with the lease).
        let result = tokio::select! {
            r = tokio::time::timeout(self.timeout, step) => r,
            () = self.distrust.covers(self.created) => {
                let err = Error::unavailable(
                    "the database stopped answering while the statement ran; its outcome is unknown",
                )
                .because(vfps_core::TransientCause::Timeout);
                self.reachability.failed(&err.message);
                return Err(err);
            }
        };
        let err = match result {
            Ok(Ok(v)) if self.warnings.load(Ordering::SeqCst) == warnings => {
                self.reachability.reached();
                return Ok(v);
            }
            Ok(Ok(_)) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Error::unavailable(
                    "the database warned while committing; the write is not confirmed as replicated",
                )
            }
            Ok(Err(e)) => super::classify(&e),
            Err(_) => Error::unavailable(format!(
                "the database did not answer within {:?}",
                self.timeout
            ))
            .because(vfps_core::TransientCause::Timeout),
        };
        if err.is_transient() {
            self.reachability.failed(&err.message);
        } else {
            self.reachability.reached();
        }
        Err(err)
    }
}

/// Why a new connection could not be made.
#[derive(Debug)]
pub enum ConnectError {
    Postgres(tokio_postgres::Error),
    /// A host did not finish the connection within `Timeout`.
    TimedOut {
        host: String,
        after: Duration,
    },
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Postgres(e) => e.fmt(f),
            ConnectError::TimedOut { host, after } => {
                write!(
                    f,
                    "{host} did not complete a connection within {after:?} (Timeout)"
                )
            }
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Postgres(e) => e.source(),
            ConnectError::TimedOut { .. } => None,
        }
    }
}

impl From<tokio_postgres::Error> for ConnectError {
    fn from(e: tokio_postgres::Error) -> Self {
        ConnectError::Postgres(e)
    }
}

/// Whether a connection attempt was turned away for not being writable
/// (tokio-postgres's read-write check).
fn refused_writes(e: &tokio_postgres::Error) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
}

/// How often an attempt waiting on a host that did not answer last time
/// tries the other hosts again ([`Manager::scout`]).
const SCOUT_INTERVAL: Duration = Duration::from_millis(250);

/// A connection as `tokio_postgres` opens it: the client and the connection
/// to drive.
type Opened = (
    Client,
    tokio_postgres::Connection<
        tokio_postgres::Socket,
        <MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
    >,
);

/// The right to scout ([`Manager::scout`]), held by one attempt of a manager
/// at a time and given back when that attempt ends or is dropped.
struct ScoutClaim<'a>(&'a AtomicBool);

impl<'a> ScoutClaim<'a> {
    fn take(scouting: &'a AtomicBool) -> Option<Self> {
        scouting
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            .map(|_| Self(scouting))
    }
}

impl Drop for ScoutClaim<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

pub struct Manager {
    /// What the monitor found (the pool's manager; the monitor's own
    /// connection is not pooled).
    distrust: Arc<Distrust>,
    /// One configuration per listed host (`host:port`), in the listed order.
    hosts: Vec<(String, tokio_postgres::Config)>,
    states: HostStates,
    /// Whether an attempt is scouting ([`ScoutClaim`]).
    scouting: AtomicBool,
    /// Npgsql `Timeout`: one host's whole attempt.
    connect_timeout: Duration,
    tls: MakeRustlsConnect,
    /// The session settings every connection starts with.
    session: String,
}

impl Manager {
    /// Fails only on TLS settings that cannot work (an unreadable root file).
    pub fn new(o: &PgOptions) -> Result<Self, String> {
        let mut c = tokio_postgres::Config::new();
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
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            // Unacknowledged data for this long kills the socket: a blackholed peer
            // is noticed in seconds even mid-statement.
            .tcp_user_timeout(o.tcp_keepalive)
            .target_session_attrs(match o.target_session {
                TargetSession::Any => tokio_postgres::config::TargetSessionAttrs::Any,
                TargetSession::ReadWrite => tokio_postgres::config::TargetSessionAttrs::ReadWrite,
            })
            .ssl_mode(o.ssl.mode.postgres());
        // Never let the server cancel a statement (a cancelled wait for the
        // synchronous standby reports a single-copy commit as success); end
        // sessions that sit in a transaction (a backstop: leases never return
        // one); and wait for the synchronous standby on every commit whatever the
        // database's default says (keeping remote_apply, which waits longer).
        let session = format!(
            "SET statement_timeout = 0; SET idle_in_transaction_session_timeout = {}; \
             SELECT set_config('synchronous_commit', \
                CASE current_setting('synchronous_commit') \
                WHEN 'remote_apply' THEN 'remote_apply' ELSE 'on' END, false)",
            o.idle_in_transaction_timeout.as_millis().max(1)
        );
        let session = match &o.search_path {
            Some(path) => format!(
                "{session}; SELECT set_config('search_path', '{}', false)",
                path.replace('\'', "''")
            ),
            None => session,
        };
        let hosts = o
            .hosts
            .iter()
            .map(|(host, port)| {
                let mut one = c.clone();
                one.host(host).port(*port);
                (format!("{host}:{port}"), one)
            })
            .collect::<Vec<_>>();
        Ok(Self {
            distrust: Arc::default(),
            states: HostStates::new(hosts.len(), o.host_recheck),
            scouting: AtomicBool::new(false),
            hosts,
            connect_timeout: o.connect_timeout,
            tls: super::tls::connector(&o.ssl)?,
            session,
        })
    }

    /// A manager whose connections are distrusted by `distrust`.
    pub fn distrusting(mut self, distrust: Arc<Distrust>) -> Self {
        self.distrust = distrust;
        self
    }

    /// The first host, in [`HostStates::order`], that completes a
    /// connection of the kind asked for within `Timeout`; the last failure
    /// otherwise. While it waits on a host, another attempt may find a
    /// different host that just became usable (a standby promoted while this
    /// one waits out a paused former primary): then it leaves the wait and
    /// starts over in the new order, a bounded number of times. While it
    /// waits on a host that did not answer last time, one attempt of this
    /// manager at a time tries the others again ([`Manager::scout`]), so
    /// that such a host is found at all when every attempt is waiting.
    async fn open(&self) -> Result<Opened, ConnectError> {
        let mut last = None;
        let mut found = self.states.found.subscribe();
        // Each start-over needs a host newly found usable meanwhile; bounded
        // all the same, the last round waits every host out.
        let mut rounds = self.hosts.len() + 1;
        'round: loop {
            rounds -= 1;
            let since = std::time::Instant::now();
            for i in self.states.order(since) {
                let result = if rounds == 0 {
                    self.attempt(i).await
                } else {
                    let scouting = self.states.offline(i, since);
                    tokio::select! {
                        biased;
                        result = self.attempt(i) => result,
                        () = self.states.found_elsewhere(&mut found, i, since) => continue 'round,
                        opened = self.scout(i), if scouting => return Ok(opened),
                    }
                };
                match result {
                    Ok(opened) => return Ok(opened),
                    Err(e) => last = Some(e),
                }
            }
            return Err(last.unwrap_or(ConnectError::TimedOut {
                host: "no host listed".into(),
                after: Duration::ZERO,
            }));
        }
    }

    /// One host's whole attempt, bounded by `Timeout` (`0`: as long as it
    /// takes, Npgsql's meaning), and what it found recorded.
    async fn attempt(&self, host: usize) -> Result<Opened, ConnectError> {
        let (name, config) = &self.hosts[host];
        let attempt = if self.connect_timeout.is_zero() {
            Ok(config.connect(self.tls.clone()).await)
        } else {
            tokio::time::timeout(self.connect_timeout, config.connect(self.tls.clone())).await
        };
        let (seen, result) = match attempt {
            Ok(Ok(opened)) => (Seen::Usable, Ok(opened)),
            Ok(Err(e)) if refused_writes(&e) => (Seen::ReadOnly, Err(e.into())),
            Ok(Err(e)) => (Seen::Offline, Err(e.into())),
            Err(_) => (
                Seen::Offline,
                Err(ConnectError::TimedOut {
                    host: name.clone(),
                    after: self.connect_timeout,
                }),
            ),
        };
        self.states.record(host, seen, std::time::Instant::now());
        result
    }

    /// Tries every host but `waiting_on` and those that did not answer,
    /// every [`SCOUT_INTERVAL`], until one connects; only while it holds the
    /// manager's one [`ScoutClaim`] (waiting for it otherwise). When every
    /// attempt waits out a paused host, nobody else would try the standby
    /// promoted meanwhile; what it finds wakes the others
    /// ([`HostStates::found_elsewhere`]).
    async fn scout(&self, waiting_on: usize) -> Opened {
        let _claim = loop {
            if let Some(claim) = ScoutClaim::take(&self.scouting) {
                break claim;
            }
            tokio::time::sleep(SCOUT_INTERVAL).await;
        };
        loop {
            tokio::time::sleep(SCOUT_INTERVAL).await;
            let now = std::time::Instant::now();
            for host in self.states.order(now) {
                if host == waiting_on || self.states.offline(host, now) {
                    continue;
                }
                if let Ok(opened) = self.attempt(host).await {
                    return opened;
                }
            }
        }
    }

    /// Opens a connection outside the pool; `on_notification` sees every
    /// `NOTIFY` it receives, in order, before any later reply completes.
    pub async fn connect(
        &self,
        on_notification: impl Fn(&Notification) + Send + 'static,
    ) -> Result<PgConnection, ConnectError> {
        let (client, mut connection) = self.open().await?;
        let closed = Arc::new(AtomicBool::new(false));
        let warnings = Arc::new(AtomicU64::new(0));
        let (c, w) = (closed.clone(), warnings.clone());
        tokio::spawn(async move {
            while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notice(notice)) => {
                        if notice.parsed_severity() == Some(Severity::Warning)
                            || notice.severity() == "WARNING"
                        {
                            w.fetch_add(1, Ordering::SeqCst);
                            tracing::warn!(
                                code = notice.code().code(),
                                "database warning on a connection"
                            );
                        }
                    }
                    Ok(AsyncMessage::Notification(n)) => on_notification(&n),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "database connection ended");
                        break;
                    }
                }
            }
            c.store(true, Ordering::SeqCst);
        });
        client
            .batch_execute(&self.session)
            .await
            .map_err(ConnectError::from)?;
        Ok(PgConnection {
            client,
            closed,
            warnings,
            statements: Default::default(),
        })
    }
}

impl managed::Manager for Manager {
    type Type = PgConnection;
    type Error = ConnectError;

    async fn create(&self) -> Result<PgConnection, ConnectError> {
        self.connect(|_| {}).await
    }

    async fn recycle(
        &self,
        conn: &mut PgConnection,
        metrics: &Metrics,
    ) -> RecycleResult<ConnectError> {
        if conn.closed.load(Ordering::SeqCst) || conn.client.is_closed() {
            return Err(RecycleError::message("connection closed"));
        }
        if self.distrust.distrusts(metrics.created) {
            return Err(RecycleError::message(
                "opened before the database stopped answering the monitor",
            ));
        }
        Ok(())
    }
}

pub type Pool = managed::Pool<Manager>;

/// Checks a connection out of the pool as a lease.
pub(super) fn lease(object: Object<Manager>, distrust: Arc<Distrust>) -> Lease {
    Lease {
        created: Object::metrics(&object).created,
        distrust,
        object: Some(object),
        finished: false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Distrust, HostStates, ScoutClaim, Seen};

    #[test]
    fn hosts_are_tried_usable_first_then_unknown_read_only_and_offline_in_listed_order() {
        let states = HostStates::new(5, Duration::from_secs(10));
        let now = Instant::now();
        assert_eq!(
            states.order(now),
            vec![0, 1, 2, 3, 4],
            "all unknown: as listed"
        );
        states.record(0, Seen::Offline, now);
        states.record(1, Seen::ReadOnly, now);
        states.record(3, Seen::Usable, now);
        states.record(4, Seen::ReadOnly, now);
        assert_eq!(states.order(now), vec![3, 2, 1, 4, 0]);
        // What a host did is trusted for the recheck interval only.
        let later = now + Duration::from_secs(10);
        assert_eq!(states.order(later), vec![0, 1, 2, 3, 4]);
        states.record(3, Seen::Offline, later);
        assert_eq!(states.order(later), vec![0, 1, 2, 4, 3]);
    }

    #[tokio::test]
    async fn a_host_becoming_usable_wakes_attempts_waiting_on_another_host() {
        let states = HostStates::new(3, Duration::from_secs(10));
        let start = Instant::now();
        states.record(0, Seen::Usable, start);
        states.record(1, Seen::ReadOnly, start);
        let mut found = states.found.subscribe();
        let since = Instant::now();
        // Host 0 answering again is no news to an attempt waiting on host 0,
        // nor is host 0 staying usable to one waiting on host 2.
        states.record(0, Seen::Usable, since);
        let quiet = tokio::time::timeout(
            Duration::from_millis(50),
            states.found_elsewhere(&mut found, 2, since),
        )
        .await;
        assert!(quiet.is_err(), "woken by a host that was usable already");
        states.record(0, Seen::Offline, since);
        states.record(0, Seen::Usable, since);
        let own = tokio::time::timeout(
            Duration::from_millis(50),
            states.found_elsewhere(&mut found, 0, since),
        )
        .await;
        assert!(own.is_err(), "woken by the host it waits on");
        // The standby promoted: host 1 becomes usable while waiting on 0.
        let waiting = states.found_elsewhere(&mut found, 0, since);
        let promote = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            states.record(1, Seen::Usable, Instant::now());
        };
        let (woken, ()) = tokio::join!(
            tokio::time::timeout(Duration::from_secs(5), waiting),
            promote
        );
        assert!(woken.is_ok(), "not woken by the promoted host");
        // Only what became usable since the attempt started counts.
        assert!(!states.usable_elsewhere_since(0, Instant::now()));
    }

    #[test]
    fn one_scout_at_a_time_and_the_claim_is_given_back_when_dropped() {
        let scouting = std::sync::atomic::AtomicBool::new(false);
        let first = ScoutClaim::take(&scouting).expect("nobody scouts yet");
        assert!(ScoutClaim::take(&scouting).is_none(), "two scouts at once");
        drop(first);
        assert!(ScoutClaim::take(&scouting).is_some(), "the claim was kept");
    }

    /// An attempt dropped while it scouts (a call's deadline, a hang-up)
    /// gives the claim back: the next waiting attempt can scout.
    #[tokio::test]
    async fn an_attempt_dropped_while_scouting_gives_the_claim_back() {
        // The first host accepts and never answers (known silent); the second
        // refuses at once.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let refusing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ports = [&silent, &refusing].map(|l| l.local_addr().unwrap().port());
        drop(refusing);
        let listed = format!(
            "Host=127.0.0.1:{},127.0.0.1:{};Database=d;Username=u;Password=p;Timeout=5",
            ports[0], ports[1]
        );
        let options = crate::postgres::npgsql::parse(&listed, None, None)
            .unwrap()
            .options;
        let manager = super::Manager::new(&options).unwrap();
        manager.states.record(0, Seen::Offline, Instant::now());
        let scouting = || manager.scouting.load(std::sync::atomic::Ordering::SeqCst);
        let mut open = Box::pin(manager.open());
        tokio::select! {
            opened = &mut open => panic!("a silent host answered: {:?}", opened.err()),
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        assert!(
            scouting(),
            "no attempt scouted while waiting on the silent host"
        );
        drop(open);
        assert!(!scouting(), "the dropped attempt kept the claim");
    }

    #[test]
    fn connections_opened_until_the_distrust_are_distrusted_later_ones_not() {
        let d = Distrust::default();
        let before = Instant::now();
        assert!(!d.distrusts(before), "nothing distrusted yet");
        std::thread::sleep(Duration::from_millis(2));
        d.until_now();
        assert!(d.distrusts(before));
        std::thread::sleep(Duration::from_millis(2));
        let after = Instant::now();
        assert!(!d.distrusts(after));
        d.until_now();
        assert!(d.distrusts(after));
    }
}
