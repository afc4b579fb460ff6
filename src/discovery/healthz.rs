//! The identity half of a `/healthz` probe (daemon.md 1.4b), without the HTTP: the URL a shim
//! asks with a fresh challenge, and the check of the answer against the record that led there.
//! Name, pid, instanceId and envFingerprint must match and `proof` must be the HMAC of the
//! challenge, so a process that took over the recorded port cannot pass for the daemon.

use serde_json::Value;

use super::DaemonRecord;
use super::key::{RunControlKey, new_nonce, verify_healthz_proof};
use super::record::DAEMON_NAME;

/// How long a shim waits for `/healthz` before calling the daemon unresponsive.
pub(crate) const HEALTHZ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A challenge for one probe: the nonce and the URL carrying it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub nonce: String,
    /// `http://127.0.0.1:<port>/healthz?challenge=<nonce>`.
    pub url: String,
}

/// Why a `/healthz` answer does not identify the recorded daemon.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityMismatch {
    #[error("healthz field {field} is {got}, the record says {expected}")]
    Field {
        field: &'static str,
        expected: String,
        got: String,
    },
    #[error("healthz proof does not match the run-control key")]
    Proof,
}

impl Challenge {
    /// A fresh challenge for the daemon listening on `port`.
    pub fn new(port: u16) -> Challenge {
        let nonce = new_nonce();
        let url = format!("http://127.0.0.1:{port}/healthz?challenge={nonce}");
        Challenge { nonce, url }
    }
}

/// Checks a `/healthz` JSON body against `record` and this challenge.
pub fn verify_identity(
    record: &DaemonRecord,
    body: &Value,
    key: &RunControlKey,
    nonce: &str,
) -> Result<(), IdentityMismatch> {
    let expect = |field: &'static str, expected: Value| {
        let got = body.get(field).cloned().unwrap_or(Value::Null);
        if got == expected {
            Ok(())
        } else {
            Err(IdentityMismatch::Field {
                field,
                expected: expected.to_string(),
                got: got.to_string(),
            })
        }
    };
    expect("name", DAEMON_NAME.into())?;
    expect("pid", record.pid.into())?;
    expect("instanceId", record.instance_id.as_str().into())?;
    expect("envFingerprint", record.env_fingerprint.as_str().into())?;
    let proof = body
        .get("proof")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if verify_healthz_proof(key, &record.instance_id, nonce, proof) {
        Ok(())
    } else {
        Err(IdentityMismatch::Proof)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::discovery::healthz_proof;
    use crate::discovery::record::sample;

    #[test]
    fn answers_are_checked_field_by_field_and_by_proof() {
        let record = sample(10, "inst", "0.1.0");
        let key = RunControlKey::from_bytes([3; 32]);
        let challenge = Challenge::new(record.port);
        assert!(
            challenge
                .url
                .ends_with(&format!("/healthz?challenge={}", challenge.nonce))
        );
        let good = json!({
            "name": "agentprism-daemon", "pid": 10, "instanceId": "inst",
            "envFingerprint": record.env_fingerprint, "version": "0.1.0",
            "proof": healthz_proof(&key, "inst", &challenge.nonce),
        });
        assert_eq!(
            verify_identity(&record, &good, &key, &challenge.nonce),
            Ok(())
        );
        for (field, value) in [
            ("name", json!("other")),
            ("pid", json!(11)),
            ("instanceId", json!("x")),
            ("envFingerprint", json!("f")),
        ] {
            let mut bad = good.clone();
            bad[field] = value;
            assert!(
                matches!(verify_identity(&record, &bad, &key, &challenge.nonce), Err(IdentityMismatch::Field { field: f, .. }) if f == field)
            );
        }
        // A replayed proof for another challenge, a missing proof, another key.
        assert_eq!(
            verify_identity(&record, &good, &key, "other-nonce"),
            Err(IdentityMismatch::Proof)
        );
        let mut unproven = good.clone();
        unproven.as_object_mut().unwrap().remove("proof");
        assert_eq!(
            verify_identity(&record, &unproven, &key, &challenge.nonce),
            Err(IdentityMismatch::Proof)
        );
        let other_key = RunControlKey::from_bytes([4; 32]);
        assert_eq!(
            verify_identity(&record, &good, &other_key, &challenge.nonce),
            Err(IdentityMismatch::Proof)
        );
    }
}
