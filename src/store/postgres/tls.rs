//! TLS to PostgreSQL with libpq's meanings (docs/store.md, "Connecting over TLS"): the
//! `sslmode`, `sslrootcert`, `sslcert` and `sslkey` of the connection URL, else the `PGSSL*`
//! variables, else libpq's files under `~/.postgresql/`, on rustls; and `PGUSER`,
//! `PGPASSWORD` and `PGDATABASE` where the URL names no user, password or database.
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `prefer` (the default) | when the server offers it, else plain | not checked |
//! | `require` | always | not checked; checked as `verify-ca` when a root certificate file is given or `~/.postgresql/root.crt` exists |
//! | `verify-ca` | always | signed by a root certificate |
//! | `verify-full` | always | signed by a root certificate and issued for the host connected to |
//!
//! `allow` (plain first, TLS if the server insists) is refused: the driver cannot fall back
//! that way round. `sslrootcert=system` is the platform's roots and needs `verify-full`, as
//! in libpq. A client key must not be readable by other users (0600; 0640 if root owns it).
//! No error names a password or shows a key's bytes.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, DigitallySignedStruct, Error as TlsError, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::store::{StoreError, StoreResult};

/// The `PG*` variables (and `HOME`, for `~/.postgresql/`) a store connection reads, captured
/// by the composition root; empty in tests that give everything in the URL.
#[derive(Clone, Debug, Default)]
pub struct PgEnvironment {
    vars: Vec<(String, String)>,
}

/// The variables [`PgEnvironment`] keeps.
const PG_VARIABLES: &[&str] = &[
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
    "PGUSER",
    "PGPASSWORD",
    "PGDATABASE",
    "HOME",
];

impl PgEnvironment {
    /// The [`PG_VARIABLES`] among `pairs`.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> PgEnvironment {
        PgEnvironment {
            vars: pairs
                .into_iter()
                .filter(|(name, value)| PG_VARIABLES.contains(name) && !value.is_empty())
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// libpq's default file `~/.postgresql/<name>`, when it exists.
    fn default_file(&self, name: &str) -> Option<PathBuf> {
        let path = Path::new(self.get("HOME")?).join(".postgresql").join(name);
        path.exists().then_some(path)
    }
}

/// The TLS settings of a store URL once read: the mode, and what it checks with.
pub(super) struct TlsSettings {
    pub mode: SslMode,
    pub connector: MakeRustlsConnect,
}

/// Splits the TLS parameters off `url` (the URL form; a key=value string keeps its own,
/// which the driver reads), applies the `PG*` variables the URL leaves open to `config`,
/// and builds the connector. `url` is returned without the parameters the driver does not
/// know.
pub(super) fn read(url: &str, env: &PgEnvironment) -> StoreResult<(String, TlsSettings)> {
    let (stripped, taken) = take_parameters(url, &["sslmode", "sslrootcert", "sslcert", "sslkey"]);
    let given = |name: &str, variable: &str| -> Option<String> {
        taken
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
            .or_else(|| env.get(variable).map(str::to_owned))
    };
    let root = given("sslrootcert", "PGSSLROOTCERT");
    let mode_text = given("sslmode", "PGSSLMODE");
    let mode = match (mode_text.as_deref(), root.as_deref()) {
        (None, Some("system")) => Mode::VerifyFull,
        (None, _) => Mode::Prefer,
        (Some(text), _) => Mode::parse(text)?,
    };
    if root.as_deref() == Some("system") && mode != Mode::VerifyFull {
        return Err(refused(
            "sslrootcert=system (the platform's roots) needs sslmode=verify-full",
        ));
    }
    let root_file = match root.as_deref() {
        Some("system") => None,
        Some(path) => Some(PathBuf::from(path)),
        None => env.default_file("root.crt"),
    };
    let check = match mode {
        Mode::Disable | Mode::Prefer => Check::Nothing,
        Mode::Require if root_file.is_none() => Check::Nothing,
        Mode::Require | Mode::VerifyCa => Check::Chain,
        Mode::VerifyFull => Check::ChainAndName,
    };
    let roots = match (check, root.as_deref()) {
        (Check::Nothing, _) => RootCertStore::empty(),
        (_, Some("system")) => system_roots()?,
        _ => {
            let file = root_file.ok_or_else(|| {
                refused(&format!(
                    "sslmode={} needs a root certificate: sslrootcert in the URL, PGSSLROOTCERT, or ~/.postgresql/root.crt",
                    mode.name()
                ))
            })?;
            roots_from(&file)?
        }
    };
    let cert = given("sslcert", "PGSSLCERT")
        .map(PathBuf::from)
        .or_else(|| env.default_file("postgresql.crt"));
    let key = given("sslkey", "PGSSLKEY")
        .map(PathBuf::from)
        .or_else(|| env.default_file("postgresql.key"));
    let config = client_config(check, roots, client_identity(cert, key)?)?;
    Ok((
        stripped,
        TlsSettings {
            mode: mode.driver_mode(),
            connector: MakeRustlsConnect::new(config),
        },
    ))
}

/// Fills what `config` leaves open from the `PG*` variables, as libpq does: the user, the
/// password and the database. (The host and port are the URL's: every store location is a
/// URL with a host.)
pub(super) fn apply_environment(config: &mut tokio_postgres::Config, env: &PgEnvironment) {
    if config.get_user().is_none()
        && let Some(user) = env.get("PGUSER")
    {
        config.user(user);
    }
    if config.get_password().is_none()
        && let Some(password) = env.get("PGPASSWORD")
    {
        config.password(password);
    }
    if config.get_dbname().is_none()
        && let Some(name) = env.get("PGDATABASE")
    {
        config.dbname(name);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(text: &str) -> StoreResult<Mode> {
        match text {
            "disable" => Ok(Mode::Disable),
            "prefer" => Ok(Mode::Prefer),
            "require" => Ok(Mode::Require),
            "verify-ca" => Ok(Mode::VerifyCa),
            "verify-full" => Ok(Mode::VerifyFull),
            "allow" => Err(refused(
                "sslmode=allow is not supported (plain first, TLS only if the server insists); use prefer, require or disable",
            )),
            other => Err(refused(&format!(
                "sslmode {other:?} is none of disable, prefer, require, verify-ca, verify-full"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }

    fn driver_mode(self) -> SslMode {
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// What the client checks of the server's certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

fn refused(what: &str) -> StoreError {
    StoreError::Io(format!("PostgreSQL TLS: {what}"))
}

/// `url` without the query parameters `names` (the URL form only), and their decoded values.
fn take_parameters(url: &str, names: &[&str]) -> (String, Vec<(String, String)>) {
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let Some((base, query)) = url.split_once('?').filter(|_| is_url) else {
        return (url.to_owned(), Vec::new());
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if names.contains(&key) {
            taken.push((key.to_owned(), percent_decoded(value)));
        } else {
            kept.push(pair);
        }
    }
    let stripped = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (stripped, taken)
}

/// `%XX` escapes (and `+` as a space) decoded; a malformed escape is kept as written.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex = |byte: u8| (byte as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match (bytes[index], bytes.get(index + 1), bytes.get(index + 2)) {
            (b'%', Some(&high), Some(&low)) if hex(high).is_some() && hex(low).is_some() => {
                out.push((hex(high).unwrap_or(0) * 16 + hex(low).unwrap_or(0)) as u8);
                index += 3;
                continue;
            }
            (b'+', _, _) => out.push(b' '),
            (byte, _, _) => out.push(byte),
        }
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn roots_from(file: &Path) -> StoreResult<RootCertStore> {
    let shown = file.display();
    let mut roots = RootCertStore::empty();
    let certificates = CertificateDer::pem_file_iter(file)
        .map_err(|error| refused(&format!("sslrootcert {shown}: {error}")))?;
    for certificate in certificates {
        let certificate =
            certificate.map_err(|error| refused(&format!("sslrootcert {shown}: {error}")))?;
        roots
            .add(certificate)
            .map_err(|error| refused(&format!("sslrootcert {shown}: {error}")))?;
    }
    if roots.is_empty() {
        return Err(refused(&format!(
            "sslrootcert {shown} holds no PEM certificate"
        )));
    }
    Ok(roots)
}

fn system_roots() -> StoreResult<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(refused(
            "sslrootcert=system: the platform offers no root certificate",
        ));
    }
    Ok(roots)
}

/// The client certificate chain and key, when both are given (or found at libpq's defaults).
type Identity = Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>;

fn client_identity(cert: Option<PathBuf>, key: Option<PathBuf>) -> StoreResult<Identity> {
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert, key),
        (Some(_), None) => return Err(refused("sslcert is given without sslkey")),
        (None, Some(_)) => return Err(refused("sslkey is given without sslcert")),
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .and_then(|certificates| certificates.collect::<Result<_, _>>())
        .map_err(|error| refused(&format!("sslcert {}: {error}", cert.display())))?;
    if chain.is_empty() {
        return Err(refused(&format!(
            "sslcert {} holds no PEM certificate",
            cert.display()
        )));
    }
    check_key_mode(&key)?;
    // The key's own error would not show its bytes, but says only that it did not parse.
    let private = PrivateKeyDer::from_pem_file(&key).map_err(|_| {
        refused(&format!(
            "sslkey {}: no PEM private key (PKCS#1, PKCS#8 or SEC1) could be read",
            key.display()
        ))
    })?;
    Ok(Some((chain, private)))
}

/// libpq's rule for a client key: no access for other users, nor for the group unless root
/// owns the file (and then group read only).
fn check_key_mode(key: &Path) -> StoreResult<()> {
    let metadata = std::fs::metadata(key)
        .map_err(|error| refused(&format!("sslkey {}: {error}", key.display())))?;
    let mode = metadata.mode() & 0o777;
    let allowed = if metadata.uid() == 0 { 0o740 } else { 0o700 };
    if mode & !allowed != 0 {
        return Err(refused(&format!(
            "sslkey {} is open to other users (mode {mode:04o}); it must be 0600 (0640 when root owns it)",
            key.display()
        )));
    }
    Ok(())
}

fn client_config(
    check: Check,
    roots: RootCertStore,
    identity: Identity,
) -> StoreResult<rustls::ClientConfig> {
    // ring builds with a C compiler alone (aws-lc-rs needs cmake); its lack of post-quantum
    // key exchange is what the deprecation says, and PostgreSQL servers offer none anyway.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| refused(&error.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Nothing => Arc::new(Unchecked(provider)),
        Check::Chain | Check::ChainAndName => {
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| refused(&error.to_string()))?;
            if check == Check::Chain {
                Arc::new(ChainOnly(webpki))
            } else {
                webpki
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|error| refused(&format!("sslcert/sslkey: {error}"))),
    }
}

/// `prefer` and `require` without a root certificate: the connection is encrypted, the
/// server not authenticated (libpq's meaning); the handshake's signatures are still checked.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a root; the name in the certificate is not compared.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_leave_the_url_and_are_decoded() {
        let (rest, taken) = take_parameters(
            "postgres://u:p@db/x?sslmode=verify-full&connect_timeout=3&sslrootcert=%2Ftmp%2Fca.pem",
            &["sslmode", "sslrootcert"],
        );
        assert_eq!(rest, "postgres://u:p@db/x?connect_timeout=3");
        assert_eq!(
            taken,
            vec![
                ("sslmode".to_owned(), "verify-full".to_owned()),
                ("sslrootcert".to_owned(), "/tmp/ca.pem".to_owned())
            ]
        );
        let (rest, taken) = take_parameters("host=db sslmode=require", &["sslmode"]);
        assert_eq!((rest.as_str(), taken.len()), ("host=db sslmode=require", 0));
        assert_eq!(percent_decoded("a%zzb%4"), "a%zzb%4");
    }

    #[test]
    fn modes_are_read_with_libpq_meanings_and_refused_with_a_reason() {
        let env = PgEnvironment::default();
        for (url, expected) in [
            ("postgres://db/x", SslMode::Prefer),
            ("postgres://db/x?sslmode=disable", SslMode::Disable),
            ("postgres://db/x?sslmode=require", SslMode::Require),
        ] {
            let (_, settings) = read(url, &env).expect(url);
            assert_eq!(settings.mode, expected, "{url}");
        }
        let error = |url: &str, env: &PgEnvironment| match read(url, env) {
            Err(StoreError::Io(message)) => message,
            other => panic!("{url}: expected a refusal, got {:?}", other.map(|_| ())),
        };
        assert!(error("postgres://db/x?sslmode=allow", &env).contains("sslmode=allow"));
        assert!(error("postgres://db/x?sslmode=bogus", &env).contains("\"bogus\""));
        let needs_root = error("postgres://db/x?sslmode=verify-full", &env);
        assert!(
            needs_root.contains("needs a root certificate"),
            "{needs_root}"
        );
        let system = error("postgres://db/x?sslmode=require&sslrootcert=system", &env);
        assert!(system.contains("needs sslmode=verify-full"), "{system}");
        let from_env = PgEnvironment::from_pairs([("PGSSLMODE", "verify-ca")]);
        assert!(error("postgres://db/x", &from_env).contains("sslmode=verify-ca needs"));
        // The URL wins over the variable.
        let (_, settings) = read("postgres://db/x?sslmode=disable", &from_env).expect("url wins");
        assert_eq!(settings.mode, SslMode::Disable);
        let missing = error(
            "postgres://db/x?sslmode=verify-ca&sslrootcert=/nonexistent/ca",
            &env,
        );
        assert!(missing.contains("/nonexistent/ca"), "{missing}");
    }

    #[test]
    fn the_environment_fills_only_what_the_url_leaves_open() {
        let env = PgEnvironment::from_pairs([
            ("PGUSER", "envuser"),
            ("PGPASSWORD", "envsecret"),
            ("PGDATABASE", "envdb"),
            ("UNRELATED", "x"),
        ]);
        let mut config: tokio_postgres::Config =
            "postgres://urluser@urlhost/urldb".parse().unwrap();
        apply_environment(&mut config, &env);
        assert_eq!(config.get_user(), Some("urluser"));
        assert_eq!(config.get_dbname(), Some("urldb"));
        assert_eq!(config.get_password(), Some(&b"envsecret"[..]));
        let mut config: tokio_postgres::Config = "postgres://urlhost".parse().unwrap();
        apply_environment(&mut config, &env);
        assert_eq!(config.get_user(), Some("envuser"));
        assert_eq!(config.get_dbname(), Some("envdb"));
    }
}
