//! Durable timers stored with a run: the automatic resume at a provider's usage reset. A run
//! paused on a usage limit with a known reset moment resumes itself then, plus a few seconds
//! of jitter, as if its owner had called `resume`.
//!
//! Who does what:
//! - the adapter failure parser (`acp`) reads the reset moment out of a usage-limit error,
//!   and the run's record keeps it (`RunRecord::reset_at`);
//! - this room decides, when such a pause is recorded, whether and when the run resumes by
//!   itself ([`schedule`]), and says why not when it does not ([`Schedule`]'s text);
//! - the record keeps the decision (`RunRecord::auto_resume`), written with the pause in the
//!   same fenced row write, so it survives restarts, succession and replica takeover;
//! - the engine's timer loop asks the store for runs whose moment has come
//!   (`Housekeeping::resumes_due`) and resumes each with an operation id derived from its due
//!   moment, so two processes that both see it start one generation (the second gets the
//!   first's receipt, or finds the run no longer paused);
//! - a manual `resume` (an edit is one), a `stop`, and any end of a generation other than a
//!   usage-limit pause clear the due moment.
//!
//! Invariants: a timer fires at most once (a resume clears it in the row it writes); a run
//! resumes by itself at most [`AutoResumePolicy::max_resumes`] times in a row, counted since
//! its owner's last resume, so a wrong parse cannot loop; a pause without a known reset
//! schedules nothing and says so; a run (`meta.autoResume: false`, `--no-auto-resume`) or the
//! process (`AGENTPRISM_AUTO_RESUME=off`) may opt out, and then nothing is scheduled.
//!
//! This room reads the run model and nothing above it: the store keeps what it decides, the
//! engine drives it.

use serde_json::Value;

use crate::model::{PauseReason, RunRecord, RunStatus};

/// How many times in a row a run may resume by itself unless the process says otherwise.
pub const DEFAULT_MAX_RESUMES: u32 = 3;
/// The highest `AGENTPRISM_AUTO_RESUME` count accepted.
pub const MAX_RESUMES_CEILING: u32 = 100;
/// The least and the greatest wait after the reset moment, in ms: runs that share an
/// account's limit do not all call the provider in the same second.
pub const JITTER_MS: (i64, i64) = (1_000, 4_000);

/// The process's automatic-resume setting (`AGENTPRISM_AUTO_RESUME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoResumePolicy {
    /// Automatic resumes a run may have in a row; 0 turns automatic resume off.
    pub max_resumes: u32,
}

impl Default for AutoResumePolicy {
    fn default() -> Self {
        AutoResumePolicy {
            max_resumes: DEFAULT_MAX_RESUMES,
        }
    }
}

impl AutoResumePolicy {
    /// Reads the variable's value: unset or `on` is the default, `off`/`0` turns it off, a
    /// number from 1 to [`MAX_RESUMES_CEILING`] sets how many automatic resumes in a row a
    /// run may have.
    pub fn parse(value: Option<&str>) -> Result<AutoResumePolicy, String> {
        let Some(value) = value.map(str::trim) else {
            return Ok(AutoResumePolicy::default());
        };
        match value.to_ascii_lowercase().as_str() {
            "" | "on" | "true" | "yes" => Ok(AutoResumePolicy::default()),
            "off" | "false" | "no" => Ok(AutoResumePolicy { max_resumes: 0 }),
            number => match number.parse::<u32>() {
                Ok(n) if n <= MAX_RESUMES_CEILING => Ok(AutoResumePolicy { max_resumes: n }),
                _ => Err(format!(
                    "expected on, off or a number of automatic resumes from 0 to {MAX_RESUMES_CEILING}, got {value:?}"
                )),
            },
        }
    }
}

/// `meta.autoResume` of a script: absent, or a boolean. Anything else is refused at
/// preparation with this message, naming the field.
pub fn meta_setting(meta: &Value) -> Result<Option<bool>, String> {
    match meta.get("autoResume") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(on)) => Ok(Some(*on)),
        Some(other) => Err(format!(
            "meta.autoResume must be true or false, got {other}"
        )),
    }
}

/// What [`schedule`] decided for a run that paused on a usage limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// It resumes by itself at this moment (Unix ms, jitter included).
    At(i64),
    /// The provider's error said no reset moment that could be read.
    NoReset,
    /// Turned off, by whom.
    Off(OptOut),
    /// It already resumed by itself this many times in a row.
    UsedUp(u32),
}

/// Who turned automatic resume off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptOut {
    /// `meta.autoResume: false`.
    Script,
    /// `--no-auto-resume` when the run was started or last resumed.
    Owner,
    /// `AGENTPRISM_AUTO_RESUME=off` in the process that recorded the pause.
    Process,
}

impl Schedule {
    /// The due moment, when there is one.
    pub fn due_at(&self) -> Option<i64> {
        match self {
            Schedule::At(at) => Some(*at),
            _ => None,
        }
    }

    /// What status and the CLI say about it, after the reset moment itself.
    pub fn describe(&self) -> String {
        match self {
            Schedule::At(at) => format!("resumes by itself at {}", crate::util::iso_time(*at)),
            Schedule::NoReset => {
                "no reset time known: nothing resumes it by itself; resume it once the limit lifts"
                    .to_owned()
            }
            Schedule::Off(OptOut::Script) => {
                "automatic resume is off for this run (meta.autoResume: false)".to_owned()
            }
            Schedule::Off(OptOut::Owner) => {
                "automatic resume is off for this run (--no-auto-resume)".to_owned()
            }
            Schedule::Off(OptOut::Process) => {
                "automatic resume is off (AGENTPRISM_AUTO_RESUME=off)".to_owned()
            }
            Schedule::UsedUp(count) => {
                format!("it already resumed by itself {count} times in a row; resume it by hand")
            }
        }
    }
}

/// Decides the automatic resume of `record`, which its generation just left: `None` unless it
/// paused on a usage limit. Pure: the jitter comes from the run id and the reset moment, so a
/// decision taken twice is the same.
pub fn schedule(record: &RunRecord, policy: AutoResumePolicy) -> Option<Schedule> {
    if record.status != RunStatus::Paused || record.pause_reason != Some(PauseReason::UsageLimit) {
        return None;
    }
    Some(if let Some(opt_out) = opt_out(record, policy) {
        Schedule::Off(opt_out)
    } else if record.auto_resume.count >= policy.max_resumes {
        Schedule::UsedUp(record.auto_resume.count)
    } else {
        match record.reset_at {
            Some(reset_at) => Schedule::At(reset_at + jitter_ms(record.run_id.as_str(), reset_at)),
            None => Schedule::NoReset,
        }
    })
}

/// What status says about a paused run's automatic resume, read back from its record: the
/// stored due moment, else why there is none. `None` for a run not paused on a usage limit.
pub fn describe(record: &RunRecord, policy: AutoResumePolicy) -> Option<String> {
    if let Some(at) = record.auto_resume.due_at {
        return Some(Schedule::At(at).describe());
    }
    schedule(record, policy).map(|decided| match decided {
        // Schedulable, yet nothing stored: the process that recorded the pause had it off,
        // or the timer was cancelled since (the run's `autoResumeCancelled` event says why).
        Schedule::At(_) => "nothing resumes it by itself: automatic resume was off where it \
             paused, or was cancelled since; resume it by hand"
            .to_owned(),
        other => other.describe(),
    })
}

/// The operation id a timer's resume carries: the same for every process that fires the
/// same timer, so only one generation starts.
pub fn operation_id(due_at: i64) -> String {
    format!("auto-resume-{due_at}")
}

fn opt_out(record: &RunRecord, policy: AutoResumePolicy) -> Option<OptOut> {
    if meta_setting(&record.meta).ok().flatten() == Some(false) {
        Some(OptOut::Script)
    } else if record.limits.auto_resume == Some(false) {
        Some(OptOut::Owner)
    } else if policy.max_resumes == 0 {
        Some(OptOut::Process)
    } else {
        None
    }
}

/// A wait in [`JITTER_MS`] that differs between runs sharing a reset moment.
fn jitter_ms(run_id: &str, reset_at: i64) -> i64 {
    let digest = crate::util::sha256_hex(format!("{run_id}@{reset_at}").as_bytes());
    let spread = u64::from_str_radix(&digest[..8], 16).unwrap_or_default();
    let (least, most) = JITTER_MS;
    least + (spread % (most - least + 1) as u64) as i64
}

#[cfg(test)]
mod tests;
