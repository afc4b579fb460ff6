//! Which legacy sessions are interested in which runs, capped per session: the one table the
//! Claude Code channels (the runs a session follows, with the messages it has seen) and the
//! tasks layer (the run tasks a session created, with the status it last saw) keep.
//!
//! A session that names one run more than the cap forgets the run it named longest ago, so a
//! long-lived session holds at most the cap however many runs it touches; a closed session
//! is forgotten whole.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use crate::model::RunId;

/// Per run, per session, a `V`; per session, its runs in the order it named them.
pub(crate) struct SessionRuns<V> {
    /// Runs one session is interested in at once.
    cap: usize,
    by_run: HashMap<RunId, HashMap<String, V>>,
    /// For the cap, and to forget a closed session.
    by_session: HashMap<String, VecDeque<RunId>>,
}

impl<V> SessionRuns<V> {
    pub(super) fn new(cap: usize) -> SessionRuns<V> {
        SessionRuns {
            cap,
            by_run: HashMap::new(),
            by_session: HashMap::new(),
        }
    }

    /// `session` names `run_id`: the run becomes its newest if it is new to it (forgetting
    /// the oldest beyond the cap), and the session's value for the run is returned to be
    /// written or updated.
    pub(crate) fn name(&mut self, session: &str, run_id: &RunId) -> Entry<'_, String, V> {
        let named = self.by_session.entry(session.to_owned()).or_default();
        if !named.contains(run_id) {
            named.push_back(run_id.clone());
            while named.len() > self.cap {
                if let Some(oldest) = named.pop_front() {
                    forget(&mut self.by_run, &oldest, session);
                }
            }
        }
        self.by_run
            .entry(run_id.clone())
            .or_default()
            .entry(session.to_owned())
    }

    /// Whether some session is interested in `run_id`.
    pub(crate) fn has_run(&self, run_id: &RunId) -> bool {
        self.by_run.contains_key(run_id)
    }

    /// The sessions interested in `run_id`, with their values.
    pub(crate) fn sessions(&self, run_id: &RunId) -> Option<&HashMap<String, V>> {
        self.by_run.get(run_id)
    }

    pub(crate) fn sessions_mut(&mut self, run_id: &RunId) -> Option<&mut HashMap<String, V>> {
        self.by_run.get_mut(run_id)
    }

    /// Every run some session is interested in.
    pub(crate) fn runs(&self) -> Vec<RunId> {
        self.by_run.keys().cloned().collect()
    }

    /// A legacy session ended: it is interested in nothing any more.
    pub(crate) fn session_closed(&mut self, session: &str) {
        for run_id in self.by_session.remove(session).unwrap_or_default() {
            forget(&mut self.by_run, &run_id, session);
        }
    }

    /// Nobody is interested in `run_id` any more.
    pub(crate) fn forget_run(&mut self, run_id: &RunId) {
        for session in self.by_run.remove(run_id).unwrap_or_default().keys() {
            if let Some(named) = self.by_session.get_mut(session) {
                named.retain(|known| known != run_id);
                if named.is_empty() {
                    self.by_session.remove(session);
                }
            }
        }
    }
}

fn forget<V>(by_run: &mut HashMap<RunId, HashMap<String, V>>, run_id: &RunId, session: &str) {
    if let Some(sessions) = by_run.get_mut(run_id) {
        sessions.remove(session);
        if sessions.is_empty() {
            by_run.remove(run_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: usize = 8;

    fn run(index: usize) -> RunId {
        RunId::parse(&format!("run{index}-abc")).expect("a run id")
    }

    fn interested(table: &SessionRuns<u32>, session: &str, run_id: &RunId) -> bool {
        table
            .sessions(run_id)
            .is_some_and(|sessions| sessions.contains_key(session))
    }

    #[test]
    fn a_session_names_at_most_the_cap_and_forgets_the_oldest_named() {
        let mut table = SessionRuns::new(CAP);
        for index in 0..CAP {
            table.name("a", &run(index)).or_insert(0);
        }
        // At the cap everything named is kept; naming a run again changes only its value.
        *table.name("a", &run(0)).or_insert(0) += 1;
        assert!((0..CAP).all(|index| interested(&table, "a", &run(index))));
        assert_eq!(table.sessions(&run(0)).unwrap()["a"], 1);
        // One more forgets the one named longest ago, and only it.
        table.name("a", &run(CAP)).or_insert(0);
        assert!(!interested(&table, "a", &run(0)));
        assert!(!table.has_run(&run(0)));
        assert!(interested(&table, "a", &run(1)));
        assert!(interested(&table, "a", &run(CAP)));
        assert_eq!(table.by_session["a"].len(), CAP);
        assert_eq!(table.runs().len(), CAP);
    }

    #[test]
    fn a_closed_session_and_a_forgotten_run_leave_the_others_in_place() {
        let mut table = SessionRuns::new(CAP);
        table.name("a", &run(1)).or_insert(0);
        table.name("b", &run(1)).or_insert(0);
        table.name("b", &run(2)).or_insert(0);
        table.session_closed("a");
        assert!(!interested(&table, "a", &run(1)));
        assert!(interested(&table, "b", &run(1)));
        table.forget_run(&run(1));
        assert!(!table.has_run(&run(1)));
        assert_eq!(table.by_session["b"], [run(2)]);
        table.session_closed("b");
        assert!(table.by_run.is_empty() && table.by_session.is_empty());
    }
}
