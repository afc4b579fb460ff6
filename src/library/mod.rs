//! Where saved workflows live and which one a name means: the project's folder, the user's
//! folder and the library compiled into the binary.
//!
//! The room knows folders, file names and the bundled texts; it never parses a script. The
//! engine resolves `workflow(name)` through it, and the CLI and the MCP prompts list through
//! the engine, which adds what static analysis says of each file.
//!
//! Precedence: a project workflow beats a user workflow of the same name, which beats a
//! bundled one. A listing shows every file, the losers marked with the origin that shadows
//! them, and a file whose name breaks the rule with its problem (never hidden).

pub mod bundled;
pub mod materialize;
pub mod names;
pub mod save;
pub mod template;

use std::path::{Path, PathBuf};

use crate::env::EnvSnapshot;

/// At most this many files are looked at in one folder, so a folder of a million files costs
/// a bounded listing.
pub const MAX_FILES_PER_FOLDER: usize = 1_000;

/// Where a saved workflow comes from, in precedence order (the first wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// `<project>/.agentprism/workflows/<name>.js`.
    Project,
    /// `<user folder>/<name>.js` (see [`user_folder`]).
    User,
    /// Compiled into the binary ([`bundled::BUNDLED`]).
    Bundled,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Project => "project",
            Origin::User => "user",
            Origin::Bundled => "bundled",
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Where the text of a saved workflow is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A file in the project or user folder (not yet read).
    File(PathBuf),
    /// A bundled workflow's text.
    Bundled(&'static str),
}

/// One saved workflow as the folders show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The file stem (`audit` for `audit.js`), or the bundled name.
    pub name: String,
    pub origin: Origin,
    pub location: Location,
    /// The origin of the entry that wins over this one under the same name.
    pub shadowed_by: Option<Origin>,
    /// Why this entry cannot be run by name (its name breaks [`names::check`]).
    pub problem: Option<String>,
}

impl Entry {
    pub fn path(&self) -> Option<&Path> {
        match &self.location {
            Location::File(path) => Some(path),
            Location::Bundled(_) => None,
        }
    }
}

/// The folders a name is looked up in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Folders {
    /// `<project>/.agentprism/workflows`, when a project is known.
    pub project: Option<PathBuf>,
    /// The user's folder, when a home is known.
    pub user: Option<PathBuf>,
}

impl Folders {
    /// The folders for `project_dir` (if any) and the user folder from `env`.
    pub fn new(project_dir: Option<&Path>, env: &EnvSnapshot) -> Folders {
        Folders {
            project: project_dir.map(project_folder),
            user: user_folder(env),
        }
    }

    /// Where `name` may be, in precedence order: the project file, the user file, the bundled
    /// text. Files are listed whether or not they exist; the caller reads the first that does.
    /// Empty when `name` breaks [`names::check`].
    pub fn candidates(&self, name: &str) -> Vec<(Origin, Location)> {
        if names::check(name).is_err() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (origin, folder) in [(Origin::Project, &self.project), (Origin::User, &self.user)] {
            if let Some(folder) = folder {
                out.push((origin, Location::File(folder.join(format!("{name}.js")))));
            }
        }
        if let Some(bundled) = bundled::find(name) {
            out.push((Origin::Bundled, Location::Bundled(bundled.source)));
        }
        out
    }

    /// Every saved workflow: winners and shadowed entries, sorted by name and then
    /// precedence. A folder that does not exist lists nothing; one that cannot be read is an
    /// error naming it.
    pub fn list(&self) -> Result<Vec<Entry>, String> {
        let mut entries = Vec::new();
        for (origin, folder) in [(Origin::Project, &self.project), (Origin::User, &self.user)] {
            if let Some(folder) = folder {
                entries.extend(list_folder(origin, folder)?);
            }
        }
        entries.extend(bundled::BUNDLED.iter().map(|bundled| Entry {
            name: bundled.name.to_owned(),
            origin: Origin::Bundled,
            location: Location::Bundled(bundled.source),
            shadowed_by: None,
            problem: None,
        }));
        entries.sort_by(|a, b| a.name.cmp(&b.name).then(a.origin.cmp(&b.origin)));
        mark_shadowed(&mut entries);
        Ok(entries)
    }

    /// The names that exist, per origin, for an error about a name that matches nothing:
    /// `project: a, b; user: c; bundled: audit, research`.
    pub fn known_names(&self) -> String {
        let entries = self.list().unwrap_or_default();
        let mut parts = Vec::new();
        for origin in [Origin::Project, Origin::User, Origin::Bundled] {
            let names: Vec<&str> = entries
                .iter()
                .filter(|entry| entry.origin == origin && entry.problem.is_none())
                .map(|entry| entry.name.as_str())
                .collect();
            if !names.is_empty() {
                parts.push(format!("{origin}: {}", names.join(", ")));
            }
        }
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

/// `<project>/.agentprism/workflows`.
pub fn project_folder(project_dir: &Path) -> PathBuf {
    project_dir.join(".agentprism").join("workflows")
}

/// The user's folder of saved workflows: `AGENTPRISM_WORKFLOWS_DIR` when set (it must be
/// absolute; a relative value is ignored like an unset one and [`check_env`] reports it),
/// else `$XDG_CONFIG_HOME/agentprism/workflows` when that is absolute, else
/// `~/.config/agentprism/workflows`. `None` without a home.
pub fn user_folder(env: &EnvSnapshot) -> Option<PathBuf> {
    if let Some(dir) = env.non_empty(crate::env::WORKFLOWS_DIR) {
        let dir = PathBuf::from(dir);
        return dir.is_absolute().then_some(dir);
    }
    if let Some(config) = env.non_empty("XDG_CONFIG_HOME") {
        let config = PathBuf::from(config);
        if config.is_absolute() {
            return Some(config.join("agentprism").join("workflows"));
        }
    }
    let home = PathBuf::from(env.home()?);
    Some(home.join(".config").join("agentprism").join("workflows"))
}

/// An error naming `AGENTPRISM_WORKFLOWS_DIR` when it is set to something that is not an
/// absolute path.
pub fn check_env(env: &EnvSnapshot) -> Result<(), String> {
    match env.non_empty(crate::env::WORKFLOWS_DIR) {
        Some(dir) if !Path::new(dir).is_absolute() => Err(format!(
            "{} must be an absolute path, got {dir:?}",
            crate::env::WORKFLOWS_DIR
        )),
        _ => Ok(()),
    }
}

/// The `.js` files directly in `folder` (hidden files skipped), at most
/// [`MAX_FILES_PER_FOLDER`], sorted by name.
fn list_folder(origin: Origin, folder: &Path) -> Result<Vec<Entry>, String> {
    let reader = match std::fs::read_dir(folder) {
        Ok(reader) => reader,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(format!("{} cannot be listed: {error}", folder.display())),
    };
    let mut entries = Vec::new();
    for item in reader.take(MAX_FILES_PER_FOLDER) {
        let item =
            item.map_err(|error| format!("{} cannot be listed: {error}", folder.display()))?;
        let file_name = item.file_name().to_string_lossy().into_owned();
        let Some(stem) = file_name.strip_suffix(".js") else {
            continue;
        };
        if file_name.starts_with('.') {
            continue;
        }
        let path = item.path();
        // A link is followed here as `scriptPath` is at admission; what it points at must be
        // a regular file, and the read that runs it resolves it again.
        let problem = match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => names::check(stem).err(),
            Ok(_) => Some(format!("{} is not a regular file", path.display())),
            Err(error) => Some(format!("{} cannot be read: {error}", path.display())),
        };
        entries.push(Entry {
            name: stem.to_owned(),
            origin,
            location: Location::File(path),
            shadowed_by: None,
            problem,
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// Marks each entry that a valid entry earlier in precedence shares its name with. `entries`
/// is sorted by name, then origin.
fn mark_shadowed(entries: &mut [Entry]) {
    let mut winner: Option<(String, Origin)> = None;
    for entry in entries.iter_mut() {
        match &winner {
            Some((name, origin)) if *name == entry.name => entry.shadowed_by = Some(*origin),
            _ if entry.problem.is_none() => winner = Some((entry.name.clone(), entry.origin)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvSnapshot {
        EnvSnapshot::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn the_user_folder_follows_the_override_then_xdg_then_home() {
        let home = [("HOME", "/h")];
        assert_eq!(
            user_folder(&env(&home)),
            Some(PathBuf::from("/h/.config/agentprism/workflows"))
        );
        assert_eq!(
            user_folder(&env(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "/x")])),
            Some(PathBuf::from("/x/agentprism/workflows"))
        );
        assert_eq!(
            user_folder(&env(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "rel")])),
            Some(PathBuf::from("/h/.config/agentprism/workflows"))
        );
        assert_eq!(
            user_folder(&env(&[("HOME", "/h"), (crate::env::WORKFLOWS_DIR, "/w")])),
            Some(PathBuf::from("/w"))
        );
        assert!(check_env(&env(&[(crate::env::WORKFLOWS_DIR, "w")])).is_err());
        assert_eq!(user_folder(&env(&[])), None);
    }

    #[test]
    fn the_project_wins_over_the_user_and_a_bad_name_is_listed_with_its_problem() {
        let root = tempfile::tempdir().unwrap();
        let project = root.path().join("p");
        let user = root.path().join("u");
        std::fs::create_dir_all(project_folder(&project)).unwrap();
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(project_folder(&project).join("same.js"), "x").unwrap();
        std::fs::write(user.join("same.js"), "x").unwrap();
        std::fs::write(user.join("Bad Name.js"), "x").unwrap();
        std::fs::write(user.join(".hidden.js"), "x").unwrap();
        std::fs::write(user.join("notes.txt"), "x").unwrap();
        let folders = Folders {
            project: Some(project_folder(&project)),
            user: Some(user.clone()),
        };
        let listed: Vec<_> = folders
            .list()
            .unwrap()
            .into_iter()
            .filter(|entry| entry.origin != Origin::Bundled)
            .collect();
        assert_eq!(listed.len(), 3, "{listed:?}");
        assert_eq!(listed[0].name, "Bad Name");
        assert!(listed[0].problem.is_some());
        assert_eq!(
            (listed[1].origin, listed[1].shadowed_by),
            (Origin::Project, None)
        );
        assert_eq!(
            (listed[2].origin, listed[2].shadowed_by),
            (Origin::User, Some(Origin::Project))
        );
        let candidates = folders.candidates("same");
        assert_eq!(candidates[0].0, Origin::Project);
        assert_eq!(
            candidates[1],
            (Origin::User, Location::File(user.join("same.js")))
        );
        assert!(folders.candidates("../same").is_empty());
    }
}
