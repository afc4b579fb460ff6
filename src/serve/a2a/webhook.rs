//! One POST of a push notification to a webhook: a fresh connection per delivery (plain TCP,
//! or TLS checked against the platform's root certificates), the JSON body, the token and
//! authorization headers, and an overall deadline. Only the status comes back: a webhook's
//! answer body is never read.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// How long one delivery may take, connection included.
pub(super) const DELIVERY_DEADLINE: Duration = Duration::from_secs(10);

/// Posts `body` to `url` with `headers`; the status, or why there is none.
pub(super) async fn post(
    url: &Uri,
    headers: &[(&str, String)],
    body: Bytes,
) -> Result<u16, String> {
    tokio::time::timeout(DELIVERY_DEADLINE, post_now(url, headers, body))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {DELIVERY_DEADLINE:?}")))
}

async fn post_now(url: &Uri, headers: &[(&str, String)], body: Bytes) -> Result<u16, String> {
    let host = url.host().ok_or("the URL has no host")?;
    let https = url.scheme_str() == Some("https");
    let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
    let host_for_socket = host.trim_start_matches('[').trim_end_matches(']');
    let stream = TcpStream::connect((host_for_socket, port))
        .await
        .map_err(|error| format!("connect: {error}"))?;
    let path = url.path_and_query().map_or("/", |path| path.as_str());
    let authority = url.authority().map_or(host, |authority| authority.as_str());
    let mut request = Request::post(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::CONTENT_LENGTH, body.len());
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let request = request
        .body(Full::new(body))
        .map_err(|error| error.to_string())?;
    if !https {
        return exchange(stream, request).await;
    }
    let name = rustls::pki_types::ServerName::try_from(host_for_socket.to_owned())
        .map_err(|error| format!("the host name: {error}"))?;
    let connector = tokio_rustls::TlsConnector::from(client_config()?);
    let stream = connector
        .connect(name, stream)
        .await
        .map_err(|error| format!("TLS: {error}"))?;
    exchange(stream, request).await
}

async fn exchange<I>(io: I, request: Request<Full<Bytes>>) -> Result<u16, String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|error| error.to_string())?;
    let connection = tokio::spawn(connection);
    let outcome = sender.send_request(request).await;
    connection.abort();
    outcome
        .map(|response| response.status().as_u16())
        .map_err(|error| error.to_string())
}

/// TLS to webhooks, against the platform's root certificates, or those of `SSL_CERT_FILE` /
/// `SSL_CERT_DIR` when set (read once, by rustls-native-certs).
fn client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err("the platform offers no root certificate for https webhooks".into());
            }
            // ring, as the store's TLS uses (it builds with a C compiler alone).
            #[allow(deprecated)]
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|builder| {
                    Arc::new(builder.with_root_certificates(roots).with_no_client_auth())
                })
                .map_err(|error| error.to_string())
        })
        .clone()
}
