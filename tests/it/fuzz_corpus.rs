//! Replays the kept fuzz corpus (`fuzz/corpus/<target>/*`) through the same entry points the
//! fuzz targets call, on the stable toolchain: an input that once crashed a reader stays in
//! the corpus and keeps failing here if the defect comes back, without nightly or cargo-fuzz.

use std::path::{Path, PathBuf};

use agentprism::fuzzing;

/// Every file in `fuzz/corpus/<target>`, sorted so a failure names the same file every run.
fn corpus(target: &str) -> Vec<PathBuf> {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .unwrap_or_else(|error| panic!("cannot list {}: {error}", folder.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "{} holds no corpus files",
        folder.display()
    );
    files
}

/// Runs `entry` on each file of `target`'s corpus, naming the file if it panics.
fn replay(target: &str, entry: fn(&[u8])) {
    for file in corpus(target) {
        let bytes = std::fs::read(&file).expect("a corpus file reads");
        let outcome = std::panic::catch_unwind(|| entry(&bytes));
        assert!(outcome.is_ok(), "{target} panicked on {}", file.display());
    }
}

#[test]
fn the_acp_reader_corpus_replays_without_a_panic() {
    replay("acp_reader", fuzzing::acp_reader);
}

#[test]
fn the_mcp_request_corpus_replays_without_a_panic() {
    replay("mcp_request", fuzzing::mcp_request);
}

#[test]
fn the_control_frame_corpus_replays_without_a_panic() {
    replay("control_frame", fuzzing::control_frame);
}
