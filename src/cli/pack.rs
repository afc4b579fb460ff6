//! `agentprism pack <dir> -o FILE [--new-key]`: seals every non-hidden regular file under a
//! folder into an encrypted workflows pack (docs/pack.md).
//!
//! The key is `MHL_SERVE_WORKFLOWS_KEY` (taken out of the environment by `main`; or its file,
//! `MHL_SERVE_WORKFLOWS_KEY_FILE`, or the systemd credential of that name), or with
//! `--new-key` a fresh one, printed on stdout and nothing else, so `KEY=$(agentprism pack …
//! --new-key)` captures exactly the key. Files are packed sorted by their `/`-separated path;
//! hidden names and symbolic links are left out (a link is not a regular file here). The
//! pack is written only after what was sealed opens again with the key and its workflows
//! load by the server's own loader, then atomically with mode 0600. Bad input exits 2.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::EXIT_COMPLETED;
use super::args::PackArgs;
use super::input::{guarded, input_error};
use crate::env::EnvSnapshot;
use crate::pack::{self, Entry, MAX_ENTRIES, MAX_PACK_BYTES, PackKey};
use crate::util::safe_file::{self, Links};

/// Packs `args.dir` into `args.output`.
pub(super) async fn pack(env: &EnvSnapshot, args: PackArgs) -> Result<u8> {
    guarded(async move {
        let key = if args.new_key {
            PackKey::generate()?
        } else {
            pack::workflows_key(env).await.map_err(|error| {
                input_error(format!("{error} (or pass --new-key to draw a fresh key)"))
            })?
        };
        tokio::task::spawn_blocking(move || pack_folder(&args, key))
            .await
            .context("the pack task failed")?
    })
    .await
}

fn pack_folder(args: &PackArgs, key: PackKey) -> Result<u8> {
    let root = std::fs::canonicalize(&args.dir).map_err(|error| {
        input_error(format!(
            "the folder to pack, {}, cannot be read: {error}",
            args.dir.display()
        ))
    })?;
    if !root.is_dir() {
        return Err(input_error(format!(
            "{} is not a folder: `agentprism pack` packs a folder of workflows",
            root.display()
        )));
    }
    let output = absolute(&args.output)?;
    let mut files = Vec::new();
    walk(&root, &output, &mut files)
        .map_err(|error| input_error(format!("{} cannot be packed: {error}", root.display())))?;
    let entries = read_entries(&root, files)?;
    let sealed = pack::seal(&entries, &key)
        .map_err(|error| input_error(format!("{} cannot be packed: {error}", root.display())))?;
    verify(&root, &sealed, &key, &output)?;
    crate::util::write_atomic(&output, &sealed, 0o600)
        .with_context(|| format!("writing the pack {}", output.display()))?;
    if args.new_key {
        say!("{}", key.to_hex());
    }
    note!(
        "packed {} files from {} into {}",
        entries.len(),
        root.display(),
        output.display()
    );
    Ok(EXIT_COMPLETED)
}

/// `path` made absolute against the current folder, its parent resolved when it exists (the
/// output itself usually does not exist yet).
fn absolute(path: &Path) -> Result<PathBuf> {
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .context("reading the current directory")?
            .join(path)
    };
    let resolved = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|parent| parent.join(name))
            .unwrap_or(path),
        _ => path,
    };
    Ok(resolved)
}

/// Collects every non-hidden regular file under
/// `folder`, never following a link, leaving out `output` (a pack written into the folder
/// it packs).
fn walk(folder: &Path, output: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(folder).map_err(|error| format!("{}: {error}", folder.display()))?;
    for entry in entries {
        let entry = entry.map_err(|error| format!("{}: {error}", folder.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(format!(
                "{}: a file name is not UTF-8; pack paths are UTF-8",
                entry.path().display()
            ));
        };
        if name.starts_with('.') {
            continue;
        }
        // `file_type` does not follow links: a link is neither a file nor a folder here.
        let kind = entry
            .file_type()
            .map_err(|error| format!("{}: {error}", entry.path().display()))?;
        let path = entry.path();
        if kind.is_dir() {
            walk(&path, output, files)?;
        } else if kind.is_file() && path != output {
            if files.len() >= MAX_ENTRIES {
                return Err(format!(
                    "it holds more than {MAX_ENTRIES} files, the most one pack holds"
                ));
            }
            files.push(path);
        }
    }
    Ok(())
}

/// Reads the files as pack entries sorted by path, within the pack's size cap.
fn read_entries(root: &Path, files: Vec<PathBuf>) -> Result<Vec<Entry>> {
    let mut entries = Vec::with_capacity(files.len());
    let mut total = 0usize;
    for path in files {
        let relative = crate::serve::folder::relative_name(root, &path);
        let contents = safe_file::read_blocking(&path, MAX_PACK_BYTES as u64, Links::Refuse)
            .map_err(|error| input_error(format!("{relative} cannot be packed: {error}")))?;
        total += contents.bytes.len();
        if total > MAX_PACK_BYTES {
            return Err(input_error(format!(
                "{} holds more than {MAX_PACK_BYTES} bytes (64 MiB), the most one pack holds",
                root.display()
            )));
        }
        entries.push(Entry {
            path: relative,
            content: contents.bytes,
        });
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(entries)
}

/// Opens `sealed` with `key` and loads its workflows as the server will: a pack that would
/// not serve is never written.
fn verify(root: &Path, sealed: &[u8], key: &PackKey, output: &Path) -> Result<()> {
    let opened = pack::open(sealed, key).map_err(|error| {
        anyhow::anyhow!("the sealed pack does not open again ({error}); nothing was written")
    })?;
    crate::serve::folder::load_files(
        root,
        opened
            .iter()
            .map(|entry| (entry.path.as_str(), entry.content.as_slice())),
    )
    .map_err(|error| {
        input_error(format!(
            "{error}\n{} was not written: its workflows must load from the pack",
            output.display()
        ))
    })?;
    Ok(())
}
