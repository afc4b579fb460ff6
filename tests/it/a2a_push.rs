//! A2A push notifications to an `https://` webhook: the server checks the webhook's
//! certificate against the roots the platform names (here `SSL_CERT_FILE`, a certificate
//! authority the test makes) and delivers over TLS, token included; a webhook whose
//! certificate no root vouches for gets nothing. Deliveries go on through a checkpoint: the
//! webhook hears the task wait for input, and, once a message answers it, complete.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::{Value, json};

use crate::a2a::{Receiver, call, read_request};
use crate::serve::{Served, copy_folder, fixtures, wait_until};
use crate::support::context::TestContext;

/// A TLS webhook on loopback whose certificate for `localhost` is signed by a fresh CA; the
/// CA's PEM, and every request it read.
struct TlsReceiver {
    port: u16,
    ca_pem: String,
    posts: Arc<Mutex<Vec<(String, Value)>>>,
}

impl TlsReceiver {
    fn start() -> TlsReceiver {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "webhook test CA");
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let chain = vec![cert.der().clone()];
        let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let posts = Arc::new(Mutex::new(Vec::new()));
        let record = posts.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                let Ok(connection) = rustls::ServerConnection::new(config.clone()) else {
                    continue;
                };
                let mut tls = rustls::StreamOwned::new(connection, stream);
                if let Some(post) = read_request(&mut tls) {
                    record.lock().unwrap().push(post);
                    let answer =
                        "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                    let _ = std::io::Write::write_all(&mut tls, answer.as_bytes());
                    let _ = std::io::Write::flush(&mut tls);
                }
            }
        });
        TlsReceiver {
            port,
            ca_pem,
            posts,
        }
    }
}

/// Starts an `echo` task with a webhook of `url` in its `configuration`.
fn echo_with_webhook(server: &Served, url: &str) -> String {
    let answer = call(
        server,
        &[],
        None,
        "message/send",
        json!({
            "message": {"messageId": "m", "role": "user", "parts": [],
                        "metadata": {"skill": "echo", "input": {"text": "pushed"}}},
            "configuration": {"pushNotificationConfig": {"url": url, "token": "tls-token"}},
        }),
    );
    answer["result"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {answer}"))
        .to_owned()
}

#[test]
fn an_https_webhook_gets_the_task_over_tls_and_an_untrusted_one_gets_nothing() {
    let trusted = TlsReceiver::start();
    let untrusted = TlsReceiver::start();
    let mut ctx = TestContext::new();
    let roots = ctx.path("webhook-ca.pem");
    std::fs::write(&roots, &trusted.ca_pem).unwrap();
    ctx.env
        .insert("SSL_CERT_FILE".to_owned(), roots.display().to_string());
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let allow = format!(
        "https://localhost:{}/hooks/,https://localhost:{}/hooks/",
        trusted.port, untrusted.port
    );
    let server = Served::start(&ctx, &folder, &["--a2a-push-allow", &allow]);

    let refused = echo_with_webhook(
        &server,
        &format!("https://localhost:{}/hooks/a", untrusted.port),
    );
    let task = echo_with_webhook(
        &server,
        &format!("https://localhost:{}/hooks/a", trusted.port),
    );
    wait_until("the trusted webhook receiving the completed task", || {
        trusted.posts.lock().unwrap().iter().any(|(_, body)| {
            (body["id"] == task.as_str() || body["taskId"] == task.as_str())
                && body["status"]["state"] == "completed"
        })
    });
    for (head, body) in trusted.posts.lock().unwrap().iter() {
        assert!(head.starts_with("post /hooks/a "), "{head}");
        assert!(
            head.contains("x-a2a-notification-token: tls-token"),
            "{head}"
        );
        assert!(body.to_string().contains(&task), "{body}");
    }
    let stopped = server.stop();
    assert!(
        untrusted.posts.lock().unwrap().is_empty(),
        "a webhook no root vouches for gets nothing"
    );
    assert!(
        stopped.stderr.contains(&refused)
            && stopped.stderr.contains("push notification failed: TLS"),
        "the refused deliveries are logged:\n{}",
        stopped.stderr
    );
}

#[test]
fn pushes_go_on_through_a_checkpoint_answered_by_a_message() {
    let receiver = Receiver::start();
    let ctx = TestContext::new();
    let folder = copy_folder(&ctx, &fixtures(), "workflows");
    let allow = format!("http://{}/hooks/", receiver.address);
    let server = Served::start(&ctx, &folder, &["--a2a-push-allow", &allow]);
    let started = call(
        &server,
        &[],
        None,
        "message/send",
        json!({
            "message": {"messageId": "m1", "role": "user", "parts": [],
                        "metadata": {"skill": "approval", "input": {"request": "ship"}}},
            "configuration": {"pushNotificationConfig": {"url": format!("{allow}gate")}},
        }),
    );
    let task = started["result"]["id"].as_str().expect("a task").to_owned();
    let state_pushed =
        |state: &str| {
            receiver.posts.lock().unwrap().iter().any(|(_, body)| {
                body["kind"] == "status-update" && body["status"]["state"] == state
            })
        };
    wait_until("the webhook hearing the task wait for input", || {
        state_pushed("input-required")
    });
    let answered = call(
        &server,
        &[],
        None,
        "message/send",
        json!({"message": {"messageId": "m2", "role": "user", "taskId": task,
                           "parts": [{"kind": "text", "text": "yes"}]}}),
    );
    assert_eq!(answered["result"]["id"], task.as_str(), "{answered}");
    wait_until("the webhook hearing the task complete", || {
        state_pushed("completed")
    });
    let posts = receiver.posts.lock().unwrap().clone();
    let waiting = posts
        .iter()
        .find(|(_, body)| body["status"]["state"] == "input-required")
        .unwrap();
    assert_eq!(
        waiting.1["final"], false,
        "the checkpoint does not end the pushes: {posts:?}"
    );
    let done = posts
        .iter()
        .find(|(_, body)| body["kind"] == "artifact-update")
        .expect("the result artifact pushed");
    let result: Value =
        serde_json::from_str(done.1["artifact"]["parts"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(result["approved"], true, "{result}");
    let last = &posts.last().unwrap().1;
    assert_eq!(last["final"], true, "{last}");
    let stopped = server.stop();
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
}
