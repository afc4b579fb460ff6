//! The env fingerprint that splits daemons into families (daemon.md 1.2). The daemon resolves
//! its configuration from the environment once, so a shim whose relevant environment differs
//! must get a daemon of its own: the fingerprint hashes every variable that can change what a
//! daemon does, and nothing else. PATH, HOME and credentials are left out on purpose: the
//! family's first shim fixes them for the daemon's life.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use sha2::{Digest, Sha256};

use crate::env;
#[cfg(test)]
use crate::env::EnvSnapshot;

/// Variables with these prefixes are hashed.
pub(crate) const PREFIXES: [&str; 4] = ["AGENTPRISM_", "OPENCODE_ACP_", "PI_ACP_", "CODEX_ACP_"];

/// Variables left out although their prefix matches: they tune lifetimes or diagnostics of a
/// daemon, not what it computes, so shims differing only in them share one daemon.
/// `AGENTPRISM_LOG` only changes what is logged, and `AGENTPRISM_TEST_VERSION` is the version
/// (which differs between generations of one family), hence they are here too.
pub(crate) const EXCLUDED: [&str; 4] = [
    env::DAEMON_IDLE_TTL_MS,
    env::SESSION_TTL_MS,
    env::LOG,
    env::TEST_VERSION,
];

/// Hex digits of SHA-256 kept in a fingerprint.
pub(crate) const LENGTH: usize = 16;

/// The fingerprint of the calling process's environment. Reads `vars_os`, so variables that
/// are not UTF-8 count too (by their bytes).
pub fn current_fingerprint() -> String {
    fingerprint_of(std::env::vars_os())
}

/// The fingerprint of a snapshot. A snapshot has dropped non-UTF-8 values, so prefer
/// [`current_fingerprint`] for the live process.
#[cfg(test)]
pub(crate) fn fingerprint_of_snapshot(env: &EnvSnapshot) -> String {
    fingerprint_of(
        env.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    )
}

/// First [`LENGTH`] hex digits of SHA-256 over the `KEY=VALUE` lines of the relevant
/// variables, sorted bytewise and joined by `\n`. An empty value is a line (`KEY=`), an unset
/// variable is no line, so the two differ.
pub fn fingerprint_of(pairs: impl IntoIterator<Item = (OsString, OsString)>) -> String {
    let mut lines: Vec<Vec<u8>> = pairs
        .into_iter()
        .filter(|(key, _)| is_relevant(key.as_bytes()))
        .map(|(key, value)| {
            let mut line = key.as_bytes().to_vec();
            line.push(b'=');
            line.extend_from_slice(value.as_bytes());
            line
        })
        .collect();
    lines.sort();
    let digest = Sha256::digest(lines.join(&b'\n'));
    let mut hex = crate::util::hex(&digest);
    hex.truncate(LENGTH);
    hex
}

/// Whether a variable named `key` takes part in the fingerprint. Host session markers
/// ([`env::HOST_SESSION_MARKERS`]) never do: no prefix above matches them today, and the
/// explicit check keeps it so if a prefix is ever added. Two host sessions of one user must
/// share a daemon.
pub(crate) fn is_relevant(key: &[u8]) -> bool {
    PREFIXES
        .iter()
        .any(|prefix| key.starts_with(prefix.as_bytes()))
        && !EXCLUDED.iter().any(|excluded| key == excluded.as_bytes())
        && !env::HOST_SESSION_MARKERS
            .iter()
            .any(|marker| key == marker.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt;

    use super::*;

    fn fp(pairs: &[(&str, &str)]) -> String {
        fingerprint_of(
            pairs
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        )
    }

    #[test]
    fn known_value() {
        // sha256("") — nothing relevant set.
        assert_eq!(fp(&[]), "e3b0c44298fc1c14");
        assert_eq!(fp(&[("PATH", "/bin"), ("HOME", "/h")]), "e3b0c44298fc1c14");
        // sha256("AGENTPRISM_A=1\nPI_ACP_X=y")
        let expected = &crate::util::sha256_hex(b"AGENTPRISM_A=1\nPI_ACP_X=y")[..16];
        assert_eq!(fp(&[("PI_ACP_X", "y"), ("AGENTPRISM_A", "1")]), expected);
    }

    #[test]
    fn prefixes_count_others_do_not() {
        let base = fp(&[]);
        for key in [
            "AGENTPRISM_BACKENDS",
            "OPENCODE_ACP_BIN",
            "PI_ACP_ARGS",
            "CODEX_ACP_X",
            "AGENTPRISM_DAEMON_PORT",
            "AGENTPRISM_PERSISTENCE_ROOT",
            "AGENTPRISM_DAEMON_ALLOWED_ORIGINS",
        ] {
            assert_ne!(fp(&[(key, "v")]), base, "{key}");
        }
        for key in [
            "AGENTPRISMX",
            "agentprism_backends",
            "OPENAI_API_KEY",
            "CODEX_HOME",
            "XAGENTPRISM_A",
        ] {
            assert_eq!(fp(&[(key, "v")]), base, "{key}");
        }
    }

    /// What Claude Code exports to the shim about its own session never splits families,
    /// and neither do credentials or the user's `CLAUDE_CODE_*` settings.
    #[test]
    fn host_session_markers_and_credentials_do_not_count() {
        let base = fp(&[("AGENTPRISM_BACKENDS", "{}")]);
        for key in env::HOST_SESSION_MARKERS.iter().copied().chain([
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_USE_BEDROCK",
        ]) {
            assert!(!is_relevant(key.as_bytes()), "{key}");
            assert_eq!(
                fp(&[("AGENTPRISM_BACKENDS", "{}"), (key, "session-1")]),
                base,
                "{key}"
            );
        }
    }

    #[test]
    fn excluded_variables_do_not_count() {
        let base = fp(&[("AGENTPRISM_BACKENDS", "{}")]);
        for key in EXCLUDED {
            assert_eq!(
                fp(&[("AGENTPRISM_BACKENDS", "{}"), (key, "5")]),
                base,
                "{key}"
            );
        }
    }

    #[test]
    fn empty_differs_from_unset_and_order_does_not_matter() {
        assert_ne!(fp(&[("AGENTPRISM_X", "")]), fp(&[]));
        assert_ne!(fp(&[("AGENTPRISM_X", "")]), fp(&[("AGENTPRISM_X", " ")]));
        assert_eq!(
            fp(&[
                ("AGENTPRISM_B", "2"),
                ("AGENTPRISM_A", "1"),
                ("CODEX_ACP_Z", "")
            ]),
            fp(&[
                ("CODEX_ACP_Z", ""),
                ("AGENTPRISM_A", "1"),
                ("AGENTPRISM_B", "2")
            ]),
        );
        // A value can't masquerade as a second line boundary shift: K=V pairs stay distinct.
        assert_ne!(
            fp(&[("AGENTPRISM_A", "1"), ("AGENTPRISM_B", "2")]),
            fp(&[("AGENTPRISM_A", "12")])
        );
    }

    #[test]
    fn non_utf8_values_are_hashed_by_their_bytes() {
        let raw = |bytes: &[u8]| {
            fingerprint_of([(
                OsString::from("AGENTPRISM_ROOTISH"),
                OsString::from_vec(bytes.to_vec()),
            )])
        };
        assert_ne!(raw(b"/data/\xff"), raw(b"/data/\xfe"));
        assert_ne!(raw(b"/data/\xff"), fp(&[]));
        let expected = &crate::util::sha256_hex(b"AGENTPRISM_ROOTISH=/data/\xff")[..16];
        assert_eq!(raw(b"/data/\xff"), expected);
    }

    #[test]
    fn snapshot_agrees_with_pairs() {
        let env = EnvSnapshot::from_pairs([("AGENTPRISM_A", "1"), ("HOME", "/h")]);
        assert_eq!(fingerprint_of_snapshot(&env), fp(&[("AGENTPRISM_A", "1")]));
    }
}
