//! Reaching the database: the connection settings (server-side `statement_timeout` at the
//! call deadline and `idle_in_transaction_session_timeout` at half of it, so a session a
//! stalled replica left inside a transaction cannot hold a run's row lock for longer), the pool, the error
//! texts (never the URL's password), and the statement helpers every table's file uses
//! (each statement prepared once per connection).

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::PgOptions;
use crate::store::{StoreError, StoreResult};

/// The parameters of a statement.
pub(super) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Parses `url` (its TLS settings by `tls`, libpq's `PG*` variables where it leaves a
/// setting open) and applies this store's settings to it; the connector to reach it with.
pub(super) fn config(
    url: &str,
    options: &PgOptions,
) -> StoreResult<(tokio_postgres::Config, MakeRustlsConnect)> {
    let (rest, tls) = super::tls::read(url, &options.environment)?;
    let mut config = tokio_postgres::Config::from_str(&rest).map_err(|error| {
        StoreError::Io(format!(
            "the PostgreSQL store location {} is not a valid connection URL: {error}",
            redacted(url)
        ))
    })?;
    super::tls::apply_environment(&mut config, &options.environment);
    config.ssl_mode(tls.mode);
    let deadline_ms = options.call_deadline.as_millis().max(2);
    // A session idle inside a transaction for half a deadline belongs to a stalled (or
    // partitioned) replica, since this store sends a transaction's statements back to back:
    // the server ends it then, so another replica waiting for the run's row lock still gets
    // it within its own deadline.
    let idle_ms = deadline_ms / 2;
    // After any options the URL gives, so the deadline settings win.
    let given = config
        .get_options()
        .map(|given| format!("{given} "))
        .unwrap_or_default();
    config
        .connect_timeout(options.call_deadline)
        .application_name("agentprism")
        .options(format!(
            "{given}-c statement_timeout={deadline_ms} \
             -c idle_in_transaction_session_timeout={idle_ms}"
        ));
    Ok((config, tls.connector))
}

/// A pool of at most `options.pool_size` connections; a connection found closed is replaced.
/// Waiting for one is bounded by the caller's deadline, not by the pool.
pub(super) fn pool(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    options: &PgOptions,
) -> StoreResult<Pool> {
    let manager = Manager::from_config(
        config,
        tls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(options.pool_size.max(1))
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|error| StoreError::Io(format!("build the PostgreSQL connection pool: {error}")))
}

/// `url` with its password replaced by `***`, for messages and logs. It errs on the side of
/// hiding: the text may be a URL that does not parse (a password with an unescaped `/`,
/// `?` or `#`), so the user information ends at the *last* `@`, and a key=value string is
/// read as libpq reads it (spaces around `=`, quoted values with `\` escapes).
pub(crate) fn redacted(url: &str) -> String {
    // URL form: scheme://user:password@host/...
    if let Some((scheme, rest)) = url.split_once("://") {
        let (userinfo, host_on) = match rest.rsplit_once('@') {
            Some((userinfo, host_on)) => (Some(userinfo), host_on),
            None => (None, rest),
        };
        let host_end = host_on.find(['/', '?']).unwrap_or(host_on.len());
        let (host, tail) = host_on.split_at(host_end);
        let tail = redact_query(tail);
        return match userinfo {
            Some(userinfo) => {
                let shown = match userinfo.split_once(':') {
                    Some((user, _)) => format!("{user}:***"),
                    None => userinfo.to_owned(),
                };
                format!("{scheme}://{shown}@{host}{tail}")
            }
            None => format!("{scheme}://{host}{tail}"),
        };
    }
    redact_key_values(url)
}

/// A libpq key=value string with the value of `password` hidden; from a part that does not
/// read as `key = value` on, the rest is hidden too.
fn redact_key_values(text: &str) -> String {
    let mut shown = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let key_end = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let (key, after_key) = rest.split_at(key_end);
        let Some(after_equals) = after_key.trim_start().strip_prefix('=') else {
            shown.push("***".to_owned());
            break;
        };
        let value_on = after_equals.trim_start();
        let value_end = value_end(value_on);
        let value = &value_on[..value_end];
        if key.eq_ignore_ascii_case("password") {
            shown.push(format!("{key}=***"));
        } else {
            shown.push(format!("{key}={value}"));
        }
        rest = value_on[value_end..].trim_start();
    }
    shown.join(" ")
}

/// Where a key=value string's value starting `text` ends: a quoted value after its closing
/// quote, any other at the next unescaped whitespace.
fn value_end(text: &str) -> usize {
    let quoted = text.starts_with('\'');
    let mut chars = text.char_indices().skip(usize::from(quoted));
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return at + 1,
            c if !quoted && c.is_whitespace() => return at,
            _ => {}
        }
    }
    text.len()
}

/// Hides a `password=` query parameter.
fn redact_query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}?{}", query.join("&"))
}

/// Adds what was being done to a driver error.
pub(super) trait Context<T> {
    fn context(self, doing: impl FnOnce() -> String) -> StoreResult<T>;
}

impl<T> Context<T> for Result<T, tokio_postgres::Error> {
    fn context(self, doing: impl FnOnce() -> String) -> StoreResult<T> {
        self.map_err(|error| StoreError::Io(format!("{}: {}", doing(), describe(&error))))
    }
}

/// A driver error in words: the server's message when it sent one. Neither carries the
/// connection's password.
pub(super) fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) if *db.code() == SqlState::QUERY_CANCELED => format!(
            "the database cancelled the statement at the call deadline ({})",
            db.message()
        ),
        // Rust strings are valid UTF-8, so the one text the server refuses as an invalid
        // byte sequence is one holding NUL, which PostgreSQL's text type cannot store (SQLite
        // can); the transaction rolls back whole.
        Some(db) if *db.code() == SqlState::CHARACTER_NOT_IN_REPERTOIRE => format!(
            "a text value contains a NUL character (\\0), which a PostgreSQL store cannot \
             keep; nothing was written (PostgreSQL {}: {})",
            db.code().code(),
            db.message()
        ),
        Some(db) => format!("PostgreSQL {}: {}", db.code().code(), db.message()),
        None => with_causes(error),
    }
}

/// `error` and what caused it, so a failed TLS handshake says why ("invalid peer
/// certificate: UnknownIssuer"). The driver's and rustls's texts name no password or key.
fn with_causes(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        let shown = inner.to_string();
        if !text.contains(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        cause = inner.source();
    }
    text
}

/// Whether the error is a unique-key violation (a concurrent insert of the same key won).
pub(super) fn is_unique_violation(error: &tokio_postgres::Error) -> bool {
    error
        .as_db_error()
        .is_some_and(|db| *db.code() == SqlState::UNIQUE_VIOLATION)
}

/// The message of a call that missed its deadline.
pub(super) fn missed_deadline(doing: &str, deadline: Duration) -> StoreError {
    StoreError::Io(format!(
        "{doing}: the PostgreSQL store did not answer within the call deadline of {} ms",
        deadline.as_millis()
    ))
}

pub(super) async fn query(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query(&statement, params).await
}

pub(super) async fn query_opt(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<Row>, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query_opt(&statement, params).await
}

pub(super) async fn query_one(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Row, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query_one(&statement, params).await
}

pub(super) async fn execute(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<u64, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.execute(&statement, params).await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{config, redacted};
    use crate::store::PgOptions;

    #[test]
    fn the_deadline_is_the_servers_timeouts_after_the_urls_options() {
        let options = PgOptions {
            call_deadline: Duration::from_millis(1500),
            ..PgOptions::new("/tmp")
        };
        let (config, _) = config(
            "postgres://me@db/runs?options=-c%20search_path%3Dmine",
            &options,
        )
        .unwrap();
        assert_eq!(
            config.get_options(),
            Some(
                "-c search_path=mine -c statement_timeout=1500 \
                 -c idle_in_transaction_session_timeout=750"
            )
        );
        assert_eq!(
            config.get_connect_timeout(),
            Some(&Duration::from_millis(1500))
        );
        assert_eq!(config.get_application_name(), Some("agentprism"));
    }

    #[test]
    fn passwords_are_hidden_in_every_url_form() {
        assert_eq!(
            redacted("postgres://agentprism:s3cret@db:5432/runs?sslmode=disable"),
            "postgres://agentprism:***@db:5432/runs?sslmode=disable"
        );
        assert_eq!(
            redacted("postgresql://me@db/runs?password=s3cret&application_name=x"),
            "postgresql://me@db/runs?password=***&application_name=x"
        );
        assert_eq!(redacted("postgres://db/runs"), "postgres://db/runs");
        assert_eq!(
            redacted("host=db user=me password=s3cret dbname=runs"),
            "host=db user=me password=*** dbname=runs"
        );
        assert_eq!(
            redacted("postgres://me:p@ss:w@rd@db/runs"),
            "postgres://me:***@db/runs"
        );
    }

    /// A password libpq would accept, or a malformed URL echoed in the parse error, keeps
    /// every character of the password out of the redacted text.
    #[test]
    fn passwords_with_separators_or_spaced_keys_are_hidden_too() {
        for (location, secret) in [
            ("postgres://me:pa/ss@db/runs", "ss"),
            ("postgres://me:pa?ss@db/runs", "ss"),
            ("postgres://me:pa#ss@db/runs", "ss"),
            ("host=db password = s3cret dbname=runs", "s3cret"),
            ("host=db password= s3cret", "s3cret"),
            ("host=db password ='s3cret'", "s3cret"),
            ("host=db password='s3 cret' dbname=runs", "cret"),
            ("host=db PASSWORD='it\\'s secret' dbname=runs", "secret"),
        ] {
            let shown = redacted(location);
            assert!(!shown.contains(secret), "{location} shown as {shown}");
        }
        assert_eq!(
            redacted("host=db password = 's3 cret' dbname=runs"),
            "host=db password=*** dbname=runs"
        );
        assert_eq!(
            redacted("postgres://me:pa/ss@db/runs?sslmode=disable"),
            "postgres://me:***@db/runs?sslmode=disable"
        );
        let Err(error) = config(
            "postgres://me:pa/ss@db:notaport/runs",
            &PgOptions::new("/tmp"),
        ) else {
            panic!("a port that is no number is refused");
        };
        let error = error.to_string();
        assert!(!error.contains("ss@"), "{error}");
    }
}
