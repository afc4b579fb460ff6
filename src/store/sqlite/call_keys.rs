//! The key of a `calls` row: `call_key` = run_key * 2^32 + generation * 2^20 + call_index,
//! one integer, so the table's rowid B-tree is the only one a settled call writes, and a
//! run's rows, or one generation's, are one range of it read in key order. The run's part is
//! that of its event keys (`events.rs`); a generation above [`MAX_GENERATION`] or an index
//! above [`MAX_CALL_INDEX`] has no key and is refused, naming it.

use rusqlite::{Connection, OptionalExtension};

use super::connection::Context;
use super::events::run_base;
use crate::model::RunId;
use crate::store::{StoreError, StoreResult};

/// How many keys each run has.
const KEYS_PER_RUN: i64 = 1 << 32;
/// How many keys each generation has: the bits below the generation's.
const KEYS_PER_GENERATION: i64 = 1 << 20;

/// The highest generation a key holds (12 bits); the engine stops resuming a run there.
pub(super) const MAX_GENERATION: u32 = crate::model::MAX_GENERATION;
/// The highest call index a key holds (20 bits), far above the 10,000 calls `maxAgents`
/// allows a generation.
pub(super) const MAX_CALL_INDEX: u32 = (1 << 20) - 1;

const _: () = assert!((MAX_GENERATION as i64 + 1) * KEYS_PER_GENERATION == KEYS_PER_RUN);

/// The key range of one run's call rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CallKeys {
    base: i64,
}

impl CallKeys {
    pub(super) fn of(run_key: i64, run_id: &RunId) -> StoreResult<CallKeys> {
        Ok(CallKeys {
            base: run_base(run_key, run_id, "calls")?,
        })
    }

    /// The run's own key.
    pub(super) fn run_key(self) -> i64 {
        self.base / KEYS_PER_RUN
    }

    /// The first and the last key of the run.
    pub(super) fn run(self) -> [i64; 2] {
        [self.base, self.base + (KEYS_PER_RUN - 1)]
    }

    /// The first and the last key of one generation of the run.
    pub(super) fn generation(self, generation: u32, run_id: &RunId) -> StoreResult<[i64; 2]> {
        let first = self.key(generation, 0, run_id)?;
        Ok([first, first + (KEYS_PER_GENERATION - 1)])
    }

    /// The key of call `index` of `generation`.
    pub(super) fn key(self, generation: u32, index: u32, run_id: &RunId) -> StoreResult<i64> {
        if generation > MAX_GENERATION {
            return Err(StoreError::Io(format!(
                "run {run_id}: generation {generation} is beyond the {MAX_GENERATION} \
                 generations a run may reach"
            )));
        }
        if index > MAX_CALL_INDEX {
            return Err(StoreError::Io(format!(
                "run {run_id}: call index {index} is beyond the {MAX_CALL_INDEX} calls a \
                 generation may hold"
            )));
        }
        Ok(self.base + i64::from(generation) * KEYS_PER_GENERATION + i64::from(index))
    }

    /// The generation and index of `key`, when it is a key of this run.
    pub(super) fn locate(self, key: i64) -> Option<(u32, u32)> {
        let offset = key.checked_sub(self.base)?;
        if !(0..KEYS_PER_RUN).contains(&offset) {
            return None;
        }
        let generation = u32::try_from(offset / KEYS_PER_GENERATION).ok()?;
        let index = u32::try_from(offset % KEYS_PER_GENERATION).ok()?;
        Some((generation, index))
    }
}

/// The generation of the run's last row.
pub(super) const LATEST_GENERATION: &str = "SELECT generation FROM calls
     WHERE call_key BETWEEN ?1 AND ?2 ORDER BY call_key DESC LIMIT 1";

/// The run's latest generation with any call, a row or in a block: one descent of each
/// key from the run's end.
pub(super) fn latest_generation(
    connection: &Connection,
    keys: CallKeys,
    run_id: &RunId,
) -> StoreResult<Option<u32>> {
    let doing = || format!("read the latest generation of run {run_id}");
    let row: Option<u32> = connection
        .prepare_cached(LATEST_GENERATION)
        .and_then(|mut statement| statement.query_row(keys.run(), |row| row.get(0)).optional())
        .context(doing)?;
    let block = super::call_blocks::last_key(connection, keys.run())?
        .and_then(|key| keys.locate(key))
        .map(|(generation, _)| generation);
    Ok(row.max(block))
}
