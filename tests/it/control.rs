//! The control plane over real Unix sockets: a signed round trip; forged, tampered, stale,
//! future, replayed, misaddressed, wrong-version, oversized, garbage and silent requests all
//! refused with the bare `UNAUTHENTICATED` while valid calls keep succeeding and the handler
//! never sees the bad ones; answers forged by a fake server rejected by the client; and, when
//! the tests run as root, a connection from a real process of another uid refused.
//!
//! Other-uid test: peer credentials are taken by the kernel at `connect(2)`, so the connecting
//! process itself must already run as the other user; a process that switches uid after
//! connecting would still count as us. The test re-runs this test binary as uid/gid 65534
//! (`nobody`, dropped with `setgroups`/`setgid`/`setuid` in `pre_exec`), filtered to the
//! helper test [`other_uid_child`], which connects, sends a frame signed with the real key and
//! prints the answer. The socket is 0600 in a 0700 folder, which already keeps `nobody` out
//! at the filesystem; to exercise the server's own uid check the test loosens the modes of its
//! temp copy (folders 0711, socket 0666). Afterwards the parent sends the identical frame
//! itself and it is accepted: the frame was valid, only the uid differed.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agentprism::control::wire::{Request, Response, frame, new_nonce, refusal_body};
use agentprism::control::{
    ControlClient, ControlClientError, ControlError, ControlHandler, ControlServer, Identity,
    Limits, Peer, kinds,
};
use agentprism::discovery::{Paths, RunControlKey};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

const SERVER_ID: &str = "5e7a1c2b-3d4f-4a5b-8c6d-7e8f9a0b1c2d";
const CLIENT_ID: &str = "0a1b2c3d-4e5f-4061-8273-94a5b6c7d8e9";

/// Answers `identify` with the server identity and echoes everything else; counts every call.
struct CountingHandler {
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl ControlHandler for CountingHandler {
    async fn handle(
        &self,
        kind: &str,
        from: &Peer,
        op: &str,
        body: Value,
    ) -> Result<Value, ControlError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match kind {
            kinds::IDENTIFY => Ok(json!({"instanceId": SERVER_ID, "state": "current"})),
            kinds::RUN_CONTROL if body["runId"] == "missing" => {
                Err(ControlError::UnknownRun("no run missing".into()))
            }
            kinds::RUN_CONTROL => Ok(json!({
                "outcome": "stopped",
                "op": op,
                "from": from.identity.instance_id,
                "peerPid": from.pid,
                "body": body,
            })),
            other => Err(ControlError::InvalidOperation(format!(
                "unknown kind {other}"
            ))),
        }
    }
}

/// A server on its own temp dirs, serving until dropped.
struct Fixture {
    _temp: tempfile::TempDir,
    path: PathBuf,
    key: RunControlKey,
    handler: Arc<CountingHandler>,
    shutdown: CancellationToken,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl Fixture {
    async fn start(limits: Limits) -> Fixture {
        let temp = tempfile::tempdir().unwrap();
        let runtime = temp.path().join("run");
        std::fs::create_dir(&runtime).unwrap();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        let paths = Paths::new(temp.path().join("root"));
        let key = RunControlKey::load_or_create(&paths).unwrap();
        let server = ControlServer::bind(&paths, Some(&runtime), server_identity(), key.clone())
            .unwrap()
            .with_limits(limits);
        let path = server.path().to_path_buf();
        let handler = Arc::new(CountingHandler {
            calls: AtomicUsize::new(0),
        });
        let shutdown = CancellationToken::new();
        let served = tokio::spawn(server.serve(handler.clone(), shutdown.clone()));
        Fixture {
            _temp: temp,
            path,
            key,
            handler,
            shutdown,
            served: Some(served),
        }
    }

    fn client(&self) -> ControlClient {
        ControlClient::new(self.key.clone(), client_identity())
    }

    fn calls(&self) -> usize {
        self.handler.calls.load(Ordering::SeqCst)
    }

    /// A framed request signed with the real key, `edit` applied before signing.
    fn signed_frame(&self, edit: impl FnOnce(&mut Draft)) -> Vec<u8> {
        let mut draft = Draft {
            kind: kinds::IDENTIFY.into(),
            to: SERVER_ID.into(),
            ts: agentprism::util::now_ms(),
            nonce: new_nonce().unwrap(),
            body: "{}".into(),
        };
        edit(&mut draft);
        let request = Request::sign(
            &self.key,
            &draft.kind,
            &draft.to,
            &client_identity(),
            draft.ts,
            &draft.nonce,
            "op-raw",
            draft.body,
        );
        frame(&serde_json::to_vec(&request).unwrap())
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        self.served.take().unwrap().await.unwrap();
        assert!(!self.path.exists(), "the socket is removed at shutdown");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The fields of a request a test varies.
struct Draft {
    kind: String,
    to: String,
    ts: i64,
    nonce: String,
    body: String,
}

fn server_identity() -> Identity {
    Identity {
        instance_id: SERVER_ID.into(),
        pid: std::process::id(),
        version: "0.2.0".into(),
    }
}

fn client_identity() -> Identity {
    Identity {
        instance_id: CLIENT_ID.into(),
        pid: std::process::id(),
        version: "0.1.0".into(),
    }
}

/// Writes `bytes` as they are, then reads everything until the server closes. A server that
/// closes with our bytes unread makes the kernel report ECONNRESET after its answer; that
/// ends the read like EOF.
async fn raw_exchange(path: &Path, bytes: &[u8]) -> Vec<u8> {
    let mut stream = UnixStream::connect(path).await.unwrap();
    let _ = stream.write_all(bytes).await;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return answer,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
        }
    }
}

fn refusal_frame() -> Vec<u8> {
    frame(&refusal_body())
}

/// The JSON of a framed answer.
fn unframe(answer: &[u8]) -> Value {
    assert!(answer.len() >= 4, "no frame: {answer:?}");
    let length = u32::from_be_bytes(answer[..4].try_into().unwrap()) as usize;
    assert_eq!(answer.len(), 4 + length);
    serde_json::from_slice(&answer[4..]).unwrap()
}

#[tokio::test]
async fn signed_round_trip() {
    let fixture = Fixture::start(Limits::default()).await;
    let meta = std::fs::symlink_metadata(&fixture.path).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "socket mode");
    let folder = fixture.path.parent().unwrap();
    assert_eq!(std::fs::metadata(folder).unwrap().mode() & 0o777, 0o700);
    assert!(fixture.path.ends_with("agentprism/ctl-5e7a1c2b-3d4.sock"));

    let client = fixture.client();
    let identify = client
        .call(
            &fixture.path,
            SERVER_ID,
            kinds::IDENTIFY,
            "op-1",
            &json!({}),
        )
        .await
        .unwrap();
    assert_eq!(
        identify,
        json!({"instanceId": SERVER_ID, "state": "current"})
    );

    let body = json!({"action": "stop", "runId": "run-1", "note": "ünïcode \u{1F600}"});
    let answer = client
        .call(&fixture.path, SERVER_ID, kinds::RUN_CONTROL, "op-2", &body)
        .await
        .unwrap();
    assert_eq!(answer["outcome"], "stopped");
    assert_eq!(answer["op"], "op-2");
    assert_eq!(answer["from"], CLIENT_ID);
    assert_eq!(answer["peerPid"], std::process::id());
    assert_eq!(answer["body"], body);

    // Retrying with the same op is a new send (new nonce), not a replay.
    let again = client
        .call(&fixture.path, SERVER_ID, kinds::RUN_CONTROL, "op-2", &body)
        .await
        .unwrap();
    assert_eq!(again["op"], "op-2");

    let error = client
        .call(
            &fixture.path,
            SERVER_ID,
            kinds::RUN_CONTROL,
            "op-3",
            &json!({"action": "stop", "runId": "missing"}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ControlClientError::Rejected(ControlError::UnknownRun(m)) if m == "no run missing"),
        "{error:?}"
    );
    let error = client
        .call(&fixture.path, SERVER_ID, "frobnicate", "op-4", &json!(null))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ControlClientError::Rejected(ControlError::InvalidOperation(_))
        ),
        "{error:?}"
    );
    assert_eq!(fixture.calls(), 5);
    fixture.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_while_valid_calls_succeed() {
    let fixture = Fixture::start(Limits {
        exchange_timeout: Duration::from_millis(400),
        ..Limits::default()
    })
    .await;
    let now = agentprism::util::now_ms();

    let mut forged_mac: Request =
        serde_json::from_slice(&fixture.signed_frame(|_| {})[4..]).unwrap();
    forged_mac.mac = RunControlKey::from_bytes([0x5a; 32])
        .mac(b"anything")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut tampered: Request = serde_json::from_slice(
        &fixture.signed_frame(|d| {
            d.kind = kinds::RUN_CONTROL.into();
            d.body = r#"{"action":"stop","runId":"run-1"}"#.into();
        })[4..],
    )
    .unwrap();
    tampered.body = r#"{"action":"stop","runId":"run-2"}"#.into();
    let mut wrong_version: Request =
        serde_json::from_slice(&fixture.signed_frame(|_| {})[4..]).unwrap();
    wrong_version.v = 2;
    let mut oversized = ((1u32 << 20) + 1).to_be_bytes().to_vec();
    oversized.extend_from_slice(&[b'{'; 4096]);
    let mut bad: Vec<(&str, Vec<u8>)> = vec![
        (
            "forged mac",
            frame(&serde_json::to_vec(&forged_mac).unwrap()),
        ),
        (
            "body tampered after signing",
            frame(&serde_json::to_vec(&tampered).unwrap()),
        ),
        ("ts 31 s old", fixture.signed_frame(|d| d.ts = now - 31_000)),
        (
            "ts 31 s ahead",
            fixture.signed_frame(|d| d.ts = now + 31_000),
        ),
        (
            "addressed to another instance",
            fixture.signed_frame(|d| d.to = CLIENT_ID.into()),
        ),
        (
            "wrong v",
            frame(&serde_json::to_vec(&wrong_version).unwrap()),
        ),
        ("oversized frame", oversized),
        (
            "garbage (HTTP)",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        ("garbage (small frame)", frame(b"\x00\x01not json")),
        ("JSON but not a request", frame(br#"{"ok":true}"#)),
    ];
    // The replay pair: the exact same bytes twice, sent one after the other.
    let replayed = fixture.signed_frame(|_| {});

    // A connection that never sends anything holds a slot until the deadline.
    let mut silent = UnixStream::connect(&fixture.path).await.unwrap();
    let silent_since = Instant::now();

    let mut tasks = JoinSet::new();
    for (name, bytes) in bad.drain(..) {
        let path = fixture.path.clone();
        tasks.spawn(async move { (name, raw_exchange(&path, &bytes).await) });
    }
    for index in 0..8 {
        let client = fixture.client();
        let path = fixture.path.clone();
        tasks.spawn(async move {
            let answer = client
                .call(
                    &path,
                    SERVER_ID,
                    kinds::IDENTIFY,
                    &format!("op-{index}"),
                    &json!({}),
                )
                .await
                .unwrap();
            assert_eq!(answer["instanceId"], SERVER_ID);
            ("valid", Vec::new())
        });
    }
    let first = raw_exchange(&fixture.path, &replayed).await;
    let first = unframe(&first);
    let response: Response = serde_json::from_value(first).unwrap();
    assert!(response.mac_is_valid(&fixture.key));
    assert_eq!(
        serde_json::from_str::<Value>(&response.body).unwrap()["ok"],
        true
    );
    assert_eq!(
        raw_exchange(&fixture.path, &replayed).await,
        refusal_frame(),
        "replay"
    );

    while let Some(done) = tasks.join_next().await {
        let (name, answer) = done.unwrap();
        if name != "valid" {
            assert_eq!(
                answer,
                refusal_frame(),
                "{name}: {}",
                String::from_utf8_lossy(&answer)
            );
        }
    }
    assert_eq!(
        fixture.calls(),
        8 + 1,
        "only the valid calls reached the handler"
    );

    // The silent connection is closed at the deadline, with nothing sent back.
    let mut rest = Vec::new();
    silent.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "{rest:?}");
    assert!(silent_since.elapsed() >= Duration::from_millis(350));
    // And the server still serves.
    fixture
        .client()
        .call(
            &fixture.path,
            SERVER_ID,
            kinds::IDENTIFY,
            "op-after",
            &json!({}),
        )
        .await
        .unwrap();
    assert_eq!(fixture.calls(), 10);
    fixture.stop().await;
}

#[tokio::test]
async fn a_silent_connection_does_not_block_others_at_the_default_deadline() {
    let fixture = Fixture::start(Limits::default()).await;
    let mut silent = UnixStream::connect(&fixture.path).await.unwrap();
    let started = Instant::now();
    fixture
        .client()
        .call(&fixture.path, SERVER_ID, kinds::IDENTIFY, "op", &json!({}))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    let mut rest = Vec::new();
    silent.read_to_end(&mut rest).await.unwrap();
    let waited = started.elapsed();
    assert!(rest.is_empty());
    assert!(
        waited >= Duration::from_millis(4900) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    fixture.stop().await;
}

/// What a fake server answers to the request it reads.
#[derive(Clone, Copy)]
enum Forgery {
    OtherKey,
    WrongRe,
    OtherInstance,
    Unsigned,
    BodyEditedAfterSigning,
    Refusal,
    Silence,
}

#[tokio::test]
async fn answers_from_a_fake_server_are_not_trusted() {
    let temp = tempfile::tempdir().unwrap();
    let key = RunControlKey::from_bytes([0x11; 32]);
    let client =
        ControlClient::new(key.clone(), client_identity()).with_timeout(Duration::from_millis(300));
    for forgery in [
        Forgery::OtherKey,
        Forgery::WrongRe,
        Forgery::OtherInstance,
        Forgery::Unsigned,
        Forgery::BodyEditedAfterSigning,
        Forgery::Refusal,
        Forgery::Silence,
    ] {
        let path = temp.path().join("fake.sock");
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let key = key.clone();
        let fake = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut length = [0u8; 4];
            stream.read_exact(&mut length).await.unwrap();
            let mut request = vec![0u8; u32::from_be_bytes(length) as usize];
            stream.read_exact(&mut request).await.unwrap();
            let request: Request = serde_json::from_slice(&request).unwrap();
            let ok = r#"{"ok":true,"outcome":"stopped"}"#.to_owned();
            let ts = agentprism::util::now_ms();
            let answer: Vec<u8> = match forgery {
                Forgery::OtherKey => serde_json::to_vec(&Response::sign(
                    &RunControlKey::from_bytes([0x22; 32]),
                    &request.nonce,
                    &server_identity(),
                    ts,
                    ok,
                ))
                .unwrap(),
                Forgery::WrongRe => serde_json::to_vec(&Response::sign(
                    &key,
                    &new_nonce().unwrap(),
                    &server_identity(),
                    ts,
                    ok,
                ))
                .unwrap(),
                Forgery::OtherInstance => {
                    let mut other = server_identity();
                    other.instance_id = "ffffffff-0000-4000-8000-000000000000".into();
                    serde_json::to_vec(&Response::sign(&key, &request.nonce, &other, ts, ok))
                        .unwrap()
                }
                Forgery::Unsigned => ok.into_bytes(),
                Forgery::BodyEditedAfterSigning => {
                    let mut response = Response::sign(
                        &key,
                        &request.nonce,
                        &server_identity(),
                        ts,
                        r#"{"ok":false,"code":"NOT_OWNER","message":"x"}"#.into(),
                    );
                    response.body = ok;
                    serde_json::to_vec(&response).unwrap()
                }
                Forgery::Refusal => refusal_body(),
                Forgery::Silence => {
                    let mut rest = Vec::new();
                    let _ = stream.read_to_end(&mut rest).await;
                    return;
                }
            };
            stream.write_all(&frame(&answer)).await.unwrap();
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        });
        let result = client
            .call(
                &path,
                SERVER_ID,
                kinds::RUN_CONTROL,
                "op",
                &json!({"runId": "r"}),
            )
            .await;
        match forgery {
            Forgery::Refusal => {
                assert!(
                    matches!(result, Err(ControlClientError::Refused { .. })),
                    "{result:?}"
                )
            }
            Forgery::Silence => {
                let error = result.unwrap_err();
                assert!(
                    matches!(error, ControlClientError::TimedOut { .. }) && error.is_unreachable(),
                    "{error:?}"
                );
            }
            _ => assert!(
                matches!(result, Err(ControlClientError::BadResponse { .. })),
                "{result:?}"
            ),
        }
        fake.await.unwrap();
    }

    let error = client
        .call(
            &temp.path().join("nobody-here.sock"),
            SERVER_ID,
            kinds::IDENTIFY,
            "op",
            &json!({}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, ControlClientError::Unreachable { .. }) && error.is_unreachable(),
        "{error:?}"
    );
}

#[tokio::test]
async fn another_key_is_refused_and_nothing_runs() {
    let fixture = Fixture::start(Limits::default()).await;
    let stranger = ControlClient::new(RunControlKey::from_bytes([0x33; 32]), client_identity());
    let error = stranger
        .call(&fixture.path, SERVER_ID, kinds::SHUTDOWN, "op", &json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ControlClientError::Refused { .. }),
        "{error:?}"
    );
    assert!(!error.is_unreachable());
    let error = fixture
        .client()
        .call(&fixture.path, CLIENT_ID, kinds::SHUTDOWN, "op", &json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ControlClientError::Refused { .. }),
        "misaddressed: {error:?}"
    );
    assert_eq!(fixture.calls(), 0);
    fixture.stop().await;
}

const CHILD_SOCKET_VAR: &str = "CONTROL_TEST_CHILD_SOCKET";
const CHILD_FRAME_VAR: &str = "CONTROL_TEST_CHILD_FRAME";

/// Not a test on its own: the body of the other-uid child (see the module documentation). It
/// does nothing unless the parent test set its variables.
#[test]
fn other_uid_child() {
    let (Ok(path), Ok(frame_hex)) = (
        std::env::var(CHILD_SOCKET_VAR),
        std::env::var(CHILD_FRAME_VAR),
    ) else {
        return;
    };
    let bytes: Vec<u8> = (0..frame_hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&frame_hex[i..i + 2], 16).unwrap())
        .collect();
    let uid = nix::unistd::geteuid().as_raw();
    match std::os::unix::net::UnixStream::connect(&path) {
        Ok(mut stream) => {
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            // The server refuses at accept, without reading: our write may hit a closed
            // socket (EPIPE) and the read ends with ECONNRESET after its answer.
            let _ = stream.write_all(&bytes);
            let mut answer = Vec::new();
            let mut buffer = [0u8; 4096];
            while let Ok(n @ 1..) = stream.read(&mut buffer) {
                answer.extend_from_slice(&buffer[..n]);
            }
            println!("child-uid:{uid}");
            println!("child-answer:{}", agentprism::util::hex(&answer));
        }
        Err(error) => println!("child-connect-error:{uid}:{error}"),
    }
}

#[tokio::test]
async fn a_peer_of_another_uid_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: only root can start a process of another uid");
        return;
    }
    const NOBODY: u32 = 65534;
    let temp = tempfile::tempdir().unwrap();
    let folder = temp.path().join("ctl");
    std::fs::create_dir(&folder).unwrap();
    let key = RunControlKey::from_bytes([0x44; 32]);
    let server =
        ControlServer::bind_at(&folder.join("ctl.sock"), server_identity(), key.clone()).unwrap();
    let path = server.path().to_path_buf();
    // Loosen the temp copy so the filesystem lets `nobody` reach the socket: the refusal must
    // come from the server's uid check.
    for dir in [temp.path(), folder.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let handler = Arc::new(CountingHandler {
        calls: AtomicUsize::new(0),
    });
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(server.serve(handler.clone(), shutdown.clone()));

    let request = Request::sign(
        &key,
        kinds::SHUTDOWN,
        SERVER_ID,
        &client_identity(),
        agentprism::util::now_ms(),
        &new_nonce().unwrap(),
        "op-uid",
        "{}".into(),
    );
    let bytes = frame(&serde_json::to_vec(&request).unwrap());
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "--exact",
            "control::other_uid_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_SOCKET_VAR, &path)
        .env(CHILD_FRAME_VAR, agentprism::util::hex(&bytes))
        .current_dir("/")
        .stdin(std::process::Stdio::null());
    crate::support::context::run_as(&mut child, NOBODY);
    let output = tokio::task::spawn_blocking(move || child.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(&format!("child-uid:{NOBODY}")), "{stdout}");
    let answer = stdout
        .lines()
        .find_map(|line| line.strip_prefix("child-answer:"))
        .unwrap_or_else(|| panic!("the child did not get an answer: {stdout}"));
    assert_eq!(answer, agentprism::util::hex(&refusal_frame()));
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0);

    // The same bytes from our own uid are accepted: the frame was valid, only the uid differed.
    let ours = raw_exchange(&path, &bytes).await;
    let response: Response = serde_json::from_value(unframe(&ours)).unwrap();
    assert!(response.mac_is_valid(&key));
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
    shutdown.cancel();
    served.await.unwrap();
}
