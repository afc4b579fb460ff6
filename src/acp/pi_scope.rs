//! pi's `enabledModels`: the model patterns a pi user keeps in pi's own settings, read from
//! where pi reads them and matched the way pi matches them, so a probe can report the models
//! that user chose rather than every model pi holds credentials for. pi-acp lists the latter
//! (its model option is pi's whole authenticated catalog, hundreds of models with an
//! OpenRouter key) and never mentions the former.
//!
//! pi layers two settings files: `<agent dir>/settings.json` (the agent dir is
//! `PI_CODING_AGENT_DIR`, else `~/.pi/agent`) and the project's `<cwd>/.pi/settings.json`, a
//! key of the project file replacing the same key of the global one (a list is replaced
//! whole). A missing file is an empty layer; a file pi cannot parse is skipped, and reported
//! here.
//!
//! Each pattern is matched against the offered models (`provider/id` values):
//! - with `*`, `?` or `[` it is a glob, after a `:<thinking level>` suffix is set aside: an
//!   exact `provider/id` or id first, else every model whose `provider/id` or bare id it
//!   matches, ignoring case, `*` and `?` staying inside one `/`-separated segment, `**` a
//!   whole segment that spans any number of them, `{a,b}` alternatives;
//! - otherwise it is a reference: `provider/id` or a bare id, ignoring case, else the models
//!   whose id or name contains it, of which the last by id (in pi's `localeCompare` order)
//!   that is not a dated snapshot (`-YYYYMMDD`) wins; failing both, a `:suffix` is set aside and the rest tried again.
//!   A reference several providers answer equally selects each of them, as pi does.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::engine::runner::PreferredModels;
use crate::util::safe_file::{self, Links};

/// Settings files larger than this are not pi's.
const MAX_SETTINGS_BYTES: u64 = 1024 * 1024;

/// The thinking levels pi accepts after a pattern's last `:`.
const THINKING_LEVELS: [&str; 7] = ["off", "minimal", "low", "medium", "high", "xhigh", "max"];

/// One model of the session's model option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Offered {
    /// The option value, `provider/id`.
    pub value: String,
    pub provider: String,
    pub id: String,
    /// The display name without pi-acp's `provider/` prefix.
    pub name: String,
}

impl Offered {
    /// `provider/id` and pi-acp's `provider/Display Name`; `None` for a value without a
    /// provider.
    pub(crate) fn new(value: &str, name: &str) -> Option<Offered> {
        let (provider, id) = value.split_once('/')?;
        let name = name
            .strip_prefix(provider)
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or(name);
        Some(Offered {
            value: value.to_owned(),
            provider: provider.to_owned(),
            id: id.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// pi's preferences for a session in `cwd`, matched against `offered`; `None` when neither
/// settings file sets `enabledModels` (or sets it empty) and both could be read.
pub(crate) async fn preferred_models(
    agent_dir: &Path,
    cwd: &Path,
    offered: &[Offered],
) -> Option<PreferredModels> {
    let global = agent_dir.join("settings.json");
    let project = cwd.join(".pi").join("settings.json");
    let mut errors = Vec::new();
    let mut chosen: Option<(PathBuf, Vec<String>)> = None;
    for path in [global, project] {
        match read_layer(&path).await {
            Ok(Some(Layer::Sets(patterns))) => chosen = Some((path, patterns)),
            Ok(Some(Layer::Clears)) => chosen = None,
            Ok(None) => {}
            Err(error) => errors.push(error),
        }
    }
    let error = (!errors.is_empty()).then(|| errors.join("; "));
    let Some((source, patterns)) = chosen.filter(|(_, patterns)| !patterns.is_empty()) else {
        return error.map(|error| PreferredModels {
            error: Some(error),
            ..PreferredModels::default()
        });
    };
    let (models, unmatched) = resolve(&patterns, offered);
    Some(PreferredModels {
        source: Some(source),
        patterns,
        models,
        unmatched,
        error,
    })
}

/// What one settings file says about `enabledModels`.
enum Layer {
    Sets(Vec<String>),
    /// The key is there but holds no list (`null`): pi then has no preference.
    Clears,
}

/// `Ok(None)` for a missing file or one without the key.
async fn read_layer(path: &Path) -> Result<Option<Layer>, String> {
    let contents = match safe_file::read(path, MAX_SETTINGS_BYTES, Links::ResolveFirst).await {
        Ok(contents) => contents,
        Err(error) if error.is_not_found() => return Ok(None),
        Err(error) => return Err(format!("pi settings {}: {error}", path.display())),
    };
    let settings: Value = serde_json::from_slice(&contents.bytes)
        .map_err(|error| format!("pi settings {} is not JSON: {error}", path.display()))?;
    let Some(settings) = settings.as_object() else {
        return Err(format!(
            "pi settings {} is not a JSON object",
            path.display()
        ));
    };
    Ok(match settings.get("enabledModels") {
        None => None,
        Some(Value::Array(items)) => Some(Layer::Sets(
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::trim)
                .filter(|pattern| !pattern.is_empty())
                .map(str::to_owned)
                .collect(),
        )),
        Some(_) => Some(Layer::Clears),
    })
}

/// The offered models `patterns` select (each once, in pattern order) and the patterns that
/// select none.
pub(crate) fn resolve(patterns: &[String], offered: &[Offered]) -> (Vec<String>, Vec<String>) {
    let mut models: Vec<String> = Vec::new();
    let mut unmatched = Vec::new();
    for pattern in patterns {
        let selected = select(pattern, offered);
        if selected.is_empty() {
            unmatched.push(pattern.clone());
        }
        for model in selected {
            if !models.contains(&model.value) {
                models.push(model.value.clone());
            }
        }
    }
    (models, unmatched)
}

fn select<'a>(pattern: &str, offered: &'a [Offered]) -> Vec<&'a Offered> {
    if !pattern.contains(['*', '?', '[']) {
        return reference(pattern, offered);
    }
    let base = without_thinking_level(pattern).unwrap_or(pattern);
    let exact = named_or_raw(base, offered, false);
    if !exact.is_empty() {
        return exact;
    }
    let alternatives = expand_braces(&base.to_lowercase());
    offered
        .iter()
        .filter(|model| {
            let full = model.value.to_lowercase();
            let id = model.id.to_lowercase();
            alternatives
                .iter()
                .any(|glob| path_glob(glob, &full) || path_glob(glob, &id))
        })
        .collect()
}

/// A pattern's text before a `:<thinking level>` suffix, when it has one.
fn without_thinking_level(text: &str) -> Option<&str> {
    let (base, level) = text.rsplit_once(':')?;
    THINKING_LEVELS.contains(&level).then_some(base)
}

/// A non-glob pattern: exact, then by substring, then without its last `:suffix`.
fn reference<'a>(text: &str, offered: &'a [Offered]) -> Vec<&'a Offered> {
    let found = named_or_raw(text, offered, true);
    if !found.is_empty() {
        return found;
    }
    let found = by_substring(text, offered);
    if !found.is_empty() {
        return found;
    }
    match text.rsplit_once(':') {
        Some((base, _)) => reference(base, offered),
        None => Vec::new(),
    }
}

/// `provider/id` (with a substring fallback inside that provider when `fuzzy`) or a bare id
/// equal to `text`. Several providers answering equally are all returned.
fn named_or_raw<'a>(text: &str, offered: &'a [Offered], fuzzy: bool) -> Vec<&'a Offered> {
    let lower = text.to_lowercase();
    let raw: Vec<&Offered> = offered
        .iter()
        .filter(|model| model.id.to_lowercase() == lower)
        .collect();
    let named = provider_prefix(text, offered).and_then(|(provider, rest)| {
        let rest_lower = rest.to_lowercase();
        let of_provider: Vec<&Offered> = offered
            .iter()
            .filter(|model| model.provider == provider)
            .collect();
        of_provider
            .iter()
            .find(|model| model.id.to_lowercase() == rest_lower)
            .or_else(|| raw.iter().find(|model| model.provider == provider))
            .copied()
            .or_else(|| {
                fuzzy
                    .then(|| best_by_substring(rest, &of_provider))
                    .flatten()
            })
    });
    // pi lets the named provider win (every provider counts as usable here).
    if let Some(named) = named {
        return vec![named];
    }
    match raw.as_slice() {
        [] => Vec::new(),
        [first, rest @ ..] if rest.iter().all(|model| model.provider == first.provider) => {
            vec![*first]
        }
        _ => raw,
    }
}

/// The longest offered provider that `text` starts with, followed by `/` and a model part.
fn provider_prefix<'t>(text: &'t str, offered: &[Offered]) -> Option<(String, &'t str)> {
    let mut best: Option<(String, &str)> = None;
    for model in offered {
        let provider = model.provider.as_str();
        if best
            .as_ref()
            .is_some_and(|(found, _)| found.len() >= provider.len())
        {
            continue;
        }
        let Some(head) = text.get(..provider.len()) else {
            continue;
        };
        let Some(rest) = text[provider.len()..].strip_prefix('/') else {
            continue;
        };
        if head.eq_ignore_ascii_case(provider) && !rest.trim().is_empty() {
            best = Some((provider.to_owned(), rest.trim()));
        }
    }
    best
}

/// Models whose id or name contains `text`; the best one, or every provider's copy of the
/// best id when several providers offer it.
fn by_substring<'a>(text: &str, offered: &'a [Offered]) -> Vec<&'a Offered> {
    let candidates: Vec<&Offered> = offered.iter().collect();
    let matches = containing(text, &candidates);
    let Some(best) = best_of(&matches) else {
        return Vec::new();
    };
    let tied: Vec<&Offered> = matches
        .into_iter()
        .filter(|model| model.id == best.id)
        .collect();
    if tied.iter().all(|model| model.provider == best.provider) {
        vec![best]
    } else {
        tied
    }
}

fn best_by_substring<'a>(text: &str, candidates: &[&'a Offered]) -> Option<&'a Offered> {
    best_of(&containing(text, candidates))
}

fn containing<'a>(text: &str, candidates: &[&'a Offered]) -> Vec<&'a Offered> {
    let lower = text.to_lowercase();
    candidates
        .iter()
        .filter(|model| {
            model.id.to_lowercase().contains(&lower) || model.name.to_lowercase().contains(&lower)
        })
        .copied()
        .collect()
}

/// pi prefers an alias (`claude-sonnet-4-5`) to a dated snapshot (`…-20250929`), then the
/// id that sorts last; the first in catalog order among equals.
fn best_of<'a>(matches: &[&'a Offered]) -> Option<&'a Offered> {
    let aliases: Vec<&Offered> = matches
        .iter()
        .filter(|model| !is_dated(&model.id))
        .copied()
        .collect();
    let pool = if aliases.is_empty() {
        matches
    } else {
        &aliases
    };
    let mut best: Option<&Offered> = None;
    for model in pool {
        if best.is_none_or(|best| collate(&model.id, &best.id) == Ordering::Greater) {
            best = Some(model);
        }
    }
    best
}

/// The order of printable ASCII in the Unicode root collation that pi's `localeCompare`
/// sorts by: punctuation and symbols, then digits, then letters, case second.
const COLLATION: &str = " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz";

/// Compares like `localeCompare` does on ids: every character's primary weight first (case
/// ignored), then lower case before upper case.
fn collate(left: &str, right: &str) -> Ordering {
    let primary = |text: &str| -> Vec<u32> {
        text.chars()
            .map(|c| {
                let lower = c.to_ascii_lowercase();
                match COLLATION.find(lower) {
                    Some(index) if lower.is_ascii() => index as u32,
                    _ => 1000 + u32::from(lower),
                }
            })
            .collect()
    };
    let case = |text: &str| -> Vec<bool> { text.chars().map(|c| c.is_ascii_uppercase()).collect() };
    primary(left)
        .cmp(&primary(right))
        .then_with(|| case(left).cmp(&case(right)))
}

/// Ends in `-YYYYMMDD` (and is not a `-latest` alias).
fn is_dated(id: &str) -> bool {
    if id.ends_with("-latest") {
        return false;
    }
    let bytes = id.as_bytes();
    bytes.len() > 9
        && bytes[bytes.len() - 9] == b'-'
        && bytes[bytes.len() - 8..].iter().all(u8::is_ascii_digit)
}

/// `{a,b}` alternatives, expanded left to right (nested groups included).
fn expand_braces(pattern: &str) -> Vec<String> {
    let Some(open) = pattern.find('{') else {
        return vec![pattern.to_owned()];
    };
    let mut depth = 0;
    let mut parts = Vec::new();
    let mut start = open + 1;
    for (index, character) in pattern[open..].char_indices().map(|(i, c)| (i + open, c)) {
        match character {
            '{' => depth += 1,
            ',' if depth == 1 => {
                parts.push(&pattern[start..index]);
                start = index + 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    parts.push(&pattern[start..index]);
                    if parts.len() < 2 {
                        break;
                    }
                    let (head, tail) = (&pattern[..open], &pattern[index + 1..]);
                    return parts
                        .iter()
                        .flat_map(|part| expand_braces(&format!("{head}{part}{tail}")))
                        .collect();
                }
            }
            _ => {}
        }
    }
    vec![pattern.to_owned()]
}

/// A glob over `/`-separated segments; both sides are lowercase already.
fn path_glob(pattern: &str, text: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').collect();
    let text: Vec<&str> = text.split('/').collect();
    segments_match(&pattern, &text)
}

fn segments_match(pattern: &[&str], text: &[&str]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((&"**", rest)) => (0..=text.len()).any(|skip| segments_match(rest, &text[skip..])),
        Some((segment, rest)) => match text.split_first() {
            Some((first, tail)) => {
                segment_match(
                    &segment.chars().collect::<Vec<_>>(),
                    &first.chars().collect::<Vec<_>>(),
                ) && segments_match(rest, tail)
            }
            None => false,
        },
    }
}

/// `*`, `?` and `[...]` (ranges, `!` or `^` to negate) inside one segment.
fn segment_match(pattern: &[char], text: &[char]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some(('*', rest)) => (0..=text.len()).any(|skip| segment_match(rest, &text[skip..])),
        Some(('?', rest)) => !text.is_empty() && segment_match(rest, &text[1..]),
        Some(('[', rest)) => match class(rest) {
            Some((matches, after)) => {
                text.first().is_some_and(|c| matches(*c)) && segment_match(after, &text[1..])
            }
            None => text.first() == Some(&'[') && segment_match(rest, &text[1..]),
        },
        Some((literal, rest)) => text.first() == Some(literal) && segment_match(rest, &text[1..]),
    }
}

/// A `[...]` class (the text after `[`): its test and the pattern after `]`.
fn class(pattern: &[char]) -> Option<(impl Fn(char) -> bool + '_, &[char])> {
    let (negated, body_start) = match pattern.first() {
        Some('!' | '^') => (true, 1),
        _ => (false, 0),
    };
    // A `]` right after the opening is a member, not the end.
    let close = pattern
        .iter()
        .enumerate()
        .skip(body_start + 1)
        .find(|(_, c)| **c == ']')
        .map(|(index, _)| index)?;
    let body = &pattern[body_start..close];
    let test = move |c: char| {
        let mut index = 0;
        let mut hit = false;
        while index < body.len() {
            if index + 2 < body.len() && body[index + 1] == '-' {
                hit |= (body[index]..=body[index + 2]).contains(&c);
                index += 3;
            } else {
                hit |= body[index] == c;
                index += 1;
            }
        }
        hit != negated
    };
    Some((test, &pattern[close + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(values: &[(&str, &str)]) -> Vec<Offered> {
        values
            .iter()
            .map(|(value, name)| Offered::new(value, name).expect("provider/id"))
            .collect()
    }

    fn catalog() -> Vec<Offered> {
        offered(&[
            (
                "anthropic/claude-sonnet-4-5-20250929",
                "anthropic/Claude Sonnet 4.5",
            ),
            (
                "anthropic/claude-sonnet-4-5",
                "anthropic/Claude Sonnet 4.5 (latest)",
            ),
            ("anthropic/claude-opus-5-5", "anthropic/Claude Opus 5.5"),
            ("openai/gpt-5.6-luna", "openai/GPT-5.6 Luna"),
            ("openai/gpt-5.6-sol", "openai/GPT-5.6 Sol"),
            ("openai/gpt-4.1", "openai/GPT-4.1"),
            ("openrouter/openai/gpt-4.1", "openrouter/OpenAI: GPT-4.1"),
            (
                "openrouter/moonshotai/kimi-k2.7-code",
                "openrouter/Kimi K2.7 Code",
            ),
            ("openrouter/auto", "openrouter/Auto Router"),
        ])
    }

    fn resolved(patterns: &[&str]) -> (Vec<String>, Vec<String>) {
        let patterns: Vec<String> = patterns.iter().map(|p| (*p).to_owned()).collect();
        resolve(&patterns, &catalog())
    }

    #[test]
    fn references_match_exactly_then_by_substring() {
        let (models, unmatched) = resolved(&[
            "ANTHROPIC/claude-opus-5-5",
            "kimi-k2.7-code",
            "sonnet-4-5",
            "openai/gpt-5.6-sol:high",
            "google/gemini-4-argon",
        ]);
        assert_eq!(
            models,
            [
                "anthropic/claude-opus-5-5",
                "openrouter/moonshotai/kimi-k2.7-code",
                // The alias wins over the dated snapshot.
                "anthropic/claude-sonnet-4-5",
                "openai/gpt-5.6-sol",
            ]
        );
        assert_eq!(unmatched, ["google/gemini-4-argon"]);
    }

    #[test]
    fn a_bare_id_two_providers_offer_selects_both_and_a_named_one_only_its_own() {
        let (models, _) = resolved(&["gpt-4.1"]);
        assert_eq!(
            models,
            ["openai/gpt-4.1"],
            "only openai's id is exactly gpt-4.1"
        );
        let (models, _) = resolved(&["openrouter/openai/gpt-4.1"]);
        assert_eq!(models, ["openrouter/openai/gpt-4.1"]);
        let twins = offered(&[("a/m-1", "a/M"), ("b/m-1", "b/M")]);
        let (models, _) = resolve(&["m-1".to_owned()], &twins);
        assert_eq!(models, ["a/m-1", "b/m-1"]);
    }

    #[test]
    fn globs_stay_inside_a_segment_and_ignore_case() {
        let (models, unmatched) = resolved(&[
            "openai/GPT-5.6-*:high",
            "openrouter/*",
            "*sonnet*",
            "openrouter/**/gpt-?.1",
            "anthropic/claude-{opus,haiku}-5-5*",
            "openai/gpt-[0-4].*",
            "mistral/*",
        ]);
        assert_eq!(
            models,
            [
                "openai/gpt-5.6-luna",
                "openai/gpt-5.6-sol",
                // `*` does not cross a `/`: only the single-segment OpenRouter id.
                "openrouter/auto",
                "anthropic/claude-sonnet-4-5-20250929",
                "anthropic/claude-sonnet-4-5",
                "openrouter/openai/gpt-4.1",
                "anthropic/claude-opus-5-5",
                "openai/gpt-4.1",
            ]
        );
        assert_eq!(unmatched, ["mistral/*"]);
    }

    #[tokio::test]
    async fn the_project_list_replaces_the_global_one_and_bad_files_are_reported() {
        let dir = tempfile::tempdir().expect("temp dir");
        let agent_dir = dir.path().join("agent");
        let project = dir.path().join("project");
        std::fs::create_dir_all(&agent_dir).expect("agent dir");
        std::fs::create_dir_all(project.join(".pi")).expect("project .pi");
        let global = agent_dir.join("settings.json");
        std::fs::write(&global, r#"{"enabledModels":["openai/gpt-4.1","nope/x"]}"#).expect("write");
        let found = preferred_models(&agent_dir, &project, &catalog())
            .await
            .expect("some");
        assert_eq!(found.source.as_deref(), Some(global.as_path()));
        assert_eq!(found.models, ["openai/gpt-4.1"]);
        assert_eq!(found.unmatched, ["nope/x"]);

        let local = project.join(".pi/settings.json");
        std::fs::write(&local, r#"{"enabledModels":["*opus*"]}"#).expect("write");
        let found = preferred_models(&agent_dir, &project, &catalog())
            .await
            .expect("some");
        assert_eq!(found.source.as_deref(), Some(local.as_path()));
        assert_eq!(found.models, ["anthropic/claude-opus-5-5"]);

        std::fs::write(&local, "{not json").expect("write");
        let found = preferred_models(&agent_dir, &project, &catalog())
            .await
            .expect("some");
        assert_eq!(
            found.models,
            ["openai/gpt-4.1"],
            "pi skips the broken layer"
        );
        assert!(
            found.error.as_deref().unwrap().contains("is not JSON"),
            "{found:?}"
        );

        std::fs::write(&local, r#"{"enabledModels":null}"#).expect("write");
        assert_eq!(
            preferred_models(&agent_dir, &project, &catalog()).await,
            None
        );
    }
}
