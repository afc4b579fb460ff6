//! Tests of the redaction of secrets.

#[test]
fn the_fast_path_skips_only_texts_no_pass_changes() {
    let shortest = PREFIXES.iter().map(|p| p.len()).min().unwrap() + 16;
    assert_eq!(SHORTEST_SECRET_WORD, shortest);
    // At the edge: 18 word bytes behind `sk-` cannot be a token, 19 can.
    let below = format!("sk-{}", "A1".repeat(7) + "B");
    let at = format!("sk-{}", "A1".repeat(8));
    assert_eq!((below.len(), at.len()), (18, 19));
    assert!(cannot_hold_secret(&below));
    assert!(!cannot_hold_secret(&at));
    assert_eq!(redact_text(&at), (REDACTED.to_owned(), true));
    let texts = [
        below.as_str(),
        "agent 3",
        "callIndex",
        "review agent 12",
        "mock",
        "ECHO: p1",
        "Bearer abc123",
        "basic dXNlcjpwYXNz",
        "-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
        "https://user:pw@host",
        "token=abc",
        "password: hunter2",
        "\u{e9}t\u{e9} agent",
        "",
    ];
    for text in texts {
        let full = run_passes(text);
        if cannot_hold_secret(text) {
            assert_eq!(full, (text.to_owned(), false), "{text:?}");
        }
        assert_eq!(redact_text(text), full, "{text:?}");
    }
    for secret in &texts[6..13] {
        assert!(!cannot_hold_secret(secret), "{secret:?}");
        assert!(redact_text(secret).1, "{secret:?}");
    }
}

use super::*;
use serde_json::json;

fn redacted(text: &str) -> String {
    let (out, changed) = redact_text(text);
    assert!(changed, "expected a redaction in {text:?}, got {out:?}");
    assert_eq!(redact_text(&out), (out.clone(), false), "not idempotent");
    out
}

fn kept(text: &str) {
    assert_eq!(redact_text(text), (text.to_owned(), false));
}

#[test]
fn ordinary_prose_survives() {
    kept("");
    kept("The review agent finished phase 2 of 3 in 41 seconds.");
    kept("See /home/user/projects/agentprism/src/engine/redact.rs:42 for details.");
    kept("Use a Bearer token or Basic authentication; basic usage is documented.");
    kept("The bearer of this letter. Bearer tokens expire.");
    kept("password reset flow; the token is valid; secret sauce");
    kept("max_tokens: 1000, inputTokens=750, tokenUsage: 3, token_count=2");
    kept("https://example.com/path?page=2#top and ssh://git@github.com/org/repo.git");
    kept("branch feature-redaction-of-secrets-in-event-logs-2024 is ready");
    kept("test_redacts_bearer_tokens_in_authorization_headers_2 passed");
    kept("if token == expected { return token::Token::new(); }");
    kept("sk-learn-compatible-models-for-everyone and AKIA alone");
    kept("call 12345678901234567890123456789012345 has a long number");
    kept("{\"password\": null, \"token\": true, \"secret\": \"\"}");
    kept("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----");
}

#[test]
fn uuids_and_digests_are_kept() {
    kept("run 123e4567-e89b-12d3-a456-426614174000 started");
    kept("commit 3b211e5c0a9f1d2e4b6c8a0f1e3d5c7b9a1f2e4d");
    kept("sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
    // Uppercase hex is not a digest spelling we show, and 32 hex chars is a common key size.
    assert_eq!(
        redacted("key 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"),
        "key [REDACTED]"
    );
    assert_eq!(
        redacted("id 0123456789abcdef0123456789abcdef"),
        "id [REDACTED]"
    );
}

#[test]
fn pem_private_keys() {
    let text = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY-----\nafter";
    assert_eq!(redacted(text), "before\n[REDACTED]\nafter");
    let text = "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----";
    assert_eq!(redacted(text), "[REDACTED]");
    let text = "x -----BEGIN OPENSSH PRIVATE KEY-----\nabc def";
    assert_eq!(redacted(text), "x [REDACTED]");
}

#[test]
fn bearer_and_basic() {
    assert_eq!(
        redacted("curl -H 'X: Bearer abc123.def' url"),
        "curl -H 'X: Bearer [REDACTED]' url"
    );
    assert_eq!(redacted("bearer AbCdEfGh"), "bearer [REDACTED]");
    assert_eq!(redacted("BEARER tok_1."), "BEARER [REDACTED].");
    // base64("user:pass")
    assert_eq!(redacted("Basic dXNlcjpwYXNz"), "Basic [REDACTED]");
    assert_eq!(redacted("basic dXNlcjpwYXNzd29yZA=="), "basic [REDACTED]");
    // Not user:password once decoded.
    kept("Basic aGVsbG8gd29ybGQ=");
}

#[test]
fn authorization_header_hides_whole_value() {
    assert_eq!(
        redacted("Authorization: Bearer abc123\nnext line"),
        "Authorization: [REDACTED]\nnext line"
    );
    assert_eq!(
        redacted("curl -H \"Authorization: Token xyz\" https://api"),
        "curl -H \"Authorization: [REDACTED]\" https://api"
    );
    assert_eq!(
        redacted("Cookie: sid=abc; theme=dark"),
        "Cookie: [REDACTED]"
    );
}

#[test]
fn url_userinfo() {
    assert_eq!(
        redacted("clone https://user:hunter2@example.com/repo.git now"),
        "clone https://[REDACTED]@example.com/repo.git now"
    );
    assert_eq!(
        redacted("postgres://app:s3cr%40t@db:5432/app"),
        "postgres://[REDACTED]@db:5432/app"
    );
    kept("https://example.com/a@b");
}

#[test]
fn jwts() {
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    assert_eq!(
        redacted(&format!("token {jwt} end")),
        "token [REDACTED] end"
    );
    kept("eyJust a word. eyJhbGciOi. without segments");
}

#[test]
fn key_values() {
    assert_eq!(
        redacted("password=hunter2 next"),
        "password=[REDACTED] next"
    );
    assert_eq!(
        redacted("DB_PASSWORD = hunter2"),
        "DB_PASSWORD = [REDACTED]"
    );
    assert_eq!(redacted("api_key: abc"), "api_key: [REDACTED]");
    assert_eq!(redacted("x-api-key: abc"), "x-api-key: [REDACTED]");
    assert_eq!(redacted("apiKey=abc&page=2"), "apiKey=[REDACTED]&page=2");
    assert_eq!(
        redacted("{\"client_secret\":\"abc\",\"n\":1}"),
        "{\"client_secret\":\"[REDACTED]\",\"n\":1}"
    );
    assert_eq!(
        redacted("{\"access_token\": \"a \\\"quoted\\\" b\"}"),
        "{\"access_token\": \"[REDACTED]\"}"
    );
    assert_eq!(redacted("passwd: 'x y'"), "passwd: '[REDACTED]'");
    assert_eq!(
        redacted("{\\\"privateKey\\\":\\\"abc\\\"}"),
        "{\\\"privateKey\\\":\\\"[REDACTED]\\\"}"
    );
    assert_eq!(redacted("credentials=42"), "credentials=[REDACTED]");
    assert_eq!(redacted("AUTH_TOKEN=xyz"), "AUTH_TOKEN=[REDACTED]");
    assert_eq!(redacted("passphrase: \"open"), "passphrase: \"[REDACTED]");
    assert_eq!(
        redacted("https://api.example.com/cb?token=abc&x=1"),
        "https://api.example.com/cb?token=[REDACTED]&x=1"
    );
}

#[test]
fn known_prefixes() {
    for token in [
        "ghp_ABCDEFGHIJ0123456789abcdefghij012345",
        "gho_16charsAAAA00000",
        "ghu_abcdefgh12345678",
        "ghs_abcdefgh12345678",
        "github_pat_11ABCDEFG0123456789_abcdef",
        "sk-proj-abcdefgh12345678",
        "sk-ant-api03-abcdefgh12345678",
        "xoxb-1234567890-abcdefghij",
        "xoxp-1234567890-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
        "ASIAIOSFODNN7EXAMPLE",
        "AIzaSyA1234567890abcdefghijklmnopqrstu",
        "glpat-abcdefgh12345678XY",
        "npm_abcdefgh12345678abcd",
    ] {
        assert_eq!(
            redacted(&format!("key {token}.")),
            "key [REDACTED].",
            "{token}"
        );
    }
    // A prefix inside a longer word, or too short a tail, is not a token.
    kept("mask-abcdefgh12345678 and ghp_short1");
}

#[test]
fn opaque_tokens() {
    assert_eq!(
        redacted("value a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6 done"),
        "value [REDACTED] done"
    );
    assert_eq!(
        redacted("sk_live_4eC39HqLyjWDarjtT1zdp7dcXYZ"),
        "[REDACTED]"
    );
    // 31 characters is below the threshold.
    kept("a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p");
    // Letters only or digits only are words and numbers.
    kept("abcdefghijklmnopqrstuvwxyzabcdefghij");
}

#[test]
fn redact_value_walks_strings_and_secret_keys() {
    let value = json!({
        "message": "password=hunter2",
        "apiKey": 12345,
        "Authorization": {"scheme": "Bearer"},
        "nested": [{"client_secret": "abc"}, "Bearer abc123xyz"],
        "inputTokens": 750,
        "tokenUsage": {"input": 1},
        "password": null,
        "hasToken": true,
        "count": 3
    });
    let (out, changed) = redact_value(&value);
    assert!(changed);
    assert_eq!(
        out,
        json!({
            "message": "password=[REDACTED]",
            "apiKey": "[REDACTED]",
            "Authorization": "[REDACTED]",
            "nested": [{"client_secret": "[REDACTED]"}, "Bearer [REDACTED]"],
            "inputTokens": 750,
            "tokenUsage": {"input": 1},
            "password": null,
            "hasToken": true,
            "count": 3
        })
    );
    assert_eq!(redact_value(&out), (out.clone(), false));
    let plain = json!({"a": [1, "two", {"b": null}]});
    assert_eq!(redact_value(&plain), (plain.clone(), false));
}

#[test]
fn secret_key_names() {
    for key in [
        "password",
        "Passwd",
        "api_key",
        "API-KEY",
        "apiKey",
        "x-api-key",
        "token",
        "accessToken",
        "refresh_token",
        "tokenId",
        "client_secret",
        "credentials",
        "Authorization",
        "Set-Cookie",
        "private_key",
        "privateKey",
    ] {
        assert!(is_secret_key(key), "{key}");
    }
    for key in [
        "tokens",
        "inputTokens",
        "max_tokens",
        "tokenUsage",
        "token_count",
        "tokenBudget",
        "label",
        "name",
        "key",
        "path",
    ] {
        assert!(!is_secret_key(key), "{key}");
    }
}

#[test]
fn a_secret_key_is_found_at_any_length_and_in_any_script() {
    // ASCII keys up to 64 bytes are normalized on the stack, others as a string: the word
    // counts wherever it ends, on both sides of that edge.
    for pad in [0, 1, 40, 55, 56, 57, 58, 60, 64, 100] {
        let before = "x".repeat(pad);
        assert!(is_secret_key(&format!("{before}Pass_Word")), "{pad}");
        assert!(!is_secret_key(&format!("{before}PassWor")), "{pad}");
        assert!(!is_secret_key(&format!("{before}inputTokens")), "{pad}");
        // Separators are dropped before the length counts against the buffer.
        let separated = format!("{}Token", "_".repeat(pad));
        assert!(is_secret_key(&separated), "{pad}");
    }
    assert!(is_secret_key("ÜberSECRET"));
    assert!(is_secret_key("Zugangs_Token_für_die_API"));
    assert!(!is_secret_key("Überblick"));
}

#[test]
fn large_input_is_linear() {
    // Patterns that would make a naive scanner revisit input: many separators, many
    // scheme words, many `://` and `eyJ` starts, and one huge word.
    let mut text = String::new();
    while text.len() < 1 << 20 {
        text.push_str("token:= Bearer basic eyJ :// -----BEGIN x a=b password ");
    }
    let (out, _) = redact_text(&text);
    assert!(!out.is_empty());
    let huge_word = "a1".repeat(1 << 19);
    assert_eq!(redact_text(&huge_word), (REDACTED.to_owned(), true));
    let colons = ":".repeat(1 << 20);
    assert_eq!(redact_text(&colons), (colons.clone(), false));
    let quotes = "secret=\"".repeat(1 << 17);
    let (out, changed) = redact_text(&quotes);
    assert!(changed);
    assert_eq!(redact_text(&out), (out.clone(), false));
}
