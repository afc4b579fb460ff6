//! JSON Schema for structured agent output: validation, mock values for the dry run, and
//! lenient extraction of a JSON value from agent text.
