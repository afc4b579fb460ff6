use super::*;

fn long(prefix: &str, tail: &str) -> String {
    format!(
        "{}{tail}",
        prefix.repeat(SHARED_PREFIX_BYTES / prefix.len() + 1)
    )
}

#[test]
fn prompts_alike_share_a_key_and_short_or_different_ones_do_not() {
    let one = long("shared context ", "question one");
    let two = long("shared context ", "question two");
    let key = PrefixKey::of("claude", Some("sonnet"), &one);
    assert!(key.is_some());
    assert_eq!(key, PrefixKey::of("claude", Some("sonnet"), &two));
    assert_ne!(key, PrefixKey::of("claude", Some("opus"), &two));
    assert_ne!(key, PrefixKey::of("codex", Some("sonnet"), &two));
    // The length-prefixed parts cannot run into each other.
    assert_ne!(
        PrefixKey::of("ab", Some("c"), &one),
        PrefixKey::of("a", Some("bc"), &one)
    );
    let at_bound = "x".repeat(SHARED_PREFIX_BYTES);
    assert!(PrefixKey::of("claude", None, &at_bound).is_some());
    assert_eq!(PrefixKey::of("claude", None, &at_bound[1..]), None);
}

#[tokio::test]
async fn followers_wait_for_the_lead_to_begin_and_later_calls_go_at_once() {
    let hold = PromptCacheHold::new(Duration::from_secs(60));
    let key = PrefixKey::of("claude", None, &long("p", "")).unwrap();
    let Turn::Lead(mut lead) = hold.enter(Some(key), 0) else {
        panic!("the first call leads");
    };
    let Turn::Follow(mut follow) = hold.enter(Some(key), 1) else {
        panic!("the second call follows");
    };
    assert_eq!(follow.lead(), 0);
    let waiting = tokio::spawn(async move { follow.wait().await });
    tokio::task::yield_now().await;
    assert!(
        !waiting.is_finished(),
        "a follower goes before its lead began"
    );
    lead.began();
    assert_eq!(waiting.await.unwrap(), Waited::Released);
    assert!(matches!(hold.enter(Some(key), 2), Turn::Alone), "warm");
    drop(lead);
    assert!(
        matches!(hold.enter(Some(key), 3), Turn::Alone),
        "still warm"
    );
    assert!(
        matches!(hold.enter(None, 4), Turn::Alone),
        "no shared prefix"
    );
}

#[tokio::test]
async fn a_lead_ended_while_something_still_holds_it_releases_its_followers() {
    let hold = PromptCacheHold::new(Duration::from_secs(60));
    let key = PrefixKey::of("claude", None, &long("s", "")).unwrap();
    let Turn::Lead(lead) = hold.enter(Some(key), 0) else {
        panic!("leads");
    };
    let shared = std::sync::Arc::new(std::sync::Mutex::new(lead));
    let kept = shared.clone();
    let Turn::Follow(mut follow) = hold.enter(Some(key), 1) else {
        panic!("follows");
    };
    shared.locked().end();
    assert_eq!(follow.wait().await, Waited::Released);
    assert!(
        matches!(hold.enter(Some(key), 2), Turn::Lead(_)),
        "cold again"
    );
    drop(kept);
}

#[tokio::test]
async fn a_lead_that_ends_before_its_answer_releases_and_the_next_call_leads() {
    let hold = PromptCacheHold::new(Duration::from_secs(60));
    let key = PrefixKey::of("claude", None, &long("q", "")).unwrap();
    let Turn::Lead(lead) = hold.enter(Some(key), 0) else {
        panic!("leads");
    };
    let Turn::Follow(mut follow) = hold.enter(Some(key), 1) else {
        panic!("follows");
    };
    drop(lead);
    assert_eq!(follow.wait().await, Waited::Released);
    assert!(
        matches!(hold.enter(Some(key), 2), Turn::Lead(_)),
        "cold again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_follower_waits_at_most_the_cap_and_a_zero_hold_is_off() {
    let hold = PromptCacheHold::new(Duration::from_millis(1500));
    let key = PrefixKey::of("claude", None, &long("r", "")).unwrap();
    let Turn::Lead(_lead) = hold.enter(Some(key), 0) else {
        panic!("leads");
    };
    let Turn::Follow(mut follow) = hold.enter(Some(key), 1) else {
        panic!("follows");
    };
    let started = tokio::time::Instant::now();
    assert_eq!(follow.wait().await, Waited::Capped);
    assert_eq!(started.elapsed(), Duration::from_millis(1500));

    let off = PromptCacheHold::new(Duration::ZERO);
    assert!(matches!(off.enter(Some(key), 0), Turn::Alone));
    assert!(matches!(off.enter(Some(key), 1), Turn::Alone));
}

#[test]
fn the_warm_prefixes_are_bounded() {
    let hold = PromptCacheHold::new(Duration::from_secs(1));
    let keys: Vec<PrefixKey> = (0..=MAX_WARM_PREFIXES)
        .map(|n| PrefixKey::of("claude", None, &long(&format!("{n:05} "), "")).unwrap())
        .collect();
    for (index, key) in keys.iter().enumerate() {
        let Turn::Lead(mut lead) = hold.enter(Some(*key), index as u32) else {
            panic!("each new prefix leads");
        };
        lead.began();
    }
    let book = hold.state.locked();
    assert_eq!(book.warm.len(), MAX_WARM_PREFIXES);
    assert!(book.leading.is_empty());
    assert!(!book.warm.contains(&keys[0]), "the oldest is forgotten");
    drop(book);
    assert!(matches!(hold.enter(Some(keys[0]), 0), Turn::Lead(_)));
}

#[test]
fn the_variable_is_read_within_bounds() {
    let name = "AGENTPRISM_PROMPT_CACHE_HOLD_MS";
    assert_eq!(hold_from(None, name), Ok(DEFAULT_HOLD));
    assert_eq!(hold_from(Some("0"), name), Ok(Duration::ZERO));
    assert_eq!(hold_from(Some("120000"), name), Ok(MAX_HOLD));
    let over = hold_from(Some("120001"), name).unwrap_err();
    assert!(over.contains(name) && over.contains("120000"), "{over}");
    let bad = hold_from(Some("soon"), name).unwrap_err();
    assert!(bad.contains(name) && bad.contains("\"soon\""), "{bad}");
}
