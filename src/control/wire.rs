//! Control messages on the wire, protocol 1: the frame (u32 big-endian length, then at most
//! [`MAX_FRAME`] bytes of JSON), the request and answer objects, and the exact strings their
//! macs cover. These formats are durable: two daemons of different versions must agree on
//! them, so the tests below pin a frozen sample.
//!
//! A request's mac is `hex(HMAC-SHA256(key, S))` with
//! `S = "agentprism-ctl-req/1\n" + kind + "\n" + to + "\n" + from.instanceId + "\n" + ts +
//! "\n" + nonce + "\n" + op + "\n" + hex(SHA-256(body))`; an answer's is the same over
//! `"agentprism-ctl-resp/1\n" + re + "\n" + from.instanceId + "\n" + ts + "\n" +
//! hex(SHA-256(body))`. `ts` is decimal milliseconds since the epoch, hex is lowercase, `body`
//! is the JSON text exactly as sent (a string field, so no canonicalisation is needed). The
//! distinct domain prefixes keep an answer from ever passing for a request and the reverse.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Identity, MAX_FRAME, PROTOCOL_VERSION, codes};
use crate::discovery::RunControlKey;
use crate::util::{hex, sha256_hex};

/// Domain prefix of the string a request's mac covers.
pub(crate) const REQUEST_DOMAIN: &str = "agentprism-ctl-req/1";
/// Domain prefix of the string an answer's mac covers.
pub(crate) const RESPONSE_DOMAIN: &str = "agentprism-ctl-resp/1";
/// Random bytes in a nonce (before base64url).
pub const NONCE_BYTES: usize = 16;

/// A signed request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// [`PROTOCOL_VERSION`]; a receiver refuses any other.
    pub v: u64,
    /// One of [`super::kinds`].
    pub kind: String,
    /// The addressee's instance id, so a request for one daemon cannot be replayed to another.
    pub to: String,
    pub from: Identity,
    /// Sender's clock, ms since the epoch.
    pub ts: i64,
    /// 16 random bytes, base64url without padding; fresh for every send.
    pub nonce: String,
    /// The operation id: the same across retries of one logical request (idempotency key).
    pub op: String,
    /// The payload as JSON text, signed byte for byte.
    pub body: String,
    /// Lowercase hex HMAC-SHA256 over [`request_signed_string`].
    pub mac: String,
}

/// A signed answer to a verified request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub v: u64,
    /// The request's nonce: ties this answer to that one request.
    pub re: String,
    /// Answerer's clock, ms since the epoch.
    pub ts: i64,
    pub from: Identity,
    /// `{"ok":true,...}` or `{"ok":false,"code":...,"message":...}` as JSON text.
    pub body: String,
    /// Lowercase hex HMAC-SHA256 over [`response_signed_string`].
    pub mac: String,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("frame of {0} bytes is over the {MAX_FRAME}-byte limit")]
    TooLarge(u64),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The string a request's mac covers (see the module documentation).
pub(crate) fn request_signed_string(
    kind: &str,
    to: &str,
    from_instance: &str,
    ts: i64,
    nonce: &str,
    op: &str,
    body: &str,
) -> String {
    format!(
        "{REQUEST_DOMAIN}\n{kind}\n{to}\n{from_instance}\n{ts}\n{nonce}\n{op}\n{}",
        sha256_hex(body.as_bytes())
    )
}

/// The string an answer's mac covers (see the module documentation).
pub(crate) fn response_signed_string(re: &str, from_instance: &str, ts: i64, body: &str) -> String {
    format!(
        "{RESPONSE_DOMAIN}\n{re}\n{from_instance}\n{ts}\n{}",
        sha256_hex(body.as_bytes())
    )
}

impl Request {
    /// A request signed with `key`. `ts` and `nonce` must be fresh for every send.
    #[expect(clippy::too_many_arguments, reason = "one argument per signed field")]
    pub fn sign(
        key: &RunControlKey,
        kind: &str,
        to: &str,
        from: &Identity,
        ts: i64,
        nonce: &str,
        op: &str,
        body: String,
    ) -> Request {
        let signed = request_signed_string(kind, to, &from.instance_id, ts, nonce, op, &body);
        Request {
            v: PROTOCOL_VERSION,
            kind: kind.to_owned(),
            to: to.to_owned(),
            from: from.clone(),
            ts,
            nonce: nonce.to_owned(),
            op: op.to_owned(),
            body,
            mac: hex(&key.mac(signed.as_bytes())),
        }
    }

    /// Whether `mac` is right for the other fields, compared in constant time.
    pub fn mac_is_valid(&self, key: &RunControlKey) -> bool {
        let signed = request_signed_string(
            &self.kind,
            &self.to,
            &self.from.instance_id,
            self.ts,
            &self.nonce,
            &self.op,
            &self.body,
        );
        verify_hex(key, signed.as_bytes(), &self.mac)
    }
}

impl Response {
    /// An answer to the request with nonce `re`, signed with `key`.
    pub fn sign(key: &RunControlKey, re: &str, from: &Identity, ts: i64, body: String) -> Response {
        let signed = response_signed_string(re, &from.instance_id, ts, &body);
        Response {
            v: PROTOCOL_VERSION,
            re: re.to_owned(),
            ts,
            from: from.clone(),
            body,
            mac: hex(&key.mac(signed.as_bytes())),
        }
    }

    /// Whether `mac` is right for the other fields, compared in constant time.
    pub fn mac_is_valid(&self, key: &RunControlKey) -> bool {
        let signed = response_signed_string(&self.re, &self.from.instance_id, self.ts, &self.body);
        verify_hex(key, signed.as_bytes(), &self.mac)
    }
}

/// A fresh nonce: [`NONCE_BYTES`] bytes from the OS, base64url without padding.
pub fn new_nonce() -> std::io::Result<String> {
    let mut bytes = [0u8; NONCE_BYTES];
    getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// Whether `nonce` is well formed: exactly [`NONCE_BYTES`] bytes of base64url.
pub(crate) fn nonce_is_well_formed(nonce: &str) -> bool {
    URL_SAFE_NO_PAD
        .decode(nonce)
        .is_ok_and(|bytes| bytes.len() == NONCE_BYTES)
}

/// The one answer to anything that fails verification, and to other users: unsigned, since
/// the caller is not trusted with a proof made with the key.
pub fn refusal_body() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"ok": false, "code": codes::UNAUTHENTICATED}))
        .expect("a literal serialises")
}

/// Frames `payload`: length prefix and bytes in one buffer, so it goes out in one write.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("callers keep frames under MAX_FRAME");
    let mut framed = Vec::with_capacity(4 + payload.len());
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(payload);
    framed
}

/// Writes one frame and flushes.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    payload: &[u8],
) -> std::io::Result<()> {
    writer.write_all(&frame(payload)).await?;
    writer.flush().await
}

/// Reads one frame. A length over [`MAX_FRAME`] is refused before anything is allocated.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<Vec<u8>, FrameError> {
    let mut prefix = [0u8; 4];
    reader.read_exact(&mut prefix).await?;
    let length = u32::from_be_bytes(prefix);
    if length as usize > MAX_FRAME {
        return Err(FrameError::TooLarge(u64::from(length)));
    }
    let mut payload = vec![0u8; length as usize];
    reader.read_exact(&mut payload).await?;
    Ok(payload)
}

fn verify_hex(key: &RunControlKey, message: &[u8], tag_hex: &str) -> bool {
    match decode_hex(tag_hex) {
        Some(tag) if tag.len() == 32 => key.verify(message, &tag),
        _ => false,
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |byte: u8| (byte as char).to_digit(16).map(|d| d as u8);
    text.as_bytes()
        .chunks(2)
        .map(|pair| Some((digit(pair[0])? << 4) | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_identity() -> Identity {
        Identity {
            instance_id: "2f1c0f4e-8a57-4d0b-9c6e-1b2a3c4d5e6f".into(),
            pid: 4242,
            version: "0.2.0".into(),
        }
    }

    const SAMPLE_TO: &str = "9e8d7c6b-5a49-4837-a261-504f3e2d1c0b";
    const SAMPLE_NONCE: &str = "AAECAwQFBgcICQoLDA0ODw";
    const SAMPLE_OP: &str = "6b1f0a3e-0c4d-4e5f-8a9b-0c1d2e3f4a5b";
    const SAMPLE_BODY: &str = r#"{"action":"stop","runId":"run-1"}"#;

    /// A request frozen when protocol 1 was written. If this test fails, the wire format or
    /// the signed string changed, and daemons of different versions will refuse each other.
    const FROZEN_REQUEST: &str = r#"{"v":1,"kind":"run-control","to":"9e8d7c6b-5a49-4837-a261-504f3e2d1c0b","from":{"instanceId":"2f1c0f4e-8a57-4d0b-9c6e-1b2a3c4d5e6f","pid":4242,"version":"0.2.0"},"ts":1767225600000,"nonce":"AAECAwQFBgcICQoLDA0ODw","op":"6b1f0a3e-0c4d-4e5f-8a9b-0c1d2e3f4a5b","body":"{\"action\":\"stop\",\"runId\":\"run-1\"}","mac":"4fb92554be92a08796a393f75eedee63305b2ac91f15041f8be3e442d40a7c4d"}"#;
    /// Computed independently (Python's `hmac`) when protocol 1 was written.
    const FROZEN_RESPONSE_MAC: &str =
        "e0cf00f16e78070c65201ed689b7ccbf0e42d95445b561f0df8bb36b96497c68";

    fn key() -> RunControlKey {
        RunControlKey::from_bytes(std::array::from_fn(|i| i as u8))
    }

    #[test]
    fn signed_strings_are_exact() {
        assert_eq!(
            request_signed_string("identify", "to", "from", 17, "n", "op", "{}"),
            format!(
                "agentprism-ctl-req/1\nidentify\nto\nfrom\n17\nn\nop\n{}",
                sha256_hex(b"{}")
            )
        );
        assert_eq!(
            response_signed_string("n", "from", -3, ""),
            "agentprism-ctl-resp/1\nn\nfrom\n-3\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn frozen_request_still_verifies() {
        let request: Request = serde_json::from_str(FROZEN_REQUEST).unwrap();
        assert_eq!(request.from, sample_identity());
        assert_eq!(request.body, SAMPLE_BODY);
        assert!(request.mac_is_valid(&key()));
        let resigned = Request::sign(
            &key(),
            "run-control",
            SAMPLE_TO,
            &sample_identity(),
            1_767_225_600_000,
            SAMPLE_NONCE,
            SAMPLE_OP,
            SAMPLE_BODY.into(),
        );
        assert_eq!(resigned, request);
        assert_eq!(serde_json::to_string(&resigned).unwrap(), FROZEN_REQUEST);
        let response = Response::sign(
            &key(),
            SAMPLE_NONCE,
            &sample_identity(),
            1_767_225_600_001,
            r#"{"ok":true,"outcome":"stopped"}"#.into(),
        );
        assert_eq!(response.mac, FROZEN_RESPONSE_MAC);
    }

    #[test]
    fn every_signed_field_matters() {
        let request = Request::sign(
            &key(),
            "run-control",
            SAMPLE_TO,
            &sample_identity(),
            1000,
            SAMPLE_NONCE,
            SAMPLE_OP,
            SAMPLE_BODY.into(),
        );
        assert!(request.mac_is_valid(&key()));
        let other_key = RunControlKey::from_bytes([1; 32]);
        assert!(!request.mac_is_valid(&other_key));
        let tampered: &[fn(&mut Request)] = &[
            |r| r.kind = "shutdown".into(),
            |r| r.to = "someone-else".into(),
            |r| r.from.instance_id = "impostor".into(),
            |r| r.ts += 1,
            |r| r.nonce = "AAECAwQFBgcICQoLDA0OEA".into(),
            |r| r.op = "other-op".into(),
            |r| r.body = r#"{"action":"stop","runId":"run-2"}"#.into(),
            |r| r.body.push(' '),
            |r| r.mac.truncate(62),
            |r| r.mac = "zz".repeat(32),
        ];
        for tamper in tampered {
            let mut copy = request.clone();
            tamper(&mut copy);
            assert!(!copy.mac_is_valid(&key()), "{copy:?}");
        }
        // pid and version are claims, not signed.
        let mut copy = request.clone();
        copy.from.pid = 1;
        assert!(copy.mac_is_valid(&key()));
        // Upper-case hex is the same tag.
        copy.mac = copy.mac.to_uppercase();
        assert!(copy.mac_is_valid(&key()));
    }

    #[test]
    fn a_request_mac_never_passes_as_an_answer_mac() {
        let response = Response::sign(&key(), "n", &sample_identity(), 5, "{}".into());
        assert!(response.mac_is_valid(&key()));
        let mut forged = response.clone();
        forged.re = "m".into();
        assert!(!forged.mac_is_valid(&key()));
        let mut forged = response.clone();
        forged.body = r#"{"ok":true}"#.into();
        assert!(!forged.mac_is_valid(&key()));
    }

    #[test]
    fn nonces_are_sixteen_random_bytes() {
        let a = new_nonce().unwrap();
        let b = new_nonce().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 22);
        assert!(nonce_is_well_formed(&a));
        assert!(nonce_is_well_formed(SAMPLE_NONCE));
        assert!(!nonce_is_well_formed("AAEC"));
        assert!(!nonce_is_well_formed("AAECAwQFBgcICQoLDA0ODw=="));
        assert!(!nonce_is_well_formed("not base64 at all!!!!!"));
    }

    #[tokio::test]
    async fn frames_round_trip_and_oversize_is_refused() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            write_frame(&mut a, b"{\"x\":1}").await.unwrap();
            a
        });
        assert_eq!(read_frame(&mut b).await.unwrap(), b"{\"x\":1}");
        drop(writer.await.unwrap());

        let too_long = ((MAX_FRAME + 1) as u32).to_be_bytes();
        let mut reader: &[u8] = &too_long;
        assert!(matches!(
            read_frame(&mut reader).await,
            Err(FrameError::TooLarge(n)) if n == MAX_FRAME as u64 + 1
        ));
        let mut truncated: &[u8] = &[0, 0, 0, 9, b'{'];
        assert!(matches!(
            read_frame(&mut truncated).await,
            Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof
        ));
        assert_eq!(
            refusal_body(),
            br#"{"ok":false,"code":"UNAUTHENTICATED"}"#.to_vec()
        );
    }
}
