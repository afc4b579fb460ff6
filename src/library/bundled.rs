//! The workflows compiled into the binary: a starting library anyone can copy into a project
//! (`agentprism workflows show <name> --copy`) and change. Their sources are `workflows/*.js`
//! at the repository root.

/// One bundled workflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bundled {
    /// The name it runs by, which is also its file stem under `workflows/`.
    pub name: &'static str,
    /// The script's text.
    pub source: &'static str,
}

/// Every bundled workflow, sorted by name.
pub const BUNDLED: &[Bundled] = &[
    Bundled {
        name: "audit",
        source: include_str!("../../workflows/audit.js"),
    },
    Bundled {
        name: "fix-tests",
        source: include_str!("../../workflows/fix-tests.js"),
    },
    Bundled {
        name: "migrate",
        source: include_str!("../../workflows/migrate.js"),
    },
    Bundled {
        name: "research",
        source: include_str!("../../workflows/research.js"),
    },
    Bundled {
        name: "review-panel",
        source: include_str!("../../workflows/review-panel.js"),
    },
];

/// The bundled workflow called `name`.
pub fn find(name: &str) -> Option<&'static Bundled> {
    BUNDLED.iter().find(|bundled| bundled.name == name)
}
