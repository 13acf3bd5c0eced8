//! Warnings that repeat, logged once per window with a count (O1).
//!
//! Why: one misconfigured peer (a wrong cluster id, say) used to make each
//! node write the same refusal thousands of times a second, about 20 GB of
//! log a day, burying everything else. A warning here names what happened
//! (`what`, a short phrase that is also the key) and whom it is about
//! (`subject`: the node that logs it, with a peer's IP address or node id,
//! a group, or a refusal's reason; several nodes in one process each
//! have their own windows). The
//! first of a kind in a [`REPEAT_WINDOW`] is logged; the ones after it in the
//! same window are only counted, and [`flush`] (the supervisor calls it
//! every check) logs "N more in the last 10 s" once the window has ended,
//! and opens the next: a warning that goes on costs one line per window. One
//! that stopped is logged in full when it comes back. The metrics count
//! every one (`cohort_refusals_total` and friends); the log says that it
//! happens, to whom, and how often.
//!
//! The table is process-wide, like the `tracing` subscriber it writes to
//! (several nodes in one process share it; their subjects differ), and
//! bounded: past [`REPEAT_KEYS_MAX`] open windows, new subjects share one
//! window per `what`.

use std::collections::HashMap;
use std::fmt::Display;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// How long after a logged warning its repeats are only counted.
pub(crate) const REPEAT_WINDOW: Duration = Duration::from_secs(10);

/// The most windows open at once; past it, new subjects are counted under
/// [`OTHER_SUBJECTS`].
pub(crate) const REPEAT_KEYS_MAX: usize = 1024;

/// The subject that stands for every subject past [`REPEAT_KEYS_MAX`].
pub(crate) const OTHER_SUBJECTS: &str = "(other subjects)";

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    what: &'static str,
    subject: String,
}

#[derive(Clone, Copy, Debug)]
struct Window {
    opened: Instant,
    /// Repeats counted, not logged, since the window opened.
    repeats: u64,
}

/// Repeats counted in a window that has ended: what [`flush`] logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The warning's phrase.
    pub(crate) what: &'static str,
    /// Whom it was about.
    pub(crate) subject: String,
    /// How many were not logged.
    pub(crate) repeats: u64,
}

/// Open windows by warning and subject.
#[derive(Debug)]
pub(crate) struct Repeats {
    window: Duration,
    open: Mutex<HashMap<Key, Window>>,
}

impl Repeats {
    /// A table whose windows last `window`.
    pub(crate) fn new(window: Duration) -> Repeats {
        assert!(!window.is_zero(), "a window of zero would log every repeat");
        Repeats { window, open: Mutex::new(HashMap::new()) }
    }

    /// Whether a warning `what` about `subject` at `now` is to be logged
    /// (`true`) or only counted; and the summary of its ended window if
    /// [`Repeats::ended`] has not reported it yet.
    pub(crate) fn admit(&self, what: &'static str, subject: &dyn Display, now: Instant) -> (bool, Option<Summary>) {
        let mut open = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut key = Key { what, subject: subject.to_string() };
        if !open.contains_key(&key) && open.len() >= REPEAT_KEYS_MAX {
            key.subject = OTHER_SUBJECTS.to_string();
        }
        match open.get_mut(&key) {
            Some(window) if now.saturating_duration_since(window.opened) < self.window => {
                window.repeats += 1;
                (false, None)
            }
            Some(window) => {
                let summary = (window.repeats > 0).then(|| Summary {
                    what,
                    subject: key.subject.clone(),
                    repeats: window.repeats,
                });
                *window = Window { opened: now, repeats: 0 };
                (true, summary)
            }
            None => {
                debug_assert!(
                    open.len() < REPEAT_KEYS_MAX || key.subject == OTHER_SUBJECTS,
                    "past the bound only the shared subject opens a window"
                );
                open.insert(key, Window { opened: now, repeats: 0 });
                (true, None)
            }
        }
    }

    /// The windows that ended by `now` with repeats, to summarise, in a
    /// stable order (by `what`, then subject). Each of them opens again at
    /// `now`, so a warning that goes on repeating costs one line per
    /// window; one that stopped has its window closed, and is logged in
    /// full when it comes back.
    pub(crate) fn ended(&self, now: Instant) -> Vec<Summary> {
        let mut open = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut summaries = Vec::new();
        open.retain(|key, window| {
            if now.saturating_duration_since(window.opened) < self.window {
                return true;
            }
            if window.repeats == 0 {
                return false;
            }
            summaries.push(Summary { what: key.what, subject: key.subject.clone(), repeats: window.repeats });
            *window = Window { opened: now, repeats: 0 };
            true
        });
        summaries.sort_by(|a, b| (a.what, &a.subject).cmp(&(b.what, &b.subject)));
        summaries
    }
}

/// The process's table.
static REPEATS: LazyLock<Repeats> = LazyLock::new(|| Repeats::new(REPEAT_WINDOW));

/// Whether to log a warning `what` about `subject` now (the first in its
/// window); its repeats are counted, and summarised by `flush` (which a
/// node's supervisor calls every check).
pub fn admit(what: &'static str, subject: &dyn Display) -> bool {
    let (log, summary) = REPEATS.admit(what, subject, Instant::now());
    if let Some(summary) = summary {
        summarise(&summary);
    }
    log
}

/// Log "N more in the last 10 s" for every window that ended with repeats.
pub(crate) fn flush() {
    for summary in REPEATS.ended(Instant::now()) {
        summarise(&summary);
    }
}

fn summarise(Summary { what, subject, repeats }: &Summary) {
    let window_secs = REPEAT_WINDOW.as_secs();
    tracing::warn!(
        what,
        subject = %subject,
        repeats,
        window_secs,
        "{what} ({subject}): {repeats} more in the last {window_secs} s"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn summary(what: &'static str, subject: &str, repeats: u64) -> Summary {
        Summary { what, subject: subject.into(), repeats }
    }

    #[test]
    fn o1_the_first_is_logged_and_the_repeats_in_its_window_only_counted() {
        let repeats = Repeats::new(10 * SECOND);
        let start = Instant::now();
        assert_eq!(repeats.admit("peer connection refused", &"10.0.0.7", start), (true, None));
        for i in 1..=1000u32 {
            let at = start + SECOND * i / 200;
            assert_eq!(repeats.admit("peer connection refused", &"10.0.0.7", at), (false, None));
        }
        // Another subject, and another warning, each have a window of their own.
        assert_eq!(repeats.admit("peer connection refused", &"10.0.0.8", start), (true, None));
        assert_eq!(repeats.admit("peer dial failed", &"10.0.0.7", start), (true, None));
        assert_eq!(repeats.ended(start + 9 * SECOND), vec![], "no window ended yet");
        let ended = repeats.ended(start + 10 * SECOND);
        assert_eq!(ended, vec![summary("peer connection refused", "10.0.0.7", 1000)], "only windows with repeats");
        // A warning that goes on repeating costs one summary per window.
        let at = start + 11 * SECOND;
        assert_eq!(repeats.admit("peer connection refused", &"10.0.0.7", at), (false, None));
        assert_eq!(repeats.ended(start + 20 * SECOND), vec![summary("peer connection refused", "10.0.0.7", 1)]);
        // Once it stopped, its window closes, and it is logged in full again.
        assert_eq!(repeats.ended(start + 30 * SECOND), vec![]);
        let at = start + 31 * SECOND;
        assert_eq!(repeats.admit("peer connection refused", &"10.0.0.7", at), (true, None));
    }

    #[test]
    fn o1_a_repeat_after_its_window_is_logged_with_the_summary_no_flush_reported() {
        let repeats = Repeats::new(10 * SECOND);
        let start = Instant::now();
        assert_eq!(repeats.admit("x", &1, start), (true, None));
        assert_eq!(repeats.admit("x", &1, start + SECOND), (false, None));
        assert_eq!(repeats.admit("x", &1, start + 2 * SECOND), (false, None));
        assert_eq!(repeats.admit("x", &1, start + 10 * SECOND), (true, Some(summary("x", "1", 2))));
        assert_eq!(repeats.admit("x", &1, start + 11 * SECOND), (false, None));
    }

    #[test]
    fn o1_the_table_is_bounded_and_extra_subjects_share_a_window() {
        let repeats = Repeats::new(10 * SECOND);
        let start = Instant::now();
        for subject in 0..REPEAT_KEYS_MAX {
            assert_eq!(repeats.admit("x", &subject, start), (true, None));
        }
        assert_eq!(repeats.admit("x", &"one more", start), (true, None), "the shared window opens");
        assert_eq!(repeats.admit("x", &"and another", start), (false, None), "and counts the rest");
        let ended = repeats.ended(start + 10 * SECOND);
        assert_eq!(ended, vec![summary("x", OTHER_SUBJECTS, 1)]);
        assert_eq!(repeats.open.lock().expect("lock").len(), 1, "windows without repeats are closed");
    }
}
