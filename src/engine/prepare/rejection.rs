//! Why a script is refused before admission: [`Rejection`], a tool error with no run behind
//! it, and its [`Cause`], which the manager maps to the rejection kind callers branch on.
//! Its own file so that the parts of preparation (the companion files, the dry run) and the
//! manager name it without reaching into the preparation steps.

/// A preparation failure: a tool error with no run behind it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rejection {
    pub message: String,
    pub cause: Cause,
}

/// What a preparation failure is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The script file could not be read: its path, its kind of file, its size.
    Unreadable,
    /// The script's text: UTF-8, a NUL, the `meta` literal, the syntax and the static checks.
    Parse,
    /// What the script does: `args` against its input schema, its companion files, the dry run.
    Script,
    /// Where its calls go: a call without a route, a backend that cannot serve it.
    Routing,
}

impl Rejection {
    /// A failure of what the script does.
    pub(crate) fn new(message: impl Into<String>) -> Rejection {
        Rejection {
            message: message.into(),
            cause: Cause::Script,
        }
    }

    /// A script file that could not be read.
    pub(crate) fn unreadable(message: impl Into<String>) -> Rejection {
        Rejection {
            message: message.into(),
            cause: Cause::Unreadable,
        }
    }

    /// A script text that fails its static checks.
    pub(crate) fn parse(message: impl Into<String>) -> Rejection {
        Rejection {
            message: message.into(),
            cause: Cause::Parse,
        }
    }

    /// A failure of routing: no route, or a backend that cannot serve a call.
    pub(crate) fn routing(message: impl Into<String>) -> Rejection {
        Rejection {
            message: message.into(),
            cause: Cause::Routing,
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
