//! The per-user HTTP bearer token, `R/daemons/http-token.json` (mode 0600, beside the
//! run-control key and in its format). A listener that cannot ask the kernel who is on the
//! other end of a connection (not Linux, or no `inet_diag`) requires it on every request; the
//! shim always sends it, and `daemon url` prints host snippets that carry it. It is a secret
//! of its own, so rotating it (delete the file, restart the daemon) leaves the control key be.

use std::sync::OnceLock;

use super::{KeyError, Paths, RunControlKey};

/// The token this process sends, decided once by [`remember`].
static SENT: OnceLock<Option<String>> = OnceLock::new();

/// Decides, once per process, whether its requests to daemons carry the token: only where
/// the kernel cannot name a connection's user (`needed`), so a token never travels where the
/// listener does not ask for it.
pub(crate) fn remember(paths: &Paths, needed: bool) {
    SENT.get_or_init(|| needed.then(|| load_or_create(paths).ok()).flatten());
}

/// The token to send as `Authorization: Bearer`, if [`remember`] decided on one.
pub(crate) fn sent() -> Option<&'static str> {
    SENT.get().and_then(Option::as_deref)
}

/// The token, created on first use. A doubtful file is an error: the caller then has no token
/// and its listener accepts no token-authenticated request (fail closed).
pub(crate) fn load_or_create(paths: &Paths) -> Result<String, KeyError> {
    RunControlKey::load_or_create_at(paths, paths.http_token()).map(|key| key.to_bearer())
}

/// The token if one exists and is sound.
#[cfg(test)]
fn load(paths: &Paths) -> Option<String> {
    RunControlKey::load(&paths.http_token())
        .ok()
        .map(|key| key.to_bearer())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn created_once_private_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(dir.path());
        assert_eq!(load(&paths), None);
        let token = load_or_create(&paths).unwrap();
        assert_eq!(token.len(), 43, "32 bytes, base64url unpadded");
        assert_eq!(load(&paths).as_deref(), Some(token.as_str()));
        assert_eq!(load_or_create(&paths).unwrap(), token);
        let mode = std::fs::metadata(paths.http_token())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let key = RunControlKey::load_or_create(&paths).unwrap();
        assert_ne!(key.to_bearer(), token, "the token is not the control key");
    }

    #[test]
    fn a_widened_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(dir.path());
        load_or_create(&paths).unwrap();
        std::fs::set_permissions(paths.http_token(), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert_eq!(load(&paths), None);
        assert!(load_or_create(&paths).is_err());
    }
}
