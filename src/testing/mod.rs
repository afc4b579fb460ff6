//! Test support shared by the unit tests and the integration tests (`tests/it`, which enable
//! the `store-contract` feature through the crate's dev-dependency on itself): a private
//! PostgreSQL cluster (`pg_cluster`) and a TCP proxy that can cut one client off from it
//! (`tcp_proxy`). Never compiled into a shipped build.

pub(crate) mod pg_cluster;
pub(crate) mod tcp_proxy;

pub use pg_cluster::{PgCluster, PgDatabase, ServerTls};
pub use tcp_proxy::{ProxyMode, TcpProxy};
