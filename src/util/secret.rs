//! Secrets that need not sit in an environment block: a secret variable `NAME` (the pack key,
//! the serve token, the store location with its password) may instead be given as a file, so
//! the value never appears in the process's initial `/proc/<pid>/environ` or in what a
//! supervisor prints of it.
//!
//! A secret comes from exactly one of three places, and two at once are refused (naming both),
//! since the operator meant one of them and we cannot know which:
//!
//! - the variable `NAME` itself (or the command-line flag that stands for it);
//! - `NAME_FILE=<path>`: the file's contents;
//! - a systemd credential named `NAME`: `$CREDENTIALS_DIRECTORY/NAME`, what `LoadCredential=NAME:…`
//!   (or `SetCredentialEncrypted=`) puts there.
//!
//! A file is read through [`crate::util::safe_file`] (regular files only, at most
//! [`MAX_SECRET_BYTES`], symbolic links resolved first so a Kubernetes secret volume works),
//! one trailing line break is dropped, and a file that other users may read or write is
//! refused: the point of the file is that nobody else sees the secret. Errors name the variable
//! and the path, never the contents.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::env::EnvSnapshot;
use crate::util::safe_file::{self, Links};

/// The largest secret file read: a key, a token or a connection URL fits many times over.
pub(crate) const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// The variable systemd sets to the folder of a service's credentials.
pub(crate) const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";

/// Where a secret was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The variable itself, or its command-line flag.
    Variable,
    /// `NAME_FILE`'s file.
    File(PathBuf),
    /// `$CREDENTIALS_DIRECTORY/NAME`.
    Credential(PathBuf),
}

/// Why a secret could not be read. No variant carries the secret.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum SecretError {
    #[error("{name} is given twice, {first} and {second}: give it one way only")]
    Twice {
        name: String,
        first: String,
        second: String,
    },
    #[error("{name}_FILE is empty: expected the path of a file holding {name}")]
    EmptyPath { name: String },
    #[error("{name}: cannot read {path}: {reason}")]
    Unreadable {
        name: String,
        path: String,
        reason: String,
    },
    #[error(
        "{name}: {path} may be read or written by other users (mode {mode:04o}); a secret's file must not be (chmod o-rwx, e.g. 0600 or 0400)"
    )]
    OpenToOthers {
        name: String,
        path: String,
        mode: u32,
    },
    #[error("{name}: {path} is not UTF-8 text")]
    NotText { name: String, path: String },
}

/// Reads the secret `name` from its file or credential, given what the variable (or its
/// flag) already holds: `Ok(None)` when no source has it.
pub(crate) async fn resolve(
    env: &EnvSnapshot,
    name: &str,
    variable: Option<String>,
) -> Result<Option<(String, Origin)>, SecretError> {
    let mut found: Vec<Origin> = Vec::new();
    if variable.is_some() {
        found.push(Origin::Variable);
    }
    let file_variable = format!("{name}_FILE");
    if let Some(path) = env.get(&file_variable) {
        if path.trim().is_empty() {
            return Err(SecretError::EmptyPath {
                name: name.to_owned(),
            });
        }
        found.push(Origin::File(PathBuf::from(path)));
    }
    if let Some(folder) = env.non_empty(CREDENTIALS_DIRECTORY) {
        let path = Path::new(folder).join(name);
        if std::fs::symlink_metadata(&path).is_ok() {
            found.push(Origin::Credential(path));
        }
    }
    match found.as_slice() {
        [] => Ok(None),
        [first, second, ..] => Err(SecretError::Twice {
            name: name.to_owned(),
            first: describe(name, first),
            second: describe(name, second),
        }),
        [Origin::Variable] => Ok(variable.map(|value| (value, Origin::Variable))),
        [origin @ (Origin::File(path) | Origin::Credential(path))] => {
            Ok(Some((read(name, path).await?, origin.clone())))
        }
    }
}

/// How an error names a source.
fn describe(name: &str, origin: &Origin) -> String {
    match origin {
        Origin::Variable => format!("as {name} (or its flag)"),
        Origin::File(path) => format!("as {name}_FILE ({})", path.display()),
        Origin::Credential(path) => format!("as the credential {}", path.display()),
    }
}

/// A secret file's text, without one trailing line break.
async fn read(name: &str, path: &Path) -> Result<String, SecretError> {
    let shown = path.display().to_string();
    let unreadable = |reason: String| SecretError::Unreadable {
        name: name.to_owned(),
        path: shown.clone(),
        reason,
    };
    let absolute = std::path::absolute(path).map_err(|error| unreadable(error.to_string()))?;
    let contents = safe_file::read(&absolute, MAX_SECRET_BYTES, Links::ResolveFirst)
        .await
        .map_err(|error| unreadable(error.to_string()))?;
    let mode = std::fs::metadata(&contents.path)
        .map_err(|error| unreadable(error.to_string()))?
        .permissions()
        .mode();
    if mode & 0o007 != 0 {
        return Err(SecretError::OpenToOthers {
            name: name.to_owned(),
            path: shown,
            mode: mode & 0o7777,
        });
    }
    let mut text = String::from_utf8(contents.bytes).map_err(|_| SecretError::NotText {
        name: name.to_owned(),
        path: shown,
    })?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(folder: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = folder.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn env(pairs: &[(&str, &str)]) -> EnvSnapshot {
        EnvSnapshot::from_pairs(pairs.iter().copied())
    }

    #[tokio::test]
    async fn each_source_alone_is_read_and_two_are_refused() {
        let folder = tempfile::tempdir().unwrap();
        let path = file(folder.path(), "token", "s3cret\n", 0o600);
        let path_text = path.to_str().unwrap();
        let none = resolve(&env(&[]), "X_TOKEN", None).await.unwrap();
        assert_eq!(none, None);
        let from_variable = resolve(&env(&[]), "X_TOKEN", Some("v".into()))
            .await
            .unwrap();
        assert_eq!(from_variable, Some(("v".into(), Origin::Variable)));
        let from_file = resolve(&env(&[("X_TOKEN_FILE", path_text)]), "X_TOKEN", None)
            .await
            .unwrap();
        assert_eq!(
            from_file,
            Some(("s3cret".into(), Origin::File(path.clone())))
        );

        let credentials = tempfile::tempdir().unwrap();
        let credential = file(credentials.path(), "X_TOKEN", "c\r\n", 0o400);
        let folder_text = credentials.path().to_str().unwrap();
        let with_credentials = env(&[(CREDENTIALS_DIRECTORY, folder_text)]);
        assert_eq!(
            resolve(&with_credentials, "X_TOKEN", None).await.unwrap(),
            Some(("c".into(), Origin::Credential(credential)))
        );
        // A credential of another name is not this secret's.
        assert_eq!(resolve(&with_credentials, "Y", None).await.unwrap(), None);

        let both = env(&[
            ("X_TOKEN_FILE", path_text),
            (CREDENTIALS_DIRECTORY, folder_text),
        ]);
        let error = resolve(&both, "X_TOKEN", None).await.unwrap_err();
        assert!(matches!(error, SecretError::Twice { .. }), "{error}");
        let message = resolve(
            &env(&[("X_TOKEN_FILE", path_text)]),
            "X_TOKEN",
            Some("v".into()),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(message.contains("X_TOKEN_FILE"), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
    }

    #[tokio::test]
    async fn a_file_others_may_read_or_a_missing_one_is_refused_without_its_contents() {
        let folder = tempfile::tempdir().unwrap();
        let open = file(folder.path(), "open", "s3cret", 0o604);
        let error = resolve(&env(&[("X_FILE", open.to_str().unwrap())]), "X", None)
            .await
            .unwrap_err();
        assert!(
            matches!(error, SecretError::OpenToOthers { mode: 0o604, .. }),
            "{error}"
        );
        assert!(!error.to_string().contains("s3cret"));
        // Group-readable is allowed: a credential shared with a service's group.
        let group = file(folder.path(), "group", "g", 0o640);
        let read = resolve(&env(&[("X_FILE", group.to_str().unwrap())]), "X", None)
            .await
            .unwrap();
        assert_eq!(read.map(|(text, _)| text), Some("g".to_owned()));

        let missing = folder.path().join("missing");
        let error = resolve(&env(&[("X_FILE", missing.to_str().unwrap())]), "X", None)
            .await
            .unwrap_err();
        assert!(matches!(error, SecretError::Unreadable { .. }), "{error}");
        let empty = resolve(&env(&[("X_FILE", " ")]), "X", None)
            .await
            .unwrap_err();
        assert_eq!(empty, SecretError::EmptyPath { name: "X".into() });
    }

    #[tokio::test]
    async fn a_file_past_the_bound_is_refused() {
        let folder = tempfile::tempdir().unwrap();
        let at_bound = "k".repeat(MAX_SECRET_BYTES as usize);
        let path = file(folder.path(), "big", &at_bound, 0o600);
        let read = resolve(&env(&[("X_FILE", path.to_str().unwrap())]), "X", None)
            .await
            .unwrap();
        assert_eq!(read.map(|(text, _)| text.len()), Some(at_bound.len()));
        let path = file(folder.path(), "bigger", &format!("{at_bound}k"), 0o600);
        let error = resolve(&env(&[("X_FILE", path.to_str().unwrap())]), "X", None)
            .await
            .unwrap_err();
        assert!(matches!(error, SecretError::Unreadable { .. }), "{error}");
    }
}
