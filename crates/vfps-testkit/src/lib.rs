//! Throwaway PostgreSQL clusters for tests, made with `initdb` and `pg_ctl` on a free
//! port — no Docker.
//!
//! A [`PgCluster`] lives in a temporary directory. Dropping it stops the server and
//! removes the directory; a watchdog shell process does the same if the test
//! process dies without dropping it, so no test leaves a server behind.
//! [`shared`] hands every test of one process the same cluster, and
//! [`PgCluster::create_database`] gives each test its own database owned by a
//! non-superuser role, as production runs.
//!
//! When the tests run as root, the server runs as the `postgres` user (PostgreSQL
//! refuses root).
//!
//! [`fake_vfps`] is a trivial in-process gRPC vfps for the harness's own tests
//! and benchmark; [`fault_proxy`] sits in front of a real vfps and answers some
//! of its Creates `INTERNAL`. [`oidc`] is a real OIDC issuer (discovery, JWKS,
//! signed tokens good and bad). [`otlp`] is an OpenTelemetry collector that
//! keeps the spans exported to it. [`garage`] is a real S3-compatible object
//! store (one Garage node) with a bucket and a key; [`aws_s3`] a recording
//! S3 (and STS) double that answers as AWS does where Garage forgives.

pub mod aws_s3;
pub mod fake_vfps;
pub mod fault_proxy;
pub mod garage;
pub mod moto;
pub mod oidc;
pub mod otlp;
pub mod softhsm;

use std::{
    collections::BTreeSet,
    io,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicU32, Ordering},
        Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

/// Where the PostgreSQL server binaries are: `$VFPS_PG_BINDIR`, else the newest
/// `/usr/lib/postgresql/*/bin`.
pub fn pg_bindir() -> io::Result<PathBuf> {
    if let Ok(dir) = std::env::var("VFPS_PG_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")?
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("pg_ctl").exists())
        .collect();
    found.sort();
    found.pop().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "no PostgreSQL server binaries under /usr/lib/postgresql (apt-get install postgresql-15)",
        )
    })
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A command that runs as the server's owner, in a working directory it can
/// enter: the caller's may be one `postgres` cannot (a checkout under
/// `/root`), and PostgreSQL's tools then fail naming no path.
fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"])
            .arg(program)
            .current_dir("/");
        c
    } else {
        Command::new(program)
    }
}

fn run(mut cmd: Command, what: &str) -> io::Result<String> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A free TCP port on loopback: bound and released, and never one this process
/// handed out before (the kernel gives a released port out again, and tests
/// pick their ports concurrently and bind them later).
pub fn free_port() -> io::Result<u16> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(io::Error::other(
        "no loopback port left that was not handed out before",
    ))
}

/// A PostgreSQL server in a temporary directory.
pub struct PgCluster {
    dir: PathBuf,
    bindir: PathBuf,
    port: u16,
}

static DATABASE_COUNTER: AtomicU32 = AtomicU32::new(0);

impl PgCluster {
    /// Creates and starts a new cluster (trust authentication on loopback only),
    /// tuned for tests: no fsync.
    pub fn start() -> io::Result<Self> {
        Self::start_with("fsync = off\nfull_page_writes = off\n")
    }

    /// Like [`start`](Self::start) with extra `postgresql.conf` lines (later lines win).
    pub fn start_with(extra_conf: &str) -> io::Result<Self> {
        let mut cluster = Self::init(extra_conf)?;
        cluster.start_first()?;
        Ok(cluster)
    }

    /// The first start. The port was picked free, but something else (an
    /// outgoing connection's source port, another test's server) may have
    /// bound it since: then the cluster moves to a fresh port, a few times.
    /// Later starts keep the port (connection strings hold it).
    fn start_first(&mut self) -> io::Result<()> {
        for _ in 0..3 {
            match self.start_server() {
                Err(_) if TcpListener::bind(("127.0.0.1", self.port)).is_err() => {
                    self.port = free_port()?;
                    let conf_path = self.data_dir().join("postgresql.conf");
                    let mut conf = std::fs::read_to_string(&conf_path)?;
                    conf.push_str(&format!("port = {}\n", self.port));
                    std::fs::write(&conf_path, conf)?;
                }
                other => return other,
            }
        }
        self.start_server()
    }

    /// A cluster that accepts TCP connections only over TLS (`hostnossl … reject`),
    /// with a certificate for `localhost` (no IP address in it) signed by a fresh
    /// test CA. Returns the cluster and the CA's PEM file. Needs `openssl`.
    pub fn start_tls() -> io::Result<(Self, PathBuf)> {
        let mut cluster = Self::init("fsync = off\nfull_page_writes = off\n")?;
        let tls = cluster.dir.join("tls");
        let ca = test_ca(&tls, "ca")?;
        let (cert, key) = (tls.join("server.pem"), tls.join("server.key"));
        issue_server_certificate(&tls, "ca", &cert, &key)?;
        if is_root() {
            let mut c = Command::new("chown");
            c.args(["-R", "postgres:postgres"]).arg(&tls);
            run(c, "chown")?;
        }
        let conf_path = cluster.data_dir().join("postgresql.conf");
        let mut conf = std::fs::read_to_string(&conf_path)?;
        conf.push_str(&format!(
            "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
            cert.display(),
            key.display()
        ));
        std::fs::write(&conf_path, conf)?;
        std::fs::write(
            cluster.data_dir().join("pg_hba.conf"),
            "local all all trust\nhostnossl all all all reject\n\
             hostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
        )?;
        cluster.start_first()?;
        Ok((cluster, ca))
    }

    /// initdb and configuration, not started.
    fn init(extra_conf: &str) -> io::Result<Self> {
        let cluster = Self::empty()?;
        let mut initdb = as_owner(&cluster.bindir.join("initdb"));
        initdb.arg("-D").arg(cluster.data_dir()).args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        run(initdb, "initdb")?;
        let conf = format!(
            "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             max_connections = 300\nshared_buffers = 32MB\n{extra_conf}",
            cluster.port,
            cluster.dir.display()
        );
        let conf_path = cluster.data_dir().join("postgresql.conf");
        let mut existing = std::fs::read_to_string(&conf_path)?;
        existing.push_str(&conf);
        std::fs::write(&conf_path, existing)?;
        Ok(cluster)
    }

    /// A fresh directory owned by the server's user, a free port, a watchdog; no
    /// data directory yet.
    fn empty() -> io::Result<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let bindir = pg_bindir()?;
        let dir = std::env::temp_dir().join(format!(
            "vfps-testkit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        if is_root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.arg("postgres:postgres").arg(&dir);
                    c
                },
                "chown",
            )?;
        }
        let cluster = Self {
            dir,
            bindir,
            port: free_port()?,
        };
        cluster.spawn_watchdog()?;
        Ok(cluster)
    }

    /// Stops the server and removes the directory once this process is gone, even
    /// if it crashes.
    fn spawn_watchdog(&self) -> io::Result<()> {
        let script = format!(
            "while [ -d /proc/{pid} ]; do sleep 0.5; done; \
             {runuser} {pg_ctl} -D {data} stop -m immediate >/dev/null 2>&1; rm -rf {dir}",
            pid = std::process::id(),
            runuser = if is_root() {
                "runuser -u postgres --"
            } else {
                ""
            },
            pg_ctl = self.bindir.join("pg_ctl").display(),
            data = self.data_dir().display(),
            dir = self.dir.display(),
        );
        Command::new("sh")
            .args(["-c", &script])
            // Its `runuser` child inherits it (see `as_owner`).
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(())
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the Unix socket (for tools such as pgbench).
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The server binaries' directory.
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// Starts a stopped server and waits until it accepts connections.
    pub fn start_server(&self) -> io::Result<()> {
        let mut c = as_owner(&self.bindir.join("pg_ctl"));
        c.arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(["-w", "-t", "60", "start"]);
        run(c, "pg_ctl start")?;
        Ok(())
    }

    /// Stops the server (fast mode: sessions are terminated, as in a failover).
    pub fn stop_server(&self) -> io::Result<()> {
        let mut c = as_owner(&self.bindir.join("pg_ctl"));
        c.arg("-D")
            .arg(self.data_dir())
            .args(["-w", "-m", "fast", "stop"]);
        run(c, "pg_ctl stop")?;
        Ok(())
    }

    /// Runs SQL as the superuser through the Unix socket; returns unaligned output.
    pub fn psql(&self, database: &str, sql: &str) -> io::Result<String> {
        let mut c = as_owner(&self.bindir.join("psql"));
        c.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            "postgres",
        ])
        .arg("-h")
        .arg(&self.dir)
        .arg("-p")
        .arg(self.port.to_string())
        .arg("-d")
        .arg(database)
        .arg("-c")
        .arg(sql);
        run(c, "psql")
    }

    /// Creates a fresh database owned by a fresh non-superuser role and returns an
    /// Npgsql connection string for it.
    pub fn create_database(&self) -> io::Result<TestDatabase> {
        let n = DATABASE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("vfps_test_{}_{n}", std::process::id());
        self.psql(
            "postgres",
            &format!("CREATE ROLE {name} LOGIN NOSUPERUSER PASSWORD 'pw'"),
        )?;
        self.psql("postgres", &format!("CREATE DATABASE {name} OWNER {name}"))?;
        Ok(TestDatabase {
            name: name.clone(),
            connection_string: format!(
                "Host=127.0.0.1;Port={};Database={name};Username={name};Password=pw;Timeout=2;Command Timeout=10",
                self.port
            ),
        })
    }

    /// A primary with one synchronous standby streaming from it, as a highly
    /// available PostgreSQL runs: `synchronous_standby_names = 'standby'`, so a
    /// commit waits until the standby has flushed it. Returns `(primary, standby)`.
    /// Stopping the standby makes every commit on the primary wait.
    pub fn start_replicated_pair() -> io::Result<(Self, Self)> {
        let mut primary = Self::init(
            "fsync = off\nfull_page_writes = off\nwal_level = replica\nmax_wal_senders = 4\n\
             synchronous_standby_names = 'standby'\nsynchronous_commit = on\n\
             wal_sender_timeout = 5s\nwal_retrieve_retry_interval = 200ms\n",
        )?;
        let hba = primary.data_dir().join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba)?;
        rules.push_str("\nlocal replication all trust\nhost replication all 127.0.0.1/32 trust\n");
        std::fs::write(&hba, rules)?;
        primary.start_first()?;
        let mut standby = Self::empty()?;
        let mut backup = as_owner(&primary.bindir.join("pg_basebackup"));
        backup
            .arg("-D")
            .arg(standby.data_dir())
            .arg("-h")
            .arg(&primary.dir)
            .arg("-p")
            .arg(primary.port.to_string())
            .args(["-U", "postgres", "-X", "stream", "--no-sync"]);
        run(backup, "pg_basebackup")?;
        std::fs::write(standby.data_dir().join("standby.signal"), "")?;
        // The copied configuration is the primary's; later lines win.
        let conf_path = standby.data_dir().join("postgresql.conf");
        let mut conf = std::fs::read_to_string(&conf_path)?;
        conf.push_str(&format!(
            "\nport = {}\nunix_socket_directories = '{}'\nsynchronous_standby_names = ''\n\
             primary_conninfo = 'host={} port={} user=postgres application_name=standby'\n",
            standby.port,
            standby.dir.display(),
            primary.dir.display(),
            primary.port
        ));
        std::fs::write(&conf_path, conf)?;
        standby.start_first()?;
        let streaming = wait_for(Duration::from_secs(30), || {
            primary
                .psql(
                    "postgres",
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                )
                .is_ok_and(|n| n.trim() == "1")
        });
        if !streaming {
            return Err(io::Error::other(format!(
                "the standby never became synchronous; its log:\n{}",
                standby.server_log()
            )));
        }
        Ok((primary, standby))
    }

    /// The server's log so far (for assertions and failure messages).
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let mut c = as_owner(&self.bindir.join("pg_ctl"));
        c.arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "stop"]);
        let _ = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(args: &[&str]) -> io::Result<String> {
    let mut c = Command::new("openssl");
    c.args(args);
    run(c, "openssl")
}

/// A self-signed test CA `<name>.pem` (key `<name>.key`) in `dir`; returns the PEM.
pub fn test_ca(dir: &Path, name: &str) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let (pem, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "2",
        "-subj",
        &format!("/CN=vfps test {name}"),
        "-keyout",
        &key.display().to_string(),
        "-out",
        &pem.display().to_string(),
    ])?;
    Ok(pem)
}

/// A server certificate for DNS name `localhost` signed by the CA `<ca>` in `dir`;
/// the key is readable by its owner only (PostgreSQL insists).
pub fn issue_server_certificate(dir: &Path, ca: &str, cert: &Path, key: &Path) -> io::Result<()> {
    issue_certificate(dir, ca, cert, key, "serverAuth")
}

/// A client certificate (for mTLS) signed by the CA `<ca>` in `dir`.
pub fn issue_client_certificate(dir: &Path, ca: &str, cert: &Path, key: &Path) -> io::Result<()> {
    issue_certificate(dir, ca, cert, key, "clientAuth")
}

fn issue_certificate(dir: &Path, ca: &str, cert: &Path, key: &Path, usage: &str) -> io::Result<()> {
    let csr = dir.join(format!("{usage}.csr"));
    let ext = dir.join(format!("{usage}.ext"));
    std::fs::write(
        &ext,
        format!(
            "subjectAltName = DNS:localhost\nbasicConstraints = CA:FALSE\n\
             keyUsage = digitalSignature\nextendedKeyUsage = {usage}\n"
        ),
    )?;
    let path = |p: &Path| p.display().to_string();
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        &path(key),
        "-out",
        &path(&csr),
    ])?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        &path(&csr),
        "-CA",
        &path(&dir.join(format!("{ca}.pem"))),
        "-CAkey",
        &path(&dir.join(format!("{ca}.key"))),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &path(&ext),
        "-out",
        &path(cert),
    ])?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600))
}

/// A fresh directory for one test's files, under a per-process directory that a
/// watchdog removes once this process has exited (normally or not).
pub fn scratch_dir(name: &str) -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    static N: AtomicU32 = AtomicU32::new(0);
    let base = BASE.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("vfps-tests-{}", std::process::id()));
        let script = format!(
            "while [ -d /proc/{} ]; do sleep 0.5; done; rm -rf {}",
            std::process::id(),
            base.display()
        );
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        base
    });
    let dir = base.join(format!("{name}-{}", N.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("cannot create {}: {e}", dir.display());
    }
    dir
}

/// A database of a [`PgCluster`].
#[derive(Debug, Clone)]
pub struct TestDatabase {
    pub name: String,
    /// Npgsql keyword form, as `ConnectionStrings__PostgreSQL` takes it.
    pub connection_string: String,
}

/// One cluster for every test in this process (never dropped; the watchdog cleans up).
pub fn shared() -> &'static PgCluster {
    static SHARED: OnceLock<PgCluster> = OnceLock::new();
    SHARED.get_or_init(|| match PgCluster::start() {
        Ok(c) => c,
        Err(e) => panic!("cannot start a test PostgreSQL cluster: {e}"),
    })
}

/// Polls `condition` until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    condition()
}

#[cfg(test)]
mod tests {
    /// Tests in one process pick their ports concurrently and bind them later:
    /// a port handed out twice makes the second binder fail to start.
    #[test]
    fn free_port_never_hands_out_the_same_port_twice() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3000 {
            let port = super::free_port().unwrap();
            assert!(seen.insert(port), "port {port} handed out twice");
        }
    }

    /// A port bound by someone else between its pick and the first start
    /// does not fail the cluster: it moves to a fresh port.
    #[test]
    fn a_cluster_whose_port_was_taken_before_its_first_start_moves_to_a_free_one() {
        let mut cluster = super::PgCluster::init("fsync = off\n").unwrap();
        let picked = cluster.port();
        let _taken = std::net::TcpListener::bind(("127.0.0.1", picked)).unwrap();
        cluster.start_first().unwrap();
        assert_ne!(cluster.port(), picked);
        assert_eq!(cluster.psql("postgres", "SELECT 1").unwrap().trim(), "1");
    }
}
