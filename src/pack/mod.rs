//! The encrypted workflows pack (DMPK, docs/pack.md): a folder of workflow scripts and their
//! companion files in one AES-256-GCM file, so a host can serve workflows it must not ship
//! in the clear (`agentprism pack` writes one, `agentprism serve --workflows-pack` reads it).
//!
//! `format.rs` is the layout, its limits, the path rule and the errors; `key.rs` the key
//! (its text form, generation, and the copy `main` took out of the environment);
//! `reader.rs` opens a pack, refusing any change to it; `writer.rs` seals one. The module
//! knows files and bytes only: what the entries mean (workflows, companion files) is the
//! folder loader's and the engine's, through `engine::sources::PackSources`.

mod format;
mod key;
mod reader;
mod writer;

#[cfg(test)]
mod tests;

pub use format::{
    Entry, HEADER_BYTES, MAX_ENTRIES, MAX_PACK_BYTES, NONCE_BYTES, PackError, TAG_BYTES, VERSION,
    path_problem,
};
pub use key::{KeyError, PackKey, WORKFLOWS_KEY_VARIABLE, keep_environment_key, workflows_key};
pub use reader::{ReadError, open, read_file};
pub(crate) use writer::seal;
