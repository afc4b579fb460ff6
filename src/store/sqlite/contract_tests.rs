//! The backend-independent contract suite ([`crate::store::contract`]) run against SQLite:
//! each case gets a fresh persistence root in a temporary folder, and every `open` is a new
//! connection on it, as another process would have.

use std::sync::Arc;

use async_trait::async_trait;

use super::{DATABASE_FILE, SqliteStore};
use crate::model::RunId;
use crate::store::Store;
use crate::store::contract::Backend;

struct Sqlite;

#[async_trait]
impl Backend for Sqlite {
    type Data = tempfile::TempDir;

    async fn create(&self) -> tempfile::TempDir {
        tempfile::tempdir().expect("temporary folder")
    }

    async fn open(&self, data: &tempfile::TempDir) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open(&data.path().join("root")).expect("open the store"))
    }

    async fn damage_args(&self, data: &tempfile::TempDir, run_id: &RunId) {
        let database = data.path().join("root").join(DATABASE_FILE);
        let connection = rusqlite::Connection::open(database).expect("open the database");
        let changed = connection
            .execute(
                "UPDATE runs SET args = '{not json' WHERE run_id = ?1",
                [run_id.as_str()],
            )
            .expect("damage the row");
        assert_eq!(changed, 1, "the run to damage exists");
    }
}

crate::store_contract_tests!(Sqlite);
