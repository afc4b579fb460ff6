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

/// Bytes of a rejection's message kept: each part of preparation bounds what it quotes of
/// the script, and this bounds the whole, so no refusal sends a host megabytes.
pub(crate) const MESSAGE_LIMIT: usize = 16 << 10;

impl Rejection {
    fn with(mut message: String, cause: Cause) -> Rejection {
        crate::util::cut_message(&mut message, MESSAGE_LIMIT);
        Rejection { message, cause }
    }

    /// A failure of what the script does.
    pub(crate) fn new(message: impl Into<String>) -> Rejection {
        Rejection::with(message.into(), Cause::Script)
    }

    /// A script file that could not be read.
    pub(crate) fn unreadable(message: impl Into<String>) -> Rejection {
        Rejection::with(message.into(), Cause::Unreadable)
    }

    /// A script text that fails its static checks.
    pub(crate) fn parse(message: impl Into<String>) -> Rejection {
        Rejection::with(message.into(), Cause::Parse)
    }

    /// A failure of routing: no route, or a backend that cannot serve a call.
    pub(crate) fn routing(message: impl Into<String>) -> Rejection {
        Rejection::with(message.into(), Cause::Routing)
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_past_the_limit_is_cut_at_a_character_and_says_so() {
        let exact = "a".repeat(MESSAGE_LIMIT);
        assert_eq!(Rejection::new(exact.clone()).message, exact);
        let longer = format!("{}é", "a".repeat(MESSAGE_LIMIT - 1));
        let cut = Rejection::routing(longer.clone());
        assert_eq!(cut.cause, Cause::Routing);
        assert_eq!(
            cut.message,
            format!(
                "{}… (cut: the message had {} bytes)",
                "a".repeat(MESSAGE_LIMIT - 1),
                longer.len()
            )
        );
    }
}
