//! Pack runs ([`ScriptSource::Pack`]): the engine keeps their texts in memory only. The
//! record handed to the store carries digests in place of the script and companion texts
//! ([`concealed`]); a record loaded to execute again gets its texts back from the sources,
//! each checked against the digest the run recorded ([`Engine::reveal`]), so a resume after
//! the pack changed is refused instead of running a different script under the same id.

use crate::engine::manager::{Engine, EngineError, EngineResult, Rejected};
use crate::engine::prepare::companions::MAX_COMPANION_BYTES;
use crate::engine::sources::SourceError;
use crate::model::{RunRecord, ScriptSource, content_digest};

/// `record` as the store may keep it: for a pack run, every text replaced by its digest.
pub(super) fn concealed(record: &RunRecord) -> RunRecord {
    let mut stored = record.clone();
    if record.script_source == ScriptSource::Pack {
        stored.script = content_digest(record.script.as_bytes());
        for text in stored.files.values_mut() {
            *text = content_digest(text.as_bytes());
        }
    }
    stored
}

impl Engine {
    /// Puts the texts of a loaded pack run back: the script at its recorded path and each
    /// companion file, read from the sources and refused when its digest is not the one
    /// recorded. Other runs are left as they are.
    pub(super) async fn reveal(&self, record: &mut RunRecord) -> EngineResult<()> {
        if record.script_source != ScriptSource::Pack {
            return Ok(());
        }
        let run_id = record.run_id.clone();
        let refused = |message: String| {
            EngineError::Rejected(Rejected::Script(format!(
                "cannot continue run {run_id}: {message}"
            )))
        };
        let sources = self.inner.sources.clone();
        if !sources.confidential() {
            return Err(refused(
                "it runs a script of a workflows pack, and this process serves none (start the server with the same --workflows-pack)".to_owned(),
            ));
        }
        let script = sources
            .reread_script(&record.script_file)
            .await
            .map_err(|error| {
                refused(format!("its script is not in the workflows pack: {error}"))
            })?;
        let digest = content_digest(&script.bytes);
        if digest != record.script {
            return Err(refused(format!(
                "its script {} changed in the workflows pack since the run started (the run recorded {}, the pack now holds {digest}); a pack run continues only with the script it started with: start a new run",
                record.script_file.display(),
                record.script
            )));
        }
        let text = String::from_utf8(script.bytes)
            .map_err(|_| refused("its script in the workflows pack is not UTF-8".to_owned()))?;
        let project_dir = record.project_dir.clone();
        let mut files = std::mem::take(&mut record.files);
        let read = tokio::task::spawn_blocking(move || {
            for (path, recorded) in files.iter_mut() {
                let contents = sources
                    .read_project_file(&project_dir, path, MAX_COMPANION_BYTES)
                    .map_err(|error: SourceError| {
                        format!("its companion file {path:?} cannot be read from the workflows pack: {error}")
                    })?;
                let digest = content_digest(&contents.bytes);
                if digest != *recorded {
                    return Err(format!(
                        "its companion file {path:?} changed in the workflows pack since the run started (the run recorded {recorded}, the pack now holds {digest}); start a new run"
                    ));
                }
                *recorded = String::from_utf8(contents.bytes)
                    .map_err(|_| format!("its companion file {path:?} is not UTF-8"))?;
            }
            Ok(files)
        })
        .await
        .map_err(|error| refused(format!("reading the workflows pack failed: {error}")))?;
        record.files = read.map_err(refused)?;
        record.script = text;
        Ok(())
    }
}
