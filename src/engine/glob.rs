//! Whole-label, case-sensitive glob matching for `labelGlob` (`*`, `?`, `\` escape).
