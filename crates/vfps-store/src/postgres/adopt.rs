//! Adopting a database written by upstream vfps (the .NET service, whose
//! EF Core migrations created `namespaces` and `pseudonyms`), so that an
//! existing deployment switches over with its pseudonyms.
//!
//! Upstream's tables hold the same data under slightly other names and types:
//! `pseudonyms.namespace_name` (ours: `namespace`), a nullable `description`,
//! a `bigint` length, a foreign key, and a non-unique index on the pseudonym
//! value. [`adopt`] turns them into the schema of migrations 1 and 2 in one
//! transaction and records those two as applied; the later migrations then run
//! as on any database. Rows are kept as they are (a null description becomes
//! ""). Upstream's other tables (its migration history, jobs, keys) are left
//! alone. Upstream cannot read the tables afterwards: keep a dump to go back.
//!
//! What the service could not serve stops the adoption before anything is
//! changed, naming each namespace: a pseudonym value given to two originals
//! (a reverse lookup would be ambiguous; ours is unique) and namespace
//! settings this service refuses.

use std::time::Duration;

use tokio_postgres::Client;
use vfps_core::Error;

use super::{namespace_from_row, pool::Steps};
use crate::migrate::{self, Migration};

/// Index builds on a large table outlast any call's command timeout.
pub(super) const TIMEOUT: Duration = Duration::from_secs(3600);

/// The migrations whose schema an adopted database has.
const ADOPTED: [i64; 2] = [1, 2];

/// Whether the schema in use holds upstream's tables (not adopted yet).
pub(super) async fn is_upstream(c: &Client) -> Result<bool, tokio_postgres::Error> {
    c.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute \
         WHERE attrelid = to_regclass('pseudonyms') AND attname = 'namespace_name' \
         AND NOT attisdropped)",
        &[],
    )
    .await?
    .try_get(0)
}

/// Converts upstream's tables and records migrations 1 and 2 as applied, in
/// one transaction; on an error the caller drops the session (rolling back).
pub(super) async fn adopt(c: &Client, steps: &Steps) -> Result<(), Error> {
    steps
        .run(c.batch_execute("BEGIN; LOCK TABLE namespaces, pseudonyms IN ACCESS EXCLUSIVE MODE"))
        .await?;
    let mut problems = Vec::new();
    for row in steps
        .run(c.query(
            "SELECT namespace_name, count(*) FROM ( \
                 SELECT namespace_name FROM pseudonyms \
                 GROUP BY namespace_name, pseudonym_value HAVING count(*) > 1) d \
             GROUP BY namespace_name ORDER BY namespace_name",
            &[],
        ))
        .await?
    {
        let (name, count): (String, i64) = (row.get(0), row.get(1));
        problems.push(format!(
            "namespace {name:?}: {count} pseudonym value(s) given to more than one original \
             (a reverse lookup of them is ambiguous)"
        ));
    }
    // Namespaces this service would refuse, told before anything changes (a
    // length past ours would also fail the unique index's build).
    for row in steps
        .run(c.query(
            "SELECT name, pseudonym_generation_method, pseudonym_length, pseudonym_prefix, \
             pseudonym_suffix FROM namespaces ORDER BY name",
            &[],
        ))
        .await?
    {
        let name: String = row.get(0);
        let settings = vfps_core::NamespaceName::parse(&name).and_then(|_| {
            let method = vfps_core::GenerationMethod::from_wire(row.get(1))
                .ok_or_else(|| Error::invalid_argument("unknown pseudonym generation method"))?;
            let length = u32::try_from(row.get::<_, i64>(2))
                .map_err(|_| Error::invalid_argument("pseudonym length out of range"))?;
            vfps_core::NamespaceSettings::parse(method, length, row.get(3), row.get(4))
        });
        if let Err(e) = settings {
            problems.push(format!("namespace {name:?}: {}", e.message));
        }
    }
    if problems.is_empty() {
        steps
            .run(c.batch_execute(&conversion(c, steps).await?))
            .await?;
        for row in steps
            .run(c.query(
                // The columns of the adopted schema; later migrations add theirs
                // (as their defaults here).
                "SELECT name, description, pseudonym_generation_method, pseudonym_length, \
                 pseudonym_prefix, pseudonym_suffix, created_at, last_updated_at, uid, false, false, NULL::text, false, false, 1, NULL::integer \
                 FROM namespaces ORDER BY name",
                &[],
            ))
            .await?
        {
            if let Err(e) = namespace_from_row(&row) {
                let name: String = row.get(0);
                problems.push(format!("namespace {name:?}: {}", e.message));
            }
        }
    }
    if !problems.is_empty() {
        return Err(Error::failed_precondition(format!(
            "this database was written by upstream vfps and cannot be adopted as it is; \
             nothing was changed: {}",
            problems.join("; ")
        )));
    }
    let recorded: Vec<&Migration> = migrate::POSTGRES
        .iter()
        .filter(|m| ADOPTED.contains(&m.version))
        .collect();
    for m in recorded {
        steps
            .run(c.execute(
                "INSERT INTO vfps_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                &[&m.version, &format!("{} (adopted)", m.name), &m.checksum()],
            ))
            .await?;
    }
    steps.run(c.batch_execute("COMMIT")).await?;
    Ok(())
}

/// The statements that turn upstream's tables into migrations 1 and 2's.
/// Upstream's constraint names are read, not assumed.
async fn conversion(c: &Client, steps: &Steps) -> Result<String, Error> {
    let mut sql = String::new();
    for row in steps
        .run(c.query(
            "SELECT conrelid::regclass::text, conname, contype::text FROM pg_constraint \
             WHERE conrelid IN ('namespaces'::regclass, 'pseudonyms'::regclass) \
             AND contype IN ('p', 'f')",
            &[],
        ))
        .await?
    {
        let (table, name, kind): (String, String, String) = (row.get(0), row.get(1), row.get(2));
        let table = table
            .rsplit('.')
            .next()
            .unwrap_or(&table)
            .trim_matches('"')
            .to_owned();
        let quoted = quote(&name);
        match kind.as_str() {
            // Ours has no foreign key: its per-row trigger costs a query per
            // inserted row (see migration 1).
            "f" => sql.push_str(&format!("ALTER TABLE {table} DROP CONSTRAINT {quoted};\n")),
            _ if name != format!("{table}_pkey") => sql.push_str(&format!(
                "ALTER TABLE {table} RENAME CONSTRAINT {quoted} TO {table}_pkey;\n"
            )),
            _ => {}
        }
    }
    sql.push_str(
        "DROP INDEX IF EXISTS ix_pseudonyms_namespace_name_pseudonym_value;
DROP INDEX IF EXISTS ix_pseudonyms_namespace_name_created_at_original_value;
ALTER TABLE pseudonyms RENAME COLUMN namespace_name TO namespace;
UPDATE namespaces SET description = '' WHERE description IS NULL;
ALTER TABLE namespaces
    ALTER COLUMN description SET DEFAULT '',
    ALTER COLUMN description SET NOT NULL,
    ALTER COLUMN pseudonym_length TYPE integer,
    ADD COLUMN uid bigint NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX pseudonyms_namespace_pseudonym_value_key
    ON pseudonyms (namespace, pseudonym_value);
CREATE INDEX pseudonyms_namespace_keyset_idx
    ON pseudonyms (namespace, created_at DESC, original_value DESC);
",
    );
    Ok(sql)
}

fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}
