//! What a restore may use, decided from the bucket's listing alone (pure):
//! which base backup, and whether the WAL archive after it is whole. Every
//! refusal is a [`Refusal`] that names the bucket, the cluster and the missing
//! piece, so an operator sees why before anything is copied.

use std::collections::BTreeSet;

use serde::Deserialize;

/// The restore's target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreTo {
    /// Everything the archive holds.
    Latest,
    /// The last transaction committed at or before this instant (seconds
    /// since the Unix epoch, UTC).
    Time(i64),
    /// UNSAFE, for the restore drill's self-test: the newest base backup
    /// alone, none of the WAL archived after it (`recovery_target =
    /// 'immediate'`). Everything written after the backup is lost.
    BackupOnly,
}

/// As `--to` takes it (and `vfps restore hold --to` records it).
impl std::fmt::Display for RestoreTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Latest => f.write_str("latest"),
            Self::BackupOnly => f.write_str("backup-only"),
            Self::Time(t) => f.write_str(&format_utc(*t)),
        }
    }
}

impl std::str::FromStr for RestoreTo {
    type Err = String;

    /// `latest`, or a UTC instant `YYYY-MM-DDTHH:MM:SSZ`.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "latest" {
            return Ok(Self::Latest);
        }
        if s == "backup-only" {
            return Ok(Self::BackupOnly);
        }
        parse_utc(s).map(Self::Time).ok_or_else(|| {
            format!(
                "restore target {s:?} is neither `latest` nor a UTC time like 2026-12-05T09:30:00Z"
            )
        })
    }
}

/// One base backup as `barman-cloud-backup-list --format json` lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct Backup {
    pub backup_id: String,
    pub status: String,
    /// The first WAL segment the backup needs.
    pub begin_wal: String,
    /// The last WAL segment the backup needs to be consistent.
    pub end_wal: String,
    pub timeline: u32,
    /// ctime format in UTC (`Sat Dec  5 08:29:34 2026`): the listing runs
    /// with `TZ=UTC`.
    pub end_time: String,
    pub systemid: String,
    pub xlog_segment_size: u64,
}

/// What the bucket holds.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Every cluster (barman "server name") with objects in the bucket.
    pub clusters: Vec<String>,
    /// The base backups of the cluster being restored.
    pub backups: Vec<Backup>,
    /// The file names under the cluster's `wals/` (segments, `.history`,
    /// `.backup`, `.partial`, possibly compressed).
    pub wals: Vec<String>,
    /// The cluster a restore made this one from (`<cluster>/vfps-chain.json`),
    /// whose history stays reachable through it.
    pub parent: Option<String>,
}

/// A restore that can go ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The cluster whose backup and archive it uses: the one asked for, or
    /// an earlier one of its chain when the target is in that history.
    pub cluster: String,
    /// The clusters looked at, the one asked for first, `cluster` last.
    pub chain: Vec<String>,
    pub backup_id: String,
    /// The last WAL segment the archive holds without a gap after the
    /// backup: how far a `latest` restore gets.
    pub last_wal: String,
}

/// What the plan knows of the archive beyond its listing, and of now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reach {
    /// The newest commit the archive holds (seconds since the epoch, UTC):
    /// a time target must come before it, or recovery ends before reaching
    /// it. `None`: not known (no commit found in the newest segments).
    pub last_commit: Option<i64>,
    /// Now, for a target in the future.
    pub now: i64,
}

/// Why a restore is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("bucket {bucket:?} is empty: nothing was ever backed up there (wrong bucket, or archiving never ran)")]
    EmptyBucket { bucket: String },
    #[error("bucket {bucket:?} holds backups of cluster(s) {found:?}, not of {cluster:?}: another cluster's bucket, or the wrong cluster name")]
    OtherCluster {
        bucket: String,
        cluster: String,
        found: Vec<String>,
    },
    #[error("cluster {cluster:?} has no completed base backup in bucket {bucket:?}")]
    NoBackup { bucket: String, cluster: String },
    #[error("cluster {cluster:?} has no completed base backup that ended at or before {target}; the first ended at {first}")]
    TargetBeforeFirstBackup {
        cluster: String,
        target: String,
        first: String,
    },
    #[error("WAL segment {segment} of cluster {cluster:?} is missing from the archive{after}: replay would stop there and silently drop every later transaction")]
    MissingWal {
        cluster: String,
        segment: String,
        after: String,
    },
    #[error("backup {backup_id} has {what}, which this restore cannot read")]
    Unreadable { backup_id: String, what: String },
    #[error("the target {target} is in the future (it is {now} now)")]
    Future { target: String, now: String },
    #[error("the archive of cluster {cluster:?} holds no commit after {target} (its last archived commit is at {last}; later ones wait in WAL not archived yet, at most archive_timeout): recovery would end before reaching the target; choose a time before {last}, or `latest`")]
    AfterLastCommit {
        cluster: String,
        target: String,
        last: String,
    },
    #[error("the archive of cluster {cluster:?} holds no commit at all to recover to {target} by; choose `latest`")]
    NoCommit { cluster: String, target: String },
    #[error("{what}")]
    Bucket { what: String },
}

/// Picks the base backup for `to` and checks that every WAL segment from its
/// start to the last archived one is there (across timelines: a failover
/// continues the same positions on the next timeline).
pub fn plan(
    bucket: &str,
    cluster: &str,
    catalog: &Catalog,
    to: RestoreTo,
    reach: Reach,
) -> Result<Plan, Refusal> {
    if let RestoreTo::Time(t) = to {
        if t > reach.now {
            return Err(Refusal::Future {
                target: format_utc(t),
                now: format_utc(reach.now),
            });
        }
    }
    if catalog.clusters.is_empty() {
        return Err(Refusal::EmptyBucket {
            bucket: bucket.to_owned(),
        });
    }
    if !catalog.clusters.iter().any(|c| c == cluster) {
        return Err(Refusal::OtherCluster {
            bucket: bucket.to_owned(),
            cluster: cluster.to_owned(),
            found: catalog.clusters.clone(),
        });
    }
    let mut done: Vec<(i64, &Backup)> = Vec::new();
    for b in catalog.backups.iter().filter(|b| b.status == "DONE") {
        let end = parse_ctime(&b.end_time).ok_or_else(|| Refusal::Unreadable {
            backup_id: b.backup_id.clone(),
            what: format!("an end time {:?}", b.end_time),
        })?;
        done.push((end, b));
    }
    done.sort_by_key(|(end, _)| *end);
    let Some(first) = done.first() else {
        return Err(Refusal::NoBackup {
            bucket: bucket.to_owned(),
            cluster: cluster.to_owned(),
        });
    };
    let chosen = match to {
        RestoreTo::Latest | RestoreTo::BackupOnly => done.last(),
        RestoreTo::Time(t) => done.iter().rev().find(|(end, _)| *end <= t),
    };
    let Some((_, backup)) = chosen else {
        return Err(Refusal::TargetBeforeFirstBackup {
            cluster: cluster.to_owned(),
            target: format_utc(match to {
                RestoreTo::Time(t) => t,
                RestoreTo::Latest | RestoreTo::BackupOnly => 0,
            }),
            first: format_utc(first.0),
        });
    };
    if backup.xlog_segment_size != 16 * 1024 * 1024 {
        return Err(Refusal::Unreadable {
            backup_id: backup.backup_id.clone(),
            what: format!(
                "a WAL segment size of {} bytes (only 16 MiB is supported)",
                backup.xlog_segment_size
            ),
        });
    }
    let unreadable = |what: &str, name: &str| Refusal::Unreadable {
        backup_id: backup.backup_id.clone(),
        what: format!("{what} {name:?}"),
    };
    let begin = Segment::parse(&backup.begin_wal)
        .ok_or_else(|| unreadable("a first WAL segment", &backup.begin_wal))?;
    let end = Segment::parse(&backup.end_wal)
        .ok_or_else(|| unreadable("a last WAL segment", &backup.end_wal))?;
    // Positions archived on the backup's timeline or a later one.
    let archived: BTreeSet<u64> = catalog
        .wals
        .iter()
        .filter_map(|name| Segment::parse(name))
        .filter(|s| s.timeline >= backup.timeline)
        .map(|s| s.position)
        .filter(|p| *p >= begin.position)
        .collect();
    let last = archived
        .iter()
        .next_back()
        .copied()
        .unwrap_or(begin.position);
    let needed_to = match to {
        RestoreTo::BackupOnly => end.position,
        _ => last.max(end.position),
    };
    for position in begin.position..=needed_to {
        if !archived.contains(&position) {
            let after = if position > end.position {
                format!(
                    ", yet later segments up to {} are archived",
                    Segment::name(backup.timeline, last)
                )
            } else {
                format!(
                    " (base backup {} needs it to be consistent)",
                    backup.backup_id
                )
            };
            return Err(Refusal::MissingWal {
                cluster: cluster.to_owned(),
                segment: Segment::name(backup.timeline, position),
                after,
            });
        }
    }
    // Recovery to a time stops at the first commit after it: without one in
    // the archive, PostgreSQL ends recovery with "recovery ended before
    // configured recovery target was reached" — after everything was
    // destroyed.
    if let RestoreTo::Time(t) = to {
        match reach.last_commit {
            Some(last) if t >= last => {
                return Err(Refusal::AfterLastCommit {
                    cluster: cluster.to_owned(),
                    target: format_utc(t),
                    last: format_utc(last),
                })
            }
            Some(_) => {}
            None => {
                return Err(Refusal::NoCommit {
                    cluster: cluster.to_owned(),
                    target: format_utc(t),
                })
            }
        }
    }
    Ok(Plan {
        cluster: cluster.to_owned(),
        chain: vec![cluster.to_owned()],
        backup_id: backup.backup_id.clone(),
        last_wal: Segment::name(backup.timeline, needed_to),
    })
}

/// The newest WAL segments of the archive, newest first (position, then
/// timeline): where its last commit is looked for.
pub fn newest_segments(catalog: &Catalog, n: usize) -> Vec<String> {
    let mut segments: Vec<(u64, u32, &String)> = catalog
        .wals
        .iter()
        .filter_map(|name| Segment::parse(name).map(|s| (s.position, s.timeline, name)))
        .collect();
    segments.sort_by_key(|s| std::cmp::Reverse((s.0, s.1)));
    segments
        .into_iter()
        .take(n)
        .map(|(p, t, _)| Segment::name(t, p))
        .collect()
}

/// The newest commit time in `pg_waldump`'s output (`desc: COMMIT
/// 2026-12-07 11:30:45.123456 UTC`, run with `TZ=UTC`), whole seconds
/// rounded down.
pub fn last_commit_in(waldump: &str) -> Option<i64> {
    waldump
        .lines()
        .filter_map(|l| {
            let rest = l.split("desc: COMMIT ").nth(1)?;
            let (date, rest) = rest.split_once(' ')?;
            let time = rest.split([' ', '.', ';']).next()?;
            parse_utc(&format!("{date}T{time}Z"))
        })
        .max()
}

/// A WAL segment file name: timeline and position (16 MiB segments: 256 per
/// 4 GiB "log").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    timeline: u32,
    position: u64,
}

impl Segment {
    /// `TTTTTTTTLLLLLLLLSSSSSSSS`, optionally compressed (`.gz`, `.bz2`, …);
    /// not `.history`, `.backup` or `.partial` files, which replay does not
    /// read as segments.
    fn parse(name: &str) -> Option<Segment> {
        let base = name.rsplit('/').next()?;
        let stem = base.split('.').next()?;
        let rest = &base[stem.len()..];
        if stem.len() != 24
            || !(rest.is_empty()
                || [".gz", ".bz2", ".xz", ".snappy", ".lz4", ".zst"].contains(&rest))
        {
            return None;
        }
        let timeline = u32::from_str_radix(&stem[..8], 16).ok()?;
        let log = u64::from_str_radix(&stem[8..16], 16).ok()?;
        let seg = u64::from_str_radix(&stem[16..], 16).ok()?;
        (seg < 256).then_some(Segment {
            timeline,
            position: log * 256 + seg,
        })
    }

    fn name(timeline: u32, position: u64) -> String {
        format!("{timeline:08X}{:08X}{:08X}", position / 256, position % 256)
    }
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ` (or `+00:00`).
pub fn parse_utc(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z').or_else(|| s.strip_suffix("+00:00"))?;
    let (date, time) = s.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let t: Vec<i64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let ([y, m, day], [h, min, sec]) = (d.as_slice(), t.as_slice()) else {
        return None;
    };
    ((1..=12).contains(m) && (1..=31).contains(day) && *h < 24 && *min < 60 && *sec < 61)
        .then(|| days_from_civil(*y, *m, *day) * 86_400 + h * 3600 + min * 60 + sec)
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_utc(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// ctime's `Sat Dec  5 08:29:34 2026` (UTC).
fn parse_ctime(s: &str) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let parts: Vec<&str> = s.split_whitespace().collect();
    let [_, month, day, time, year] = parts.as_slice() else {
        return None;
    };
    let m = MONTHS.iter().position(|x| x == month)? as i64 + 1;
    parse_utc(&format!(
        "{year}-{m:02}-{:02}T{time}Z",
        day.parse::<i64>().ok()?
    ))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(id: &str, begin: &str, end: &str, end_time: &str) -> Backup {
        Backup {
            backup_id: id.into(),
            status: "DONE".into(),
            begin_wal: begin.into(),
            end_wal: end.into(),
            timeline: 1,
            end_time: end_time.into(),
            systemid: "7715734213521169284".into(),
            xlog_segment_size: 16 * 1024 * 1024,
        }
    }

    fn catalog(wals: &[&str]) -> Catalog {
        Catalog {
            clusters: vec!["vfps".into()],
            backups: vec![
                backup(
                    "B1",
                    "000000010000000000000003",
                    "000000010000000000000003",
                    "Sat Dec  5 08:29:34 2026",
                ),
                backup(
                    "B2",
                    "000000010000000000000006",
                    "000000010000000000000007",
                    "Sat Dec  5 09:00:00 2026",
                ),
            ],
            wals: wals.iter().map(|w| (*w).to_owned()).collect(),
            parent: None,
        }
    }

    /// A reach with commits archived up to a day after the backups.
    fn reach() -> Reach {
        Reach {
            last_commit: parse_utc("2026-12-06T09:00:00Z"),
            now: parse_utc("2026-12-07T09:00:00Z").unwrap(),
        }
    }

    fn plan(
        bucket: &str,
        cluster: &str,
        catalog: &Catalog,
        to: RestoreTo,
    ) -> Result<Plan, Refusal> {
        super::plan(bucket, cluster, catalog, to, reach())
    }

    const WHOLE: &[&str] = &[
        "000000010000000000000003",
        "000000010000000000000003.00000028.backup",
        "000000010000000000000004.gz",
        "000000010000000000000005",
        "000000010000000000000006",
        "000000010000000000000007",
        "00000002.history",
        "000000020000000000000008",
    ];

    #[test]
    fn latest_takes_the_newest_backup_and_the_whole_archive_across_timelines() {
        let p = plan("b", "vfps", &catalog(WHOLE), RestoreTo::Latest).unwrap();
        assert_eq!(p.backup_id, "B2");
        assert_eq!(p.last_wal, "000000010000000000000008");
    }

    #[test]
    fn a_time_takes_the_newest_backup_that_ended_before_it() {
        let t = parse_utc("2026-12-05T08:45:00Z").unwrap();
        let p = plan("b", "vfps", &catalog(WHOLE), RestoreTo::Time(t)).unwrap();
        assert_eq!(p.backup_id, "B1");
        let early = parse_utc("2026-12-05T08:00:00Z").unwrap();
        assert!(matches!(
            plan("b", "vfps", &catalog(WHOLE), RestoreTo::Time(early)),
            Err(Refusal::TargetBeforeFirstBackup { .. })
        ));
    }

    #[test]
    fn an_empty_bucket_is_refused() {
        let e = plan("b", "vfps", &Catalog::default(), RestoreTo::Latest).unwrap_err();
        assert_eq!(e, Refusal::EmptyBucket { bucket: "b".into() });
    }

    #[test]
    fn another_clusters_bucket_is_refused_and_names_what_it_holds() {
        let mut c = catalog(WHOLE);
        c.clusters = vec!["other".into()];
        let e = plan("b", "vfps", &c, RestoreTo::Latest).unwrap_err();
        assert!(e.to_string().contains("\"other\""), "{e}");
    }

    #[test]
    fn a_gap_in_the_archive_is_refused_naming_the_segment() {
        let mut wals = WHOLE.to_vec();
        wals.retain(|w| !w.starts_with("000000010000000000000005"));
        // B2 starts after the gap: only a restore from the older backup needs it.
        assert!(plan("b", "vfps", &catalog(&wals), RestoreTo::Latest).is_ok());
        let t = parse_utc("2026-12-05T08:45:00Z").unwrap();
        let e = plan("b", "vfps", &catalog(&wals), RestoreTo::Time(t)).unwrap_err();
        assert!(e.to_string().contains("000000010000000000000005"), "{e}");
    }

    #[test]
    fn wal_the_backup_itself_needs_is_refused_when_missing() {
        let e = plan(
            "b",
            "vfps",
            &catalog(&["000000010000000000000006"]),
            RestoreTo::Latest,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("000000010000000000000007")
                && e.to_string().contains("consistent"),
            "{e}"
        );
    }

    #[test]
    fn times_round_trip_and_bad_targets_are_named() {
        for s in [
            "2026-12-05T08:29:34Z",
            "1970-01-01T00:00:00Z",
            "2024-02-29T23:59:59Z",
        ] {
            assert_eq!(format_utc(parse_utc(s).unwrap()), s);
        }
        assert_eq!(
            parse_ctime("Sat Dec  5 08:29:34 2026"),
            parse_utc("2026-12-05T08:29:34Z")
        );
        let e = "yesterday".parse::<RestoreTo>().unwrap_err();
        assert!(e.contains("\"yesterday\""), "{e}");
        assert_eq!("latest".parse::<RestoreTo>(), Ok(RestoreTo::Latest));
        for s in ["latest", "backup-only", "2026-12-05T08:29:34Z"] {
            assert_eq!(
                s.parse::<RestoreTo>().unwrap().to_string(),
                s,
                "--to as written"
            );
        }
    }

    /// The mistakes the local restore turned against the data: a target
    /// after the last archived commit (recovery ended before it, after every
    /// member was destroyed) and one in the future are refused by the plan.
    #[test]
    fn a_target_after_the_last_archived_commit_or_in_the_future_is_refused() {
        let last = parse_utc("2026-12-06T09:00:00Z").unwrap();
        for t in [last, last + 1, last + 3600] {
            let e =
                super::plan("b", "vfps", &catalog(WHOLE), RestoreTo::Time(t), reach()).unwrap_err();
            assert!(matches!(e, Refusal::AfterLastCommit { .. }), "{e}");
            assert!(e.to_string().contains("2026-12-06T09:00:00Z"), "{e}");
        }
        assert!(super::plan(
            "b",
            "vfps",
            &catalog(WHOLE),
            RestoreTo::Time(last - 1),
            reach()
        )
        .is_ok());
        let future = parse_utc("2026-12-08T00:00:00Z").unwrap();
        let e = super::plan(
            "b",
            "vfps",
            &catalog(WHOLE),
            RestoreTo::Time(future),
            reach(),
        )
        .unwrap_err();
        assert!(matches!(e, Refusal::Future { .. }), "{e}");
        let none = Reach {
            last_commit: None,
            ..reach()
        };
        let t = parse_utc("2026-12-05T09:30:00Z").unwrap();
        let e = super::plan("b", "vfps", &catalog(WHOLE), RestoreTo::Time(t), none).unwrap_err();
        assert!(matches!(e, Refusal::NoCommit { .. }), "{e}");
        // `latest` needs no commit after anything.
        assert!(super::plan("b", "vfps", &catalog(WHOLE), RestoreTo::Latest, none).is_ok());
    }

    #[test]
    fn the_last_commit_is_read_from_pg_waldump_and_the_newest_segments_first() {
        let dump = "rmgr: Transaction len (rec/tot):     34/    34, tx:        735, lsn: 0/03000060, prev 0/03000028, desc: COMMIT 2026-12-07 11:30:45.123456 UTC\n\
                    rmgr: Transaction len (rec/tot):     82/    82, tx:        736, lsn: 0/030000A0, prev 0/03000060, desc: COMMIT 2026-12-07 11:31:02.5 UTC; inval msgs: catcache 32\n\
                    rmgr: Heap        len (rec/tot):     54/    54, tx:        737, desc: INSERT off 3";
        assert_eq!(last_commit_in(dump), parse_utc("2026-12-07T11:31:02Z"));
        assert_eq!(last_commit_in("no commits here"), None);
        assert_eq!(
            newest_segments(&catalog(WHOLE), 2),
            ["000000020000000000000008", "000000010000000000000007"]
        );
    }

    #[test]
    fn segment_positions_carry_across_logs() {
        let s = Segment::parse("0000000100000001000000FF").unwrap();
        assert_eq!(Segment::name(1, s.position + 1), "000000010000000200000000");
        assert!(Segment::parse("00000002.history").is_none());
        assert!(Segment::parse("000000010000000000000003.00000028.backup").is_none());
        assert!(Segment::parse("000000010000000000000003.partial").is_none());
    }
}
