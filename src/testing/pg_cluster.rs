//! A private PostgreSQL cluster for tests: `initdb` into a temporary folder of its own, a
//! free loopback port, the unix socket inside that folder, a superuser `agentprism` with a
//! random password (SCRAM), and `postgres` run as `nobody` when the tests run as root
//! (PostgreSQL refuses to run as root). One cluster serves a whole test binary
//! ([`PgCluster::shared`]); each test takes a database of its own
//! ([`PgCluster::create_database`]).
//!
//! Stopping it: a cluster owned by a test stops (`SIGKILL` to the postmaster, whose backends
//! then exit on their own) and removes its folder when dropped. The shared one lives in a
//! static that is never dropped, so its postmaster is started from a thread that never ends
//! with `PR_SET_PDEATHSIG`: the kernel kills it when the test process exits, however it
//! exits, and the next start removes folders whose test process is gone.
//!
//! The binaries are found through `AGENTPRISM_TEST_PG_BIN`, else `pg_config --bindir`, else
//! the newest `/usr/lib/postgresql/*/bin`; a missing PostgreSQL fails the test (`.ci/run`
//! installs Debian's `postgresql`).

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The superuser every test connects as.
pub(crate) const SUPERUSER: &str = "agentprism";

/// Folder names under the temporary folder: `agentprism-pg-<pid>-<random>`.
const FOLDER_PREFIX: &str = "agentprism-pg-";

/// How long a fresh cluster may take to accept connections (initdb excluded) on a busy host.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Settings of a small test cluster: little memory, and no fsync (a test cluster's data need
/// not survive a power loss; durability across a crash of a *store client* is what the tests
/// check, and that is PostgreSQL's commit, not its fsync).
const SETTINGS: &[(&str, &str)] = &[
    ("listen_addresses", "127.0.0.1"),
    ("shared_buffers", "16MB"),
    ("max_connections", "100"),
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("log_min_messages", "warning"),
    ("logging_collector", "off"),
];

/// A running private cluster.
pub struct PgCluster {
    /// The temporary folder holding `data/`, `socket/`, `log` and the password file.
    folder: PathBuf,
    /// The loopback TCP port the postmaster listens on.
    port: u16,
    /// The superuser's password, part of every URL this cluster hands out.
    password: String,
    /// The postmaster, killed at drop; `None` for the shared cluster, whose postmaster the
    /// kernel kills when the process exits.
    postmaster: Option<Child>,
    /// The postmaster's pid, for tests that stop or kill the whole database.
    pid: u32,
}

/// What a cluster started with TLS (`ssl=on`) serves: its certificate and key, and the
/// authority whose client certificates it demands of TLS connections, if any (PEM texts).
pub struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
    /// When set, a TLS connection must present a client certificate this authority signed
    /// (`hostssl … clientcert=verify-ca`); plain connections are unaffected.
    pub client_ca_pem: Option<String>,
}

/// A database of its own on a cluster, for one test.
#[derive(Clone, Debug)]
pub struct PgDatabase {
    pub name: String,
    /// `postgres://agentprism:<password>@127.0.0.1:<port>/<name>`.
    pub url: String,
    /// The TCP address of the cluster, for a proxy in front of it.
    pub address: SocketAddr,
}

impl PgCluster {
    /// The cluster of this test binary, started on first use.
    pub fn shared() -> &'static PgCluster {
        static SHARED: OnceLock<PgCluster> = OnceLock::new();
        SHARED.get_or_init(|| {
            // The postmaster's parent must outlive every test: a thread of its own that
            // parks forever, so the parent-death signal fires only when the process ends.
            let (sender, receiver) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("pg-cluster".to_owned())
                .spawn(move || {
                    let started = PgCluster::start_with_parent_death();
                    sender.send(started).ok();
                    loop {
                        std::thread::park();
                    }
                })
                .expect("spawn the cluster thread");
            receiver
                .recv()
                .expect("the cluster thread answers")
                .unwrap_or_else(|error| panic!("start the private PostgreSQL cluster: {error}"))
        })
    }

    /// A cluster owned by the caller, stopped and removed when dropped.
    pub fn start() -> io::Result<PgCluster> {
        Self::launch(false, None)
    }

    /// [`PgCluster::start`] serving TLS too (`ssl=on`) with `tls`'s certificate.
    pub fn start_with_tls(tls: &ServerTls) -> io::Result<PgCluster> {
        Self::launch(false, Some(tls))
    }

    fn start_with_parent_death() -> io::Result<PgCluster> {
        let mut cluster = Self::launch(true, None)?;
        // Dropping a `Child` neither waits nor kills; the kernel does the killing.
        cluster.postmaster = None;
        Ok(cluster)
    }

    fn launch(parent_death: bool, tls: Option<&ServerTls>) -> io::Result<PgCluster> {
        let bin = bin_dir()?;
        remove_stale_folders();
        let folder = std::env::temp_dir().join(format!(
            "{FOLDER_PREFIX}{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir(&folder)?;
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700))?;
        let owner = runs_as();
        let password = uuid::Uuid::new_v4().simple().to_string();
        let password_file = folder.join("password");
        std::fs::write(&password_file, &password)?;
        std::fs::create_dir(folder.join("socket"))?;
        if let Some((uid, gid)) = owner {
            for path in [&folder, &folder.join("socket"), &password_file] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
            }
        }
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("--pgdata")
            .arg(folder.join("data"))
            .args(["--username", SUPERUSER, "--auth", "scram-sha-256"])
            .args(["--encoding", "UTF8", "--locale", "C", "--no-sync"])
            .arg(format!("--pwfile={}", password_file.display()));
        as_owner(&mut initdb, owner);
        // A working folder `nobody` can enter (initdb and postgres change back to it).
        initdb.current_dir(&folder);
        let output = initdb.stdin(Stdio::null()).output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "initdb failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        let extra = match tls {
            Some(tls) => serve_tls(&folder, tls, owner)?,
            None => Vec::new(),
        };
        let mut last_error = None;
        // A port found free can be taken by another process before the postmaster binds it.
        for _ in 0..5 {
            let port = free_port()?;
            match start_postmaster(&bin, &folder, port, owner, parent_death, &extra) {
                Ok(postmaster) => {
                    let pid = postmaster.id();
                    return Ok(PgCluster {
                        folder,
                        port,
                        password,
                        postmaster: Some(postmaster),
                        pid,
                    });
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("the postmaster did not start")))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn address(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The postmaster's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The temporary folder holding the data, the socket and the log.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    pub fn password(&self) -> &str {
        &self.password
    }

    /// The URL of `database` on this cluster, through `address` (the cluster's own, or a
    /// proxy's in front of it).
    pub fn url_via(&self, address: SocketAddr, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}:{}@{}:{}/{database}",
            self.password,
            address.ip(),
            address.port()
        )
    }

    pub fn url(&self, database: &str) -> String {
        self.url_via(self.address(), database)
    }

    /// Creates a fresh, empty database with a name unique in this cluster.
    pub async fn create_database(&self) -> PgDatabase {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let name = format!(
            "test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.execute("postgres", &format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|error| panic!("create database {name}: {error}"));
        PgDatabase {
            url: self.url(&name),
            address: self.address(),
            name,
        }
    }

    /// Runs `sql` (one or more statements) in `database` as the superuser.
    pub async fn execute(&self, database: &str, sql: &str) -> Result<(), tokio_postgres::Error> {
        let (client, connection) =
            tokio_postgres::connect(&self.url(database), tokio_postgres::NoTls).await?;
        let driver = tokio::spawn(connection);
        let outcome = client.batch_execute(sql).await;
        drop(client);
        driver.await.ok();
        outcome
    }

    /// Runs one statement in `database` as the superuser; returns how many rows it changed.
    pub async fn execute_one(
        &self,
        database: &str,
        sql: &str,
    ) -> Result<u64, tokio_postgres::Error> {
        let (client, connection) =
            tokio_postgres::connect(&self.url(database), tokio_postgres::NoTls).await?;
        let driver = tokio::spawn(connection);
        let outcome = client.execute(sql, &[]).await;
        drop(client);
        driver.await.ok();
        outcome
    }

    /// Sessions of `application` (their `application_name`) connected over TLS now, and all
    /// of its sessions.
    pub async fn sessions_over_tls(
        &self,
        application: &str,
    ) -> Result<(i64, i64), tokio_postgres::Error> {
        let (client, connection) =
            tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls).await?;
        let driver = tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*)
                 FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
                 WHERE a.application_name = $1",
                &[&application],
            )
            .await;
        drop(client);
        driver.await.ok();
        let row = row?;
        Ok((row.get(0), row.get(1)))
    }

    /// The server's log so far, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.folder.join("log")).unwrap_or_default()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if let Some(mut postmaster) = self.postmaster.take() {
            postmaster.kill().ok();
            postmaster.wait().ok();
            std::fs::remove_dir_all(&self.folder).ok();
        }
    }
}

/// Writes `tls`'s files into the cluster's folder (the key 0600, owned by the server's user),
/// demands client certificates of TLS connections when asked, and returns the settings
/// that turn TLS on.
fn serve_tls(
    folder: &Path,
    tls: &ServerTls,
    owner: Option<(u32, u32)>,
) -> io::Result<Vec<(String, String)>> {
    let mut settings = vec![("ssl".to_owned(), "on".to_owned())];
    let mut files = vec![
        ("server.crt", &tls.cert_pem, "ssl_cert_file"),
        ("server.key", &tls.key_pem, "ssl_key_file"),
    ];
    if let Some(ca) = &tls.client_ca_pem {
        files.push(("client-ca.crt", ca, "ssl_ca_file"));
        let hba = folder.join("data").join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba)?;
        std::fs::write(
            &hba,
            format!("hostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-ca\n{rules}"),
        )?;
    }
    for (name, text, setting) in files {
        let path = folder.join(name);
        std::fs::write(&path, text)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
        }
        settings.push((setting.to_owned(), path.display().to_string()));
    }
    Ok(settings)
}

fn start_postmaster(
    bin: &Path,
    folder: &Path,
    port: u16,
    owner: Option<(u32, u32)>,
    parent_death: bool,
    extra: &[(String, String)],
) -> io::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(folder.join("log"))?;
    let mut postgres = Command::new(bin.join("postgres"));
    postgres
        .arg("-D")
        .arg(folder.join("data"))
        .arg("-p")
        .arg(port.to_string())
        .arg("-k")
        .arg(folder.join("socket"));
    for (name, value) in SETTINGS {
        postgres.arg("-c").arg(format!("{name}={value}"));
    }
    for (name, value) in extra {
        postgres.arg("-c").arg(format!("{name}={value}"));
    }
    as_owner(&mut postgres, owner);
    postgres
        .current_dir(folder)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0);
    if parent_death {
        // SAFETY: between fork and exec only async-signal-safe calls: prctl and getppid.
        // std runs this after its uid change, which would otherwise clear the signal.
        unsafe {
            postgres.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(io::Error::from)?;
                if nix::unistd::getppid() == nix::unistd::Pid::from_raw(1) {
                    return Err(io::Error::other("the test process is gone"));
                }
                Ok(())
            });
        }
    }
    let mut postmaster = postgres.spawn()?;
    let started = Instant::now();
    loop {
        if let Some(status) = postmaster.try_wait()? {
            let log = std::fs::read_to_string(folder.join("log")).unwrap_or_default();
            return Err(io::Error::other(format!(
                "postgres exited ({status}) before accepting connections: {log}"
            )));
        }
        if accepts_connections(bin, &folder.join("socket"), port)? {
            return Ok(postmaster);
        }
        if started.elapsed() > READY_TIMEOUT {
            postmaster.kill().ok();
            postmaster.wait().ok();
            return Err(io::Error::other(format!(
                "postgres did not accept connections within {READY_TIMEOUT:?}"
            )));
        }
        // Readiness has no notification to wait on; `pg_isready` is asked again shortly.
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Whether the postmaster with its socket in `socket_dir` on `port` accepts connections
/// (`pg_isready` exit code 0). Asked over the cluster's own unix socket, not the TCP port:
/// another test binary's cluster that won the same port would answer there while this
/// postmaster is still failing to bind it.
fn accepts_connections(bin: &Path, socket_dir: &Path, port: u16) -> io::Result<bool> {
    let status = Command::new(bin.join("pg_isready"))
        .arg("-q")
        .arg("-h")
        .arg(socket_dir)
        .args(["-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    Ok(status.success())
}

/// Runs `command` as `owner` (uid, gid) when one is given.
fn as_owner(command: &mut Command, owner: Option<(u32, u32)>) {
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
}

/// The user the cluster runs as: `nobody` when this process is root, else this process's.
fn runs_as() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let nobody = nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .expect("the user nobody exists, to run the test cluster as");
    Some((nobody.uid.as_raw(), nobody.gid.as_raw()))
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The folder with `initdb`, `postgres` and `pg_isready`.
pub(crate) fn bin_dir() -> io::Result<PathBuf> {
    let has_tools = |dir: &Path| {
        ["initdb", "postgres", "pg_isready"]
            .iter()
            .all(|tool| dir.join(tool).is_file())
    };
    if let Some(dir) = std::env::var_os("AGENTPRISM_TEST_PG_BIN") {
        let dir = PathBuf::from(dir);
        if has_tools(&dir) {
            return Ok(dir);
        }
        return Err(io::Error::other(format!(
            "AGENTPRISM_TEST_PG_BIN={} has no initdb, postgres and pg_isready",
            dir.display()
        )));
    }
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if has_tools(&dir) {
            return Ok(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let dir = entry.path().join("bin");
            has_tools(&dir).then_some((version, dir))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir).ok_or_else(|| {
        io::Error::other(
            "PostgreSQL is not installed (no initdb through pg_config or under \
             /usr/lib/postgresql/*/bin); install the Debian package postgresql",
        )
    })
}

/// Removes the folders of clusters whose test process is gone (killed before it could
/// clean up).
fn remove_stale_folders() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|name| name.strip_prefix(FOLDER_PREFIX))
        else {
            continue;
        };
        let Some(pid) = rest
            .split('-')
            .next()
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        if !alive {
            std::fs::remove_dir_all(entry.path()).ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{PgCluster, accepts_connections, bin_dir};

    /// A cluster listening on the port is not taken for a postmaster of another folder that
    /// was started on the same port (and is failing to bind it).
    #[test]
    fn readiness_is_asked_of_the_clusters_own_socket() {
        let cluster = PgCluster::start().expect("start a private PostgreSQL cluster");
        let bin = bin_dir().unwrap();
        let own = cluster.folder().join("socket");
        assert!(accepts_connections(&bin, &own, cluster.port()).unwrap());
        let other = tempfile::tempdir().unwrap();
        assert!(
            !accepts_connections(&bin, other.path(), cluster.port()).unwrap(),
            "another folder's postmaster was taken as ready because this cluster has the port"
        );
    }
}
