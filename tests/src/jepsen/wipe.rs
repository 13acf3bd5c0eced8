//! H1 under the nemesis: what became of each wiped node. A node started
//! on an empty data directory hosts every voter replica as *recovering*
//! (docs/storage.md, "Rebuilding a node"); each such member, once it took
//! its group's log from a primary (or found that no member holds any),
//! counts in `cohort_recoveries_done_total` or
//! `cohort_recoveries_founded_total`. A watcher thread per wipe polls the
//! node's `/metrics` until those counters cover every group the node hosts
//! (`cohort_groups`), and records when.
//!
//! The runner asks [`Wipes::unrecovered`] before it wipes another node: a
//! group of three tolerates one member without its data, so a second wipe
//! waits until the first is known to have recovered (or is skipped).
//!
//! The counters count recoveries, not members, so the test is close but
//! not exact: a member of a life that was deleted after it recovered and
//! the member of the group's next life both count, and a re-creation in
//! the middle of a recovery can make the sum reach the hosted groups one
//! member early. A node killed before it recovered starts its counters
//! again at 0 while the members that had recovered stay so: its wipe is
//! then never seen recovered, and the runner wipes no other node (the
//! safe side). A gauge of the members still recovering would make both
//! exact; the node has none yet.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::jepsen::admin::Operator;
use crate::jepsen::history::{Clock, seconds};
use crate::jepsen::nodes::Wiped;

/// How often a watcher asks the wiped node.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// One wipe and its recovery.
#[derive(Clone, Debug, Serialize)]
pub struct WipeReport {
    /// The node (1-based).
    pub node: usize,
    /// When it was killed, its data moved away and started again (s).
    pub at_s: f64,
    /// Where its data went.
    pub moved_to: String,
    /// How much data was moved (bytes).
    pub size_bytes: u64,
    /// Seconds from the restart until every group it hosts had a member
    /// that recovered; `None`: not seen before the end of the run.
    pub recovered_after_s: Option<f64>,
    /// Members that recovered, when last asked.
    pub members_recovered: u64,
    /// Groups the node hosted, when last asked.
    pub groups_hosted: u64,
}

/// The wipes of a run and their watchers.
#[derive(Default)]
pub struct Wipes {
    records: Arc<Mutex<Vec<WipeReport>>>,
    watchers: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Wipes {
    /// Record the wipe of node `index` at `at_s` and watch its recovery:
    /// done once the node hosts at least `groups_min` groups and every one
    /// of them recovered.
    pub fn watch(&mut self, operator: Operator, index: usize, at_s: f64, wiped: Wiped, clock: Clock, groups_min: u64) {
        let slot = {
            let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
            records.push(WipeReport {
                node: index + 1,
                at_s,
                moved_to: wiped.moved_to.display().to_string(),
                size_bytes: wiped.size_bytes,
                recovered_after_s: None,
                members_recovered: 0,
                groups_hosted: 0,
            });
            records.len() - 1
        };
        let records = Arc::clone(&self.records);
        let stop = Arc::clone(&self.stop);
        self.watchers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some((recovered, hosted)) = operator.recoveries(index) {
                    let now_s = seconds(clock.now_ns());
                    let mut records = records.lock().unwrap_or_else(PoisonError::into_inner);
                    let record = &mut records[slot];
                    record.members_recovered = recovered;
                    record.groups_hosted = hosted;
                    if hosted >= groups_min && recovered >= hosted {
                        record.recovered_after_s = Some((now_s - at_s).max(0.0));
                        return;
                    }
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }));
    }

    /// A wipe not yet known to have recovered, if any.
    pub fn unrecovered(&self) -> Option<WipeReport> {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records.iter().find(|record| record.recovered_after_s.is_none()).cloned()
    }

    /// Stop the watchers; every wipe, in order.
    pub fn finish(mut self) -> Vec<WipeReport> {
        self.stop.store(true, Ordering::Relaxed);
        for watcher in std::mem::take(&mut self.watchers) {
            let _ = watcher.join();
        }
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records.clone()
    }
}

impl Drop for Wipes {
    /// A run that ends early (an error) stops its watchers too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
