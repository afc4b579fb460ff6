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
pub const BUNDLED: &[Bundled] = &[];

/// The bundled workflow called `name`.
pub fn find(name: &str) -> Option<&'static Bundled> {
    BUNDLED.iter().find(|bundled| bundled.name == name)
}
