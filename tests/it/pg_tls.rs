//! TLS to PostgreSQL (docs/store.md, "Connecting over TLS") against real clusters started with
//! `ssl=on` and certificates the test makes: each `sslmode` accepts what it should, a wrong
//! authority or host name is refused with a clear error that shows no password, a client
//! certificate is presented when the server demands one, and `agentprism serve --store` runs a
//! workflow over `verify-full`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentprism::store::{Housekeeping as _, PgOptions, PostgresStore};
use agentprism::testing::{PgCluster, ServerTls};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::json;

use crate::replicas::{as_user, context, replica_at, workflows};

/// A certificate authority of the test's own.
struct Authority {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn authority(name: &str) -> Authority {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let pem = params.self_signed(&key).unwrap().pem();
    Authority {
        pem,
        issuer: Issuer::new(params, key),
    }
}

/// A certificate for `names` signed by `by`, and its key (PEM).
fn issued(by: &Authority, names: &[&str], common_name: &str) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    let cert = params.signed_by(&key, &by.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A cluster of the test's own serving TLS with a certificate `by` issued for `localhost`,
/// demanding client certificates `clients` signed when given.
fn tls_cluster(by: &Authority, clients: Option<&Authority>) -> PgCluster {
    let (cert_pem, key_pem) = issued(by, &["localhost"], "localhost");
    PgCluster::start_with_tls(&ServerTls {
        cert_pem,
        key_pem,
        client_ca_pem: clients.map(|authority| authority.pem.clone()),
    })
    .expect("start a TLS cluster")
}

fn write(folder: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let path = folder.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// Opens a store at `url`, closing it again; the error's text when refused.
async fn open(url: &str, scripts: &Path) -> Result<(), String> {
    let options = PgOptions {
        call_deadline: Duration::from_secs(10),
        ..PgOptions::new(scripts)
    };
    match PostgresStore::connect(url, options).await {
        Ok(store) => {
            drop(store);
            Ok(())
        }
        Err(error) => Err(error.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sslmode_accepts_what_it_should_and_refuses_a_wrong_authority_or_name() {
    let ours = authority("agentprism test CA");
    let theirs = authority("another CA");
    // Issued for `localhost` only: connecting to 127.0.0.1 is a wrong host name.
    let cluster = tls_cluster(&ours, None);
    let database = cluster.create_database().await;
    let files = tempfile::tempdir().unwrap();
    let our_ca = write(files.path(), "ours.pem", &ours.pem, 0o644);
    let their_ca = write(files.path(), "theirs.pem", &theirs.pem, 0o644);
    let scripts = files.path().join("scripts");
    let by_ip = cluster.url(&database.name);
    let by_name = by_ip.replace("@127.0.0.1:", "@localhost:");
    let with = |url: &str, params: &str| format!("{url}?{params}");
    let ca = |path: &Path| format!("sslrootcert={}", path.display());

    for (url, what) in [
        (with(&by_ip, "sslmode=disable"), "disable"),
        (with(&by_ip, "sslmode=prefer"), "prefer"),
        (
            with(&by_ip, "sslmode=require"),
            "require without a root certificate",
        ),
        (
            with(&by_ip, &format!("sslmode=verify-ca&{}", ca(&our_ca))),
            "verify-ca ignores the host name",
        ),
        (
            with(&by_name, &format!("sslmode=verify-full&{}", ca(&our_ca))),
            "verify-full with the certificate's name",
        ),
    ] {
        open(&url, &scripts)
            .await
            .unwrap_or_else(|error| panic!("{what}: {error}\n{}", cluster.log()));
    }
    for (url, expected) in [
        (
            with(&by_ip, &format!("sslmode=verify-full&{}", ca(&our_ca))),
            "certificate not valid for name \"127.0.0.1\"",
        ),
        (
            with(&by_name, &format!("sslmode=verify-ca&{}", ca(&their_ca))),
            "UnknownIssuer",
        ),
        (
            with(&by_name, &format!("sslmode=verify-full&{}", ca(&their_ca))),
            "UnknownIssuer",
        ),
        (
            with(&by_name, &format!("sslmode=require&{}", ca(&their_ca))),
            "UnknownIssuer",
        ),
    ] {
        let error = open(&url, &scripts).await.expect_err(&url);
        assert!(error.contains(expected), "{url}: {error}");
        assert!(!error.contains(cluster.password()), "{error}");
    }
    // `prefer` against a server that offers TLS uses it.
    let options = PgOptions::new(&scripts);
    let kept = PostgresStore::connect(&with(&by_ip, "sslmode=prefer"), options)
        .await
        .unwrap();
    kept.run_counts().await.unwrap();
    let (tls, all) = cluster.sessions_over_tls("agentprism").await.unwrap();
    assert!(all >= 1 && tls == all, "{tls} of {all} sessions over TLS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_is_refused_by_a_server_without_tls_and_prefer_falls_back() {
    let cluster = PgCluster::shared();
    let database = cluster.create_database().await;
    let scripts = tempfile::tempdir().unwrap();
    let error = open(&format!("{}?sslmode=require", database.url), scripts.path())
        .await
        .expect_err("the shared cluster serves no TLS");
    assert!(error.to_lowercase().contains("tls"), "{error}");
    assert!(!error.contains(cluster.password()), "{error}");
    open(&format!("{}?sslmode=prefer", database.url), scripts.path())
        .await
        .expect("prefer falls back to plain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_when_the_server_demands_one() {
    let ours = authority("agentprism test CA");
    let cluster = tls_cluster(&ours, Some(&ours));
    let database = cluster.create_database().await;
    let files = tempfile::tempdir().unwrap();
    let our_ca = write(files.path(), "ours.pem", &ours.pem, 0o644);
    let (client_pem, client_key) = issued(&ours, &[], "agentprism");
    let cert = write(files.path(), "client.crt", &client_pem, 0o644);
    let key = write(files.path(), "client.key", &client_key, 0o600);
    let open_key = write(files.path(), "open.key", &client_key, 0o644);
    let scripts = files.path().join("scripts");
    let base = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        cluster
            .url(&database.name)
            .replace("@127.0.0.1:", "@localhost:"),
        our_ca.display()
    );
    let refused = open(&base, &scripts)
        .await
        .expect_err("no client certificate");
    assert!(refused.contains("certificate"), "{refused}");
    let with_cert = format!("{base}&sslcert={}&sslkey={}", cert.display(), key.display());
    open(&with_cert, &scripts)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", cluster.log()));
    let open_to_all = format!(
        "{base}&sslcert={}&sslkey={}",
        cert.display(),
        open_key.display()
    );
    let error = open(&open_to_all, &scripts)
        .await
        .expect_err("a key others may read");
    assert!(
        error.contains("mode 0644") && error.contains("open.key"),
        "{error}"
    );
    assert!(!error.contains("PRIVATE KEY"), "{error}");
}

/// A TLS cluster of a test's own, a database on it, and the `--store` URL that reaches it
/// over `verify-full` with the authority's certificate written under `ctx`.
pub(crate) struct VerifiedStore {
    pub cluster: PgCluster,
    pub runtime: tokio::runtime::Runtime,
    pub location: String,
}

pub(crate) fn verified_store(ctx: &crate::support::context::TestContext) -> VerifiedStore {
    let ours = authority("agentprism test CA");
    let cluster = tls_cluster(&ours, None);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let database = runtime.block_on(cluster.create_database());
    let ca = ctx.path("ca.pem");
    std::fs::write(&ca, &ours.pem).unwrap();
    let location = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        database.url.replace("@127.0.0.1:", "@localhost:"),
        ca.display()
    );
    VerifiedStore {
        cluster,
        runtime,
        location,
    }
}

#[test]
fn serve_runs_a_workflow_on_a_store_reached_over_verify_full() {
    let ctx = context();
    let folder = workflows(&ctx);
    let VerifiedStore {
        cluster,
        runtime,
        location,
    } = verified_store(&ctx);
    let served = replica_at(&ctx, &folder, &location, &[]);
    let client = as_user(&served, "alice");
    let run_id = client.start("calls", json!({"tag": "tls"}));
    client.wait_state(&run_id, "completed");
    let (tls, all) = runtime
        .block_on(cluster.sessions_over_tls("agentprism"))
        .unwrap();
    assert!(all >= 1 && tls == all, "{tls} of {all} sessions over TLS");
    let stopped = served.stop();
    assert!(
        !stopped.stderr.contains(cluster.password()),
        "{}",
        stopped.stderr
    );
}
