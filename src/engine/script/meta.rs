//! The NUL check every reader of a script's text runs before the analyzer
//! ([`super::analyze`]), and, for tests, a script's meta read through the same two checks.

#[cfg(test)]
use serde_json::Value;

use super::ScriptError;
#[cfg(test)]
use super::analyze;

/// What a listing needs of a script's `meta`.
#[cfg(test)]
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ScriptMeta {
    /// `meta.name`.
    pub name: String,
    /// `meta.description` (required by the analyzer today, so always set).
    pub description: Option<String>,
    /// `meta.inputSchema`, a JSON Schema object, when declared.
    pub input_schema: Option<Value>,
    /// `meta.files`, in declaration order.
    pub files: Vec<String>,
    /// The whole `meta` literal as JSON.
    pub meta: Value,
}

/// Reads the meta of `source` with the static checks of preparation (size, encoding, NUL,
/// the meta statement and its rules, the determinism guard). The error says what is wrong
/// and, when it has a position, ends with "at line L, column C".
#[cfg(test)]
pub(crate) fn read_meta(source: &str) -> Result<ScriptMeta, String> {
    check_no_nul(source.as_bytes()).map_err(|error| error.message)?;
    let analyzed = analyze(source.as_bytes()).map_err(|error| error.message)?;
    Ok(ScriptMeta {
        name: analyzed.name,
        description: Some(analyzed.description),
        input_schema: analyzed.input_schema,
        files: analyzed.files,
        meta: analyzed.meta,
    })
}

/// A NUL character in the script text: JavaScript allows it, but the script engine takes
/// its source as a C string, and its own error names neither the character nor where it is.
pub(crate) fn check_no_nul(bytes: &[u8]) -> Result<(), ScriptError> {
    let Some(at) = bytes.iter().position(|&byte| byte == 0) else {
        return Ok(());
    };
    let before = &bytes[..at];
    let line = before.iter().filter(|&&byte| byte == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&byte| byte == b'\n')
        .map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    Err(ScriptError {
        message: format!(
            "the script contains a NUL character (U+0000) at line {line}, column {column}; write it as \"\\0\" inside a string literal"
        ),
        line: Some(super::saturate(line)),
        column: Some(super::saturate(column)),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_meta_of_a_script_is_read_without_running_it() {
        let meta = read_meta(
            "export const meta = {\n  name: 'review',\n  description: 'Reviews a diff',\n  inputSchema: { type: 'object', properties: { target: { type: 'string' } } },\n  files: ['prompts/review.md'],\n};\nawait agent(file('prompts/review.md'));\n",
        )
        .expect("valid");
        assert_eq!(meta.name, "review");
        assert_eq!(meta.description.as_deref(), Some("Reviews a diff"));
        assert_eq!(
            meta.input_schema,
            Some(json!({ "type": "object", "properties": { "target": { "type": "string" } } }))
        );
        assert_eq!(meta.files, ["prompts/review.md"]);
        assert_eq!(meta.meta["name"], "review");
        let bare =
            read_meta("export const meta = { name: 'n', description: 'd' };\n").expect("valid");
        assert_eq!((bare.input_schema, bare.files.len()), (None, 0));
    }

    #[test]
    fn errors_say_what_and_where() {
        let cases = [
            (
                "const x = 1;\n",
                "the first statement must be `export const meta = { ... }`; found `const x` at line 1, column 1",
            ),
            (
                "export const meta = { name: 'n' };\n",
                "meta.description is required (a non-empty string) at line 1, column 21",
            ),
            (
                "export const meta = { name: 'n', description: 'd', files: ['../x'] };\n",
                "meta.files[0] \"../x\" has a `..` component; companion files stay inside the project folder at line 1, column 60",
            ),
            (
                "export const meta = { name: 'n', description: 'd' };\nDate.now();\n",
                "`Date.now()` is unavailable in workflow scripts (runs must replay deterministically) at line 2, column 1",
            ),
            (
                "export const meta = { name: 'n', description: 'd' };\nlet a = '\0';\n",
                "the script contains a NUL character (U+0000) at line 2, column 10",
            ),
        ];
        for (source, expected) in cases {
            let error = read_meta(source).expect_err("rejected");
            assert!(error.starts_with(expected), "{source:?}: {error}");
        }
    }
}
