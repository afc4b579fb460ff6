//! The backend-independent contract suite ([`crate::store::contract`]) run against
//! PostgreSQL: one private cluster per test binary ([`PgCluster::shared`]), each case a
//! fresh database of its own on it, and every `open` a new pool on that database, as another
//! replica would have.

use std::sync::Arc;

use async_trait::async_trait;

use super::{PgOptions, PostgresStore};
use crate::model::RunId;
use crate::store::Store;
use crate::store::contract::Backend;
use crate::testing::{PgCluster, PgDatabase};

struct Postgres;

/// One case's data: its database, and the folder for inline script copies.
struct Data {
    database: PgDatabase,
    scripts: tempfile::TempDir,
}

#[async_trait]
impl Backend for Postgres {
    type Data = Data;

    async fn create(&self) -> Data {
        Data {
            database: PgCluster::shared().create_database().await,
            scripts: tempfile::tempdir().expect("temporary folder"),
        }
    }

    async fn open(&self, data: &Data) -> Arc<dyn Store> {
        let options = PgOptions {
            pool_size: 4,
            ..PgOptions::new(data.scripts.path())
        };
        Arc::new(
            PostgresStore::connect(&data.database.url, options)
                .await
                .expect("open the store"),
        )
    }

    async fn damage_args(&self, data: &Data, run_id: &RunId) {
        let sql = format!(
            "UPDATE runs SET args = '{{not json' WHERE run_id = '{}'",
            run_id.as_str()
        );
        let changed = PgCluster::shared()
            .execute_one(&data.database.name, &sql)
            .await
            .expect("damage the row");
        assert_eq!(changed, 1, "the run to damage exists");
    }
}

crate::store_contract_tests!(Postgres);
