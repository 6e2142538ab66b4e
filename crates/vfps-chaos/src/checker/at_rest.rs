//! P11 — nothing at rest re-identifies (docs/privacy.md): after the run,
//! every byte the platform keeps — each database instance's dump and data
//! directory, every base backup and WAL segment in the backup bucket,
//! PostgreSQL's, Patroni's and vfps's logs — holds none of the originals
//! the harness sent. The CSV jobs' objects hold their inputs (and
//! de-pseudonymized outputs) by design: they are named and counted, not
//! judged here.

use serde::{Deserialize, Serialize};

use super::{Property, Validity, Verdict};

/// What kind of bytes a place holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestClass {
    /// A database instance's dump (`pg_dump`).
    Dump,
    /// A database instance's data directory (tables, indexes, WAL).
    DataDirectory,
    /// The backup bucket: base backups and archived WAL.
    Backup,
    /// PostgreSQL's, Patroni's and vfps's logs.
    Log,
    /// The CSV jobs' objects: their inputs hold originals by design.
    JobObject,
}

impl RestClass {
    /// Whether originals may lie there (a job's input, until it expires).
    pub fn holds_originals_by_design(self) -> bool {
        self == Self::JobObject
    }
}

/// One place searched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    pub class: RestClass,
    pub place: String,
    pub bytes: u64,
    pub objects: u64,
    /// The originals found there, redacted (`sha256:…`).
    pub found: Vec<String>,
}

/// The whole search (`at-rest.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Search {
    /// Originals searched for.
    pub originals: usize,
    pub places: Vec<Place>,
    /// What could not be searched, for people.
    pub notes: Vec<String>,
}

/// P11's verdict.
pub fn check(search: &Search) -> Verdict {
    let property = Property::NothingAtRest;
    let searched: u64 = search.places.iter().map(|p| p.bytes).sum();
    let has = |class: RestClass| {
        search
            .places
            .iter()
            .any(|p| p.class == class && p.bytes > 0)
    };
    let mut evidence: Vec<String> = search
        .places
        .iter()
        .filter(|p| !p.class.holds_originals_by_design() && !p.found.is_empty())
        .map(|p| {
            format!(
                "{:?} {}: {} of the run's originals in plain text (e.g. {})",
                p.class,
                p.place,
                p.found.len(),
                p.found
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    let by_design: Vec<String> = search
        .places
        .iter()
        .filter(|p| p.class.holds_originals_by_design() && !p.found.is_empty())
        .map(|p| {
            format!(
                "{} ({} originals, {} objects)",
                p.place,
                p.found.len(),
                p.objects
            )
        })
        .collect();
    let validity = if !evidence.is_empty() {
        Validity::Invalid
    } else if search.originals == 0 || !has(RestClass::Dump) || !has(RestClass::DataDirectory) {
        Validity::Unknown
    } else {
        Validity::Valid
    };
    let places_with = evidence.len();
    evidence.extend(search.notes.iter().map(|n| format!("not searched: {n}")));
    Verdict {
        property,
        validity,
        summary: format!(
            "{places_with} of {} places hold originals: {} originals searched for in {:.1} MiB \
             ({}){}",
            search.places.len(),
            search.originals,
            searched as f64 / (1024.0 * 1024.0),
            search
                .places
                .iter()
                .map(|p| format!("{} {:.1} MiB", p.place, p.bytes as f64 / (1024.0 * 1024.0)))
                .collect::<Vec<_>>()
                .join(", "),
            if by_design.is_empty() {
                String::new()
            } else {
                format!("; by design: {}", by_design.join(", "))
            }
        ),
        evidence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(class: RestClass, place: &str, found: &[&str]) -> Place {
        Place {
            class,
            place: place.into(),
            bytes: 4096,
            objects: 1,
            found: found.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    fn search(places: Vec<Place>) -> Search {
        Search {
            originals: 100,
            places,
            notes: Vec::new(),
        }
    }

    #[test]
    fn originals_at_rest_fail_naming_where_and_job_objects_are_named_only() {
        let clean = search(vec![
            place(RestClass::Dump, "db-a dump", &[]),
            place(RestClass::DataDirectory, "db-a data", &[]),
            place(RestClass::JobObject, "jobs bucket", &["sha256:1"]),
        ]);
        let v = check(&clean);
        assert_eq!(v.validity, Validity::Valid, "{v:?}");
        assert!(
            v.summary.contains("by design: jobs bucket"),
            "{}",
            v.summary
        );
        let leaky = search(vec![
            place(RestClass::Dump, "db-a dump", &["sha256:1", "sha256:2"]),
            place(RestClass::DataDirectory, "db-a data", &[]),
            place(RestClass::Backup, "backup bucket", &["sha256:3"]),
        ]);
        let v = check(&leaky);
        assert_eq!(v.validity, Validity::Invalid);
        assert_eq!(v.evidence.len(), 2, "{:?}", v.evidence);
        assert!(v.evidence[0].contains("db-a dump: 2 of the run's originals"));
        assert!(v.evidence[1].contains("backup bucket"));
    }

    #[test]
    fn a_search_without_originals_or_databases_is_undecided() {
        let mut none = search(vec![
            place(RestClass::Dump, "db-a dump", &[]),
            place(RestClass::DataDirectory, "db-a data", &[]),
        ]);
        none.originals = 0;
        assert_eq!(check(&none).validity, Validity::Unknown);
        let no_dump = search(vec![place(RestClass::DataDirectory, "db-a data", &[])]);
        assert_eq!(check(&no_dump).validity, Validity::Unknown);
    }
}
