use super::*;

/// 2026-12-05 08:00:00 UTC, the load's start in these tests.
const START: f64 = 1_796_457_600.0;

/// Lines as Patroni 3.0.4 writes them (`%(asctime)s %(levelname)s: %(message)s`,
/// the phrases from its `ha.py`; Patroni 4.x writes the same ones).
const PATRONI_B: &str = "\
2026-12-05 08:00:29,802 INFO: no action. I am (db-b), a secondary, and following a leader (db-a)
2026-12-05 08:00:30,811 INFO: Lock owner: db-a; I am db-b
2026-12-05 08:00:35,104 WARNING: Request failed to db-a: GET http://10.213.0.11:8008/patroni (HTTPConnectionPool(host='10.213.0.11', port=8008): Max retries exceeded with url: /patroni (Caused by ProtocolError('Connection aborted.', ConnectionRefusedError(111, 'Connection refused'))))
2026-12-05 08:00:35,110 INFO: Got response from db-c http://10.213.0.13:8008/patroni: {\"state\": \"running\", \"role\": \"replica\", \"timeline\": 3}
2026-12-05 08:00:35,214 INFO: promoted self to leader by acquiring session lock
2026-12-05 08:00:36,002 INFO: no action. I am (db-b), the leader with the lock
";

const PATRONI_C: &str = "\
2026-12-05 08:00:35,120 INFO: Got response from db-b http://10.213.0.12:8008/patroni: {\"state\": \"running\", \"role\": \"replica\"}
2026-12-05 08:00:35,125 INFO: following a different leader because i am not the healthiest node
";

/// PostgreSQL 15 with its default `log_line_prefix` (`%m [%p] `).
const POSTGRES_B: &str = "\
2026-12-05 07:59:01.000 UTC [41233] LOG:  database system is ready to accept read-only connections
2026-12-05 08:00:35.301 UTC [41235] LOG:  received promote request
2026-12-05 08:00:35.302 UTC [41236] FATAL:  terminating walreceiver process due to administrator command
2026-12-05 08:00:35.309 UTC [41235] LOG:  redo done at 0/5A1B2C8 system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-12-05 08:00:35.320 UTC [41235] LOG:  selected new timeline ID: 4
2026-12-05 08:00:35.612 UTC [41233] LOG:  database system is ready to accept connections
2026-12-05 08:00:36.100 UTC [41301] LOG:  standby \"db-c\" is now a synchronous standby with priority 1
2026-12-05 08:00:36.100 UTC [41301] STATEMENT:  START_REPLICATION 0/5000000 TIMELINE 3
";

fn all_lines() -> Vec<LogLine> {
    let mut v = events(PATRONI_B, "db-b", patroni_line);
    v.extend(events(PATRONI_C, "db-c", patroni_line));
    v.extend(events(POSTGRES_B, "db-b", postgres_line));
    v
}

/// Seconds to the millisecond: Unix times in f64 are that exact.
fn ms(t: Option<f64>) -> Option<i64> {
    t.map(|t| (t * 1000.0).round() as i64)
}

fn fault(at_seconds: f64, scenario: &str, text: &str) -> Fault {
    Fault {
        at_seconds,
        scenario: ScenarioName::new(scenario),
        text: text.into(),
    }
}

#[test]
fn patroni_and_postgres_lines_say_what_they_mean_on_the_wall_clock() {
    let lock = patroni_line(
        "2026-12-05 08:00:35,214 INFO: promoted self to leader by acquiring session lock",
        "db-b",
    )
    .unwrap();
    assert_eq!(lock.event, LogEvent::LockAcquired);
    assert!((lock.at_unix - (START + 35.214)).abs() < 1e-6, "{lock:?}");
    // The leader still holds the key.
    assert_eq!(
        patroni_line(
            "2026-12-05 08:00:30,811 INFO: Lock owner: db-a; I am db-b",
            "db-b"
        )
        .map(|l| l.event),
        Some(LogEvent::LeaderHeld)
    );
    assert_eq!(
        patroni_line(
            "2026-12-05 08:00:30,811 INFO: Lock owner: None; I am db-b",
            "db-b"
        )
        .map(|l| l.event),
        Some(LogEvent::LeaderKeyGone)
    );
    // A restarted leader whose key had not expired.
    assert_eq!(
        patroni_line(
            "2026-12-05 08:00:31,000 INFO: promoted self to leader because I had the session lock",
            "db-a"
        )
        .map(|l| l.event),
        Some(LogEvent::LockAcquired)
    );
    // A standby's start is not a primary's.
    assert_eq!(
        postgres_line("2026-12-05 07:59:01.000 UTC [41233] LOG:  database system is ready to accept read-only connections", "db-b"),
        None
    );
    let ready = postgres_line(
        "2026-12-05 08:00:35.612 UTC [41233] LOG:  database system is ready to accept connections",
        "db-b",
    )
    .unwrap();
    assert_eq!(ready.event, LogEvent::Ready);
    assert!((ready.at_unix - (START + 35.612)).abs() < 1e-6);
    // CloudNativePG's JSON instance log, as `kubectl logs --prefix` writes it.
    let cnpg = r#"[pod/vfps-db-2/postgres] {"level":"info","ts":"2026-12-05T08:00:35.3Z","logger":"postgres","msg":"record","record":{"log_time":"2026-12-05 08:00:35.301 UTC","error_severity":"LOG","message":"received promote request"}}"#;
    let l = postgres_line(cnpg, "cnpg").unwrap();
    assert_eq!(
        (l.member.as_str(), l.event),
        ("vfps-db-2", LogEvent::PromoteRequested)
    );
    assert!((l.at_unix - (START + 35.3)).abs() < 1e-6);
    assert_eq!(
        postgres_line("no timestamp: received promote request", "x"),
        None
    );
}

#[test]
fn a_primary_kill_breaks_down_from_the_kill_to_the_first_write() {
    let faults = [fault(
        30.0,
        "db-primary-kill",
        "killed primary db-a (timeline 3)",
    )];
    let acks = [START + 29.9, START + 36.4, START + 36.2];
    let f = breakdown(&faults, &all_lines(), &acks, START);
    assert_eq!(f.len(), 1, "{f:#?}");
    let f = &f[0];
    let steps: Vec<f64> = f.steps().iter().map(|(_, t)| t.unwrap()).collect();
    assert_eq!(steps.len(), 5);
    for (got, want) in steps.iter().zip([5.104, 5.214, 5.612, 6.1, 6.2]) {
        assert!((got - want).abs() < 1e-6, "{steps:?}");
    }
    assert_eq!(f.promoted.as_deref(), Some("db-b"));
    let line = f.line();
    assert!(
        line.starts_with("db-primary-kill at 30.0 s (killed primary db-a (timeline 3)): leader key expired +5.1 s, promotion started +5.2 s, promoted +5.6 s, synchronous standby attached +6.1 s, first acknowledged write +6.2 s; promoted db-b"),
        "{line}"
    );
}

fn line(at: f64, member: &str, event: LogEvent) -> LogLine {
    LogLine {
        at_unix: START + at,
        member: member.into(),
        event,
    }
}

#[test]
fn each_fault_has_its_first_promotion_and_a_fault_without_one_is_said() {
    use LogEvent::*;
    // A double failover: db-a killed, db-b promoted and killed, db-c
    // promoted 20 s later (it waited for a killed instance); db-c's race of
    // the first failover logs its verdict just after the second kill.
    let lines = vec![
        line(101.0, "db-c", LeaderHeld),
        line(105.0, "db-c", LeaderKeyGone),
        line(105.2, "db-b", LockAcquired),
        line(105.3, "db-b", PromoteRequested),
        line(105.5, "db-b", Ready),
        line(106.1, "db-c", LeaderKeyGone),
        line(106.2, "db-c", LeaderHeld),
        line(111.0, "db-c", LeaderKeyGone),
        line(127.0, "db-c", LockAcquired),
        line(127.1, "db-c", PromoteRequested),
        line(127.4, "db-c", NewTimeline),
        // The lock lost and taken again in one promotion: still one failover.
        line(128.5, "db-c", LockAcquired),
        // The cluster's first leader, long before any fault.
        line(-50.0, "db-a", LockAcquired),
        // An isolation: no promotion until the kill that ends it.
        line(212.0, "db-a", LeaderHeld),
        line(216.0, "db-a", LeaderKeyGone),
        line(216.5, "db-a", LockAcquired),
    ];
    let faults = [
        fault(100.0, "db-double-failover", "killed primary db-a"),
        fault(106.0, "db-double-failover", "killed db-b just promoted"),
        fault(150.0, "db-primary-pause", "paused db-c"),
        fault(200.0, "db-primary-isolation", "isolated db-b"),
        fault(
            210.0,
            "db-primary-isolation",
            "killed the isolated primary db-b",
        ),
    ];
    let f = breakdown(&faults, &lines, &[START + 105.9, START + 128.0], START);
    assert_eq!(f.len(), 4, "{f:#?}");
    assert_eq!(f[0].promoted.as_deref(), Some("db-b"));
    assert_eq!(ms(f[0].promoted_seconds), Some(105_500));
    assert_eq!(f[1].fault_seconds, 106.0);
    assert_eq!(
        ms(f[1].leader_key_expired_seconds),
        Some(111_000),
        "not the verdict of the race begun before the kill"
    );
    assert_eq!(ms(f[1].promotion_started_seconds), Some(127_000));
    assert_eq!(
        ms(f[1].promoted_seconds),
        Some(127_400),
        "no Ready line: the new timeline"
    );
    assert_eq!(ms(f[1].first_write_seconds), Some(128_000));
    // The pause: no promotion in the logs, and no write after it either.
    assert_eq!(f[2].scenario, ScenarioName::new("db-primary-pause"));
    assert_eq!(f[2].promotion_started_seconds, None);
    assert!(
        f[2].line().contains("promotion started not seen"),
        "{}",
        f[2].line()
    );
    // The isolation: one failover, from the kill.
    assert_eq!(f[3].fault_seconds, 210.0);
    assert_eq!(ms(f[3].leader_key_expired_seconds), Some(216_000));

    let d = distributions(&f);
    assert_eq!(d.len(), 3);
    assert_eq!(d[0].failovers, 2);
    let (name, figures) = &d[0].steps[1];
    assert_eq!(name, "promotion started");
    let (median, max) = figures.unwrap();
    assert!((median - (5.2 + 21.0) / 2.0).abs() < 1e-6 && (max - 21.0).abs() < 1e-6);
    assert_eq!(d[1].steps[1].1, None);
}

/// A primary kill of a CI run (`./scripts/chaos-local.sh --ci`, 2026-12-05),
/// its lines as Patroni 3.0.4 and PostgreSQL 15 wrote them: the survivor
/// saw the key gone 4.2 s after the kill, then its HA cycle stalled 7 s, its
/// new lock expired before it could promote ("lost leader before promote"),
/// and it took the lock again. One failover, promotion started at the first
/// lock line.
#[test]
fn a_ci_runs_primary_kill_reads_as_one_failover_with_its_stall() {
    let start = unix_seconds("2026-12-05 08:29:26.630").unwrap();
    let patroni_c = "\
2026-12-05 08:29:51,844 INFO: no action. I am (db-c), a secondary, and following a leader (db-a)
2026-12-05 08:29:54,754 INFO: no action. I am (db-c), a secondary, and following a leader (db-a)
2026-12-05 08:29:55,401 WARNING: Request failed to db-a: GET http://10.213.0.11:8008/patroni (HTTPConnectionPool(host='10.213.0.11', port=8008): Max retries exceeded with url: /patroni (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused')))
2026-12-05 08:29:55,551 WARNING: Watchdog not supported because leader TTL 5 is less than 2x loop_wait 1
2026-12-05 08:30:02,853 INFO: promoted self to leader by acquiring session lock
2026-12-05 08:30:02,874 WARNING: Loop time exceeded, rescheduling immediately.
2026-12-05 08:30:02,875 INFO: Lock owner: None; I am db-c
2026-12-05 08:30:02,968 INFO: lost leader before promote
2026-12-05 08:30:03,187 INFO: promoted self to leader by acquiring session lock
2026-12-05 08:30:03,187 INFO: Lock owner: db-c; I am db-c
2026-12-05 08:30:03,236 INFO: updated leader lock during promote
";
    let postgres_c = "\
2026-12-05 08:30:03.253 UTC [27233] LOG:  received promote request
2026-12-05 08:30:03.253 UTC [27233] LOG:  redo done at 0/4DFAF88 system usage: CPU: user: 0.06 s, system: 0.08 s, elapsed: 44.62 s
2026-12-05 08:30:03.264 UTC [27233] LOG:  selected new timeline ID: 2
2026-12-05 08:30:03.368 UTC [27233] LOG:  archive recovery complete
2026-12-05 08:30:03.428 UTC [27227] LOG:  database system is ready to accept connections
";
    let mut lines = events(patroni_c, "db-c", patroni_line);
    lines.extend(events(postgres_c, "db-c", postgres_line));
    let faults = [fault(
        24.584,
        "db-primary-kill",
        "killed primary db-a (timeline 1)",
    )];
    let acks = [start + 24.5, start + 37.9];
    let f = breakdown(&faults, &lines, &acks, start);
    assert_eq!(f.len(), 1, "{f:#?}");
    let steps: Vec<Option<i64>> = f[0].steps().iter().map(|(_, t)| ms(*t)).collect();
    assert_eq!(
        steps,
        vec![Some(4_187), Some(11_639), Some(12_214), None, Some(13_316)],
        "{}",
        f[0].line()
    );
}

/// A paused primary of a repeated run (`scripts/repeat-scenario.sh`,
/// 2026-12-06), its lines as Patroni 3.0.4 and PostgreSQL 15 wrote them:
/// db-a won the race and was promoted 6.6 s after the pause; db-b, which
/// lost, had begun another race before db-a took the lock and waited out
/// the paused member's 2 s again, so it followed only at +8.4 s. Every
/// commit waited for it: the standby attached and the first write are both
/// at +8.4 s, and the report says why.
#[test]
fn a_pauses_first_write_waits_for_the_other_standby_to_follow() {
    let start = 1_796_588_823.183;
    let patroni_a = r#"2026-12-06 20:27:58,896 INFO: no action. I am (db-a), a secondary, and following a leader (db-c)
2026-12-06 20:27:59,625 INFO: Got response from db-b http://10.213.0.12:8008/patroni: {"state": "running", "postmaster_start_time": "2026-12-06 20:26:53.072766+00:00", "role": "replica", "server_version": 150018, "xlog": {"received_location": 251756280, "replayed_location": 251756280, "replayed_timestamp": "2026-12-06 20:27:55.084574+00:00", "paused": false}, "sync_standby": true, "timeline": 2, "replication_state": "streaming", "cluster_unlocked": true, "dcs_last_seen": 1796588879, "database_system_identifier": "7716290183050405058", "patroni": {"version": "3.0.4", "scope": "vfps"}}
2026-12-06 20:28:01,543 WARNING: Request failed to db-c: GET http://10.213.0.13:8008/patroni (HTTPConnectionPool(host='10.213.0.13', port=8008): Max retries exceeded with url: /patroni (Caused by ReadTimeoutError("HTTPConnectionPool(host='10.213.0.13', port=8008): Read timed out. (read timeout=2)")))
2026-12-06 20:28:01,635 WARNING: Watchdog not supported because leader TTL 5 is less than 2x loop_wait 1
2026-12-06 20:28:01,731 INFO: promoted self to leader by acquiring session lock
2026-12-06 20:28:01,732 INFO: Lock owner: db-a; I am db-a
2026-12-06 20:28:03,827 INFO: Assigning synchronous standby status to ['db-b']
"#;
    let patroni_b = r#"2026-12-06 20:27:58,895 INFO: no action. I am (db-b), a secondary, and following a leader (db-c)
2026-12-06 20:28:01,472 WARNING: Request failed to db-c: GET http://10.213.0.13:8008/patroni (HTTPConnectionPool(host='10.213.0.13', port=8008): Max retries exceeded with url: /patroni (Caused by ReadTimeoutError("HTTPConnectionPool(host='10.213.0.13', port=8008): Read timed out. (read timeout=2)")))
2026-12-06 20:28:01,473 INFO: Wal position of db-a is ahead of my wal position
2026-12-06 20:28:01,533 INFO: following a different leader because i am not the healthiest node
2026-12-06 20:28:01,541 INFO: Got response from db-a http://10.213.0.11:8008/patroni: {"state": "running", "postmaster_start_time": "2026-12-06 20:27:39.296482+00:00", "role": "replica", "server_version": 150018, "xlog": {"received_location": 251758320, "replayed_location": 251758320, "replayed_timestamp": "2026-12-06 20:27:55.164578+00:00", "paused": false}, "sync_standby": true, "timeline": 2, "replication_state": "streaming", "cluster_unlocked": true, "dcs_last_seen": 1796588881, "database_system_identifier": "7716290183050405058", "patroni": {"version": "3.0.4", "scope": "vfps"}}
2026-12-06 20:28:03,538 WARNING: Request failed to db-c: GET http://10.213.0.13:8008/patroni (HTTPConnectionPool(host='10.213.0.13', port=8008): Max retries exceeded with url: /patroni (Caused by ReadTimeoutError("HTTPConnectionPool(host='10.213.0.13', port=8008): Read timed out. (read timeout=2)")))
2026-12-06 20:28:03,658 INFO: following a different leader because i am not the healthiest node
2026-12-06 20:28:03,660 INFO: Lock owner: db-a; I am db-b
2026-12-06 20:28:03,710 INFO: no action. I am (db-b), a secondary, and following a leader (db-a)
"#;
    let postgres_a = r#"2026-12-06 20:28:01.690 UTC [805] LOG:  parameter "synchronous_standby_names" changed to "*"
2026-12-06 20:28:01.740 UTC [810] LOG:  received promote request
2026-12-06 20:28:01.752 UTC [810] LOG:  selected new timeline ID: 3
2026-12-06 20:28:01.782 UTC [805] LOG:  database system is ready to accept connections
2026-12-06 20:28:03.560 UTC [1603] LOG:  standby "db-b" is now a synchronous standby with priority 1
2026-12-06 20:28:03.560 UTC [1603] STATEMENT:  START_REPLICATION 0/F000000 TIMELINE 2
"#;
    let mut lines = events(patroni_a, "db-a", patroni_line);
    lines.extend(events(patroni_b, "db-b", patroni_line));
    lines.extend(events(postgres_a, "db-a", postgres_line));
    let faults = [fault(
        52.024,
        "db-primary-pause",
        "paused db-c (timeline 2) for 15s",
    )];
    // The last write before the pause, and the first after it.
    let acks = [start + 51.906, start + 60.458];
    let f = breakdown(&faults, &lines, &acks, start);
    assert_eq!(f.len(), 1, "{f:#?}");
    let steps: Vec<Option<i64>> = f[0].steps().iter().map(|(_, t)| ms(*t)).collect();
    assert_eq!(
        steps,
        vec![
            Some(4_418),
            Some(6_524),
            Some(6_575),
            Some(8_353),
            Some(8_434)
        ],
        "{}",
        f[0].line()
    );
    assert!(
        f[0].line().contains(
            "promoted +6.6 s, synchronous standby attached +8.4 s, first acknowledged write +8.4 s"
        ),
        "{}",
        f[0].line()
    );
}

#[test]
fn without_the_ha_managers_log_a_promotion_starts_with_postgres_promote_request() {
    // CloudNativePG on kind: only its instances' PostgreSQL lines.
    let cnpg = "\
[pod/vfps-db-2/postgres] {\"level\":\"info\",\"ts\":\"2026-12-05T08:00:37.1Z\",\"msg\":\"record\",\"record\":{\"message\":\"received promote request\"}}
[pod/vfps-db-2/postgres] {\"level\":\"info\",\"ts\":\"2026-12-05T08:00:37.4Z\",\"msg\":\"record\",\"record\":{\"message\":\"selected new timeline ID: 3\"}}
[pod/vfps-db-2/postgres] {\"level\":\"info\",\"ts\":\"2026-12-05T08:00:37.6Z\",\"msg\":\"record\",\"record\":{\"message\":\"database system is ready to accept connections\"}}
";
    let mut lines = events(cnpg, "cnpg", postgres_line);
    // Quorum commit (`ANY 1`) says so in its own words.
    let quorum = "[pod/vfps-db-2/postgres] {\"level\":\"info\",\"ts\":\"2026-12-05T08:00:37.9Z\",\"msg\":\"record\",\"record\":{\"message\":\"standby \\\"vfps-db-3\\\" is now a candidate for quorum synchronous standby\"}}";
    lines.extend(postgres_line(quorum, "cnpg"));
    let faults = [fault(30.0, "cnpg-primary-kill", "killed primary vfps-db-1")];
    let f = breakdown(&faults, &lines, &[START + 38.0], START);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        f[0].leader_key_expired_seconds, None,
        "no leader key in these logs"
    );
    assert_eq!(ms(f[0].promotion_started_seconds), Some(37_100));
    assert_eq!(ms(f[0].promoted_seconds), Some(37_600));
    assert_eq!(ms(f[0].standby_attached_seconds), Some(37_900));
    assert_eq!(f[0].promoted.as_deref(), Some("vfps-db-2"));

    let text = lines_of(&f);
    assert_eq!(text[0], "failovers (seconds after the fault):");
    assert!(
        text[2].starts_with(
            "  cnpg-primary-kill over 1 failover (median / max s): leader key expired not seen, promotion started 7.1 / 7.1"
        ),
        "{text:?}"
    );
}

fn lines_of(f: &[Failover]) -> Vec<String> {
    super::lines(f)
}
