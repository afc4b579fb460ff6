//! The PostgreSQL store and its test support from outside the crate, as the serve replica
//! tests use them: a cluster of the test's own (`agentprism::testing::PgCluster::start`),
//! a store opened by location through the TCP proxy, and the cluster gone at drop.

use std::time::Duration;

use agentprism::store::{PgOptions, open_location};
use agentprism::testing::{PgCluster, ProxyMode, TcpProxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_cluster_serves_a_store_through_a_proxy_and_is_gone_at_drop() {
    let cluster = PgCluster::start().expect("start a private PostgreSQL cluster");
    let pid = cluster.pid();
    let folder = cluster.folder().to_path_buf();
    if nix::unistd::geteuid().is_root() {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uid = status
            .lines()
            .find(|line| line.starts_with("Uid:"))
            .unwrap();
        let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
        assert!(
            uid.split_whitespace().nth(1) == Some(&nobody.uid.to_string()),
            "the postmaster runs as nobody under root: {uid}"
        );
    }
    let database = cluster.create_database().await;
    let proxy = TcpProxy::start(cluster.address()).await.unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let options = PgOptions {
        call_deadline: Duration::from_millis(800),
        ..PgOptions::new(scripts.path())
    };
    let url = cluster.url_via(proxy.address(), &database.name);
    let store = open_location(&url, options)
        .await
        .expect("open by location");
    let capabilities = store.capabilities();
    assert!(capabilities.cas && capabilities.fence && capabilities.scan);
    assert_eq!(store.run_counts().await.unwrap().total(), 0);

    proxy.set_mode(ProxyMode::Blackhole);
    let cut = store.clock_ms().await.unwrap_err().to_string();
    assert!(cut.contains("deadline"), "{cut}");
    proxy.set_mode(ProxyMode::Pass);
    store.clock_ms().await.expect("through the proxy again");

    drop(store);
    drop(cluster);
    assert!(!folder.exists(), "the cluster's folder is removed");
    let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None);
    assert!(gone.is_err(), "the postmaster is gone");
}
