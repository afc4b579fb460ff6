//! The schema a fresh store is created with, compared with the one the code is written
//! against (`schema.expected.txt`): every table's columns (type, NOT NULL, default, key
//! position), foreign keys and whether it has a rowid, every index (its columns, order,
//! uniqueness and partial clause) and every trigger. The description is read from SQLite's
//! catalogue, not from the text of the migration scripts, so two scripts that build the same
//! schema describe the same way. A schema change updates the expected file in the same
//! commit, where a reviewer sees it.

use rusqlite::Connection;

use super::*;

/// The schema of a store created by this build.
const EXPECTED: &str = include_str!("schema.expected.txt");

#[test]
fn a_fresh_store_has_the_expected_schema_at_the_latest_version() {
    let folder = tempfile::tempdir().expect("temporary folder");
    drop(SqliteStore::open(folder.path()).expect("open store"));
    let connection = Connection::open(folder.path().join(DATABASE_FILE)).expect("open");
    let described = describe(&connection);
    assert!(
        described == EXPECTED,
        "a fresh store's schema differs from src/store/sqlite/tests/schema.expected.txt; \
         if the change is meant, put this in that file:\n{described}"
    );
    let version: i64 = connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("user_version");
    assert_eq!(version, 12);
    assert_eq!(MIGRATIONS.len(), 12);
}

/// A description of every table, index and trigger of `connection`'s main database, one
/// object after another in name order, whitespace of SQL texts collapsed.
pub(super) fn describe(connection: &Connection) -> String {
    let mut out = String::new();
    let objects: Vec<(String, String, String, Option<String>)> = connection
        .prepare(
            "SELECT type, name, tbl_name, sql FROM sqlite_master
             WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name",
        )
        .and_then(|mut statement| {
            statement
                .query_map([], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                })?
                .collect()
        })
        .expect("read sqlite_master");
    for (kind, name, table, sql) in objects {
        match kind.as_str() {
            "table" => describe_table(connection, &name, &mut out),
            "index" => describe_index(connection, &name, &table, sql.as_deref(), &mut out),
            "trigger" => {
                out.push_str(&format!("trigger {name} on {table}\n"));
                out.push_str(&format!("  {}\n", collapse(sql.as_deref().unwrap_or(""))));
            }
            other => out.push_str(&format!("{other} {name}\n")),
        }
    }
    out
}

fn describe_table(connection: &Connection, name: &str, out: &mut String) {
    let without_rowid: bool = connection
        .query_row(
            "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?1",
            [name],
            |row| row.get(0),
        )
        .expect("table_list");
    let rowid = if without_rowid { " without rowid" } else { "" };
    out.push_str(&format!("table {name}{rowid}\n"));
    let columns = rows(
        connection,
        "SELECT name, type, \"notnull\", dflt_value, pk, hidden
         FROM pragma_table_xinfo(?1) ORDER BY cid",
        name,
        6,
    );
    for column in columns {
        let [column, kind, not_null, default, pk, hidden] = &column[..] else {
            unreachable!("six columns selected")
        };
        out.push_str(&format!(
            "  column {column} {kind} notnull={not_null} default={default} pk={pk} hidden={hidden}\n"
        ));
    }
    let keys = rows(
        connection,
        "SELECT \"from\", \"table\", \"to\", on_update, on_delete, \"match\"
         FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
        name,
        6,
    );
    for key in keys {
        out.push_str(&format!("  foreign key {}\n", key.join(" ")));
    }
    // The indexes SQLite makes for UNIQUE and PRIMARY KEY constraints have no SQL text and
    // so are not objects of their own above.
    let automatic = rows(
        connection,
        "SELECT name, \"unique\", origin FROM pragma_index_list(?1)
         WHERE name LIKE 'sqlite_autoindex_%' ORDER BY name",
        name,
        3,
    );
    for index in automatic {
        let columns = index_columns(connection, &index[0]);
        out.push_str(&format!(
            "  automatic index unique={} origin={} ({columns})\n",
            index[1], index[2]
        ));
    }
}

fn describe_index(
    connection: &Connection,
    name: &str,
    table: &str,
    sql: Option<&str>,
    out: &mut String,
) {
    let unique: bool = connection
        .query_row(
            "SELECT \"unique\" FROM pragma_index_list(?1) WHERE name = ?2",
            [table, name],
            |row| row.get(0),
        )
        .expect("index_list");
    let columns = index_columns(connection, name);
    let partial = sql
        .map(collapse)
        .and_then(|sql| {
            let at = sql.find(" WHERE ")?;
            Some(sql[at..].to_owned())
        })
        .unwrap_or_default();
    out.push_str(&format!(
        "index {name} on {table} unique={unique} ({columns}){partial}\n"
    ));
}

/// The key columns of an index in order, each with its direction.
fn index_columns(connection: &Connection, index: &str) -> String {
    rows(
        connection,
        "SELECT name, \"desc\" FROM pragma_index_xinfo(?1) WHERE key = 1 ORDER BY seqno",
        index,
        2,
    )
    .into_iter()
    .map(|column| {
        let order = if column[1] == "1" { " DESC" } else { "" };
        format!("{}{order}", column[0])
    })
    .collect::<Vec<_>>()
    .join(", ")
}

/// The rows of a one-parameter query, each value as text (`NULL` for null).
fn rows(connection: &Connection, sql: &str, parameter: &str, width: usize) -> Vec<Vec<String>> {
    let mut statement = connection.prepare(sql).expect("prepare");
    statement
        .query_map([parameter], |row| {
            (0..width)
                .map(|index| {
                    let value: rusqlite::types::Value = row.get(index)?;
                    Ok(match value {
                        rusqlite::types::Value::Null => "NULL".to_owned(),
                        rusqlite::types::Value::Integer(number) => number.to_string(),
                        rusqlite::types::Value::Real(number) => number.to_string(),
                        rusqlite::types::Value::Text(text) => text,
                        rusqlite::types::Value::Blob(bytes) => format!("{bytes:?}"),
                    })
                })
                .collect()
        })
        .and_then(|rows| rows.collect())
        .expect("query")
}

/// `sql` with every run of whitespace made one space.
fn collapse(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}
