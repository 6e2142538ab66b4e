//! A throwaway durable PostgreSQL for measuring a vfps by hand (the capacity
//! sweep in docs/performance.md): the test kit's cluster with fsync and
//! synchronous_commit on, as the throughput benchmark runs it, and one fresh
//! database owned by a non-superuser role.
//!
//! `cargo run -p vfps-testkit --example postgres` prints
//! `ConnectionStrings__PostgreSQL=…` on stdout and keeps the server until its
//! standard input closes (or a line arrives); then, or if this process is
//! killed, the server is stopped and its directory removed.

fn main() -> std::io::Result<()> {
    let cluster = vfps_testkit::PgCluster::start_with(
        "fsync = on\nsynchronous_commit = on\nshared_buffers = 128MB\n",
    )?;
    let db = cluster.create_database()?;
    println!("ConnectionStrings__PostgreSQL={}", db.connection_string);
    eprintln!(
        "PostgreSQL on 127.0.0.1:{} (database {}); close stdin to stop it",
        cluster.port(),
        db.name
    );
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    Ok(())
}
