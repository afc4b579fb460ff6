//! Placeholder: filled by the security issue's work.
