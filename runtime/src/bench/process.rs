//! What this process spent, read from `/proc` (Linux): CPU time and context
//! switches of every thread. No `unsafe`, no new dependency: `getrusage`
//! would need one or the other.

use std::path::Path;

/// The process's CPU time and context switches so far.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProcessUsage {
    /// User plus system CPU time of every thread, in microseconds.
    pub cpu_us: u64,
    /// Voluntary plus involuntary context switches of every thread.
    pub context_switches: u64,
}

/// The process's resident set size in bytes (`/proc/self/statm`; 0 where
/// it cannot be read). The page size of every Linux target cohort builds for
/// is 4 KiB.
pub(crate) fn resident_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else { return 0 };
    let pages = statm.split_whitespace().nth(1).and_then(|field| field.parse::<u64>().ok()).unwrap_or(0);
    pages * 4096
}

/// Clock ticks per second of `/proc/self/stat` times (`sysconf(_SC_CLK_TCK)`,
/// 100 on every Linux this runs on).
const CLOCK_TICKS_PER_SEC: u64 = 100;

impl ProcessUsage {
    /// Read it now; `None` if `/proc` is not there (not Linux).
    pub(crate) fn now() -> Option<ProcessUsage> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name is in parentheses and may hold spaces: fields
        // are counted from the last ')'. utime and stime are fields 14, 15.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks = |index: usize| fields.get(index).and_then(|field| field.parse::<u64>().ok());
        // After ")" the fields start at field 3 (state): field n is index n - 3.
        let cpu_ticks = ticks(14 - 3)? + ticks(15 - 3)?;
        let cpu_us = cpu_ticks * (1_000_000 / CLOCK_TICKS_PER_SEC);
        Some(ProcessUsage { cpu_us, context_switches: context_switches(Path::new("/proc/self/task")) })
    }

    /// What was spent since `earlier`.
    pub(crate) fn since(self, earlier: ProcessUsage) -> ProcessUsage {
        ProcessUsage {
            cpu_us: self.cpu_us.saturating_sub(earlier.cpu_us),
            context_switches: self.context_switches.saturating_sub(earlier.context_switches),
        }
    }
}

/// Context switches summed over every thread (a thread that ended takes its
/// count with it: read before and after with the same threads alive).
fn context_switches(tasks: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(tasks) else { return 0 };
    entries
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .map(|status| {
            status
                .lines()
                .filter(|line| {
                    line.starts_with("voluntary_ctxt_switches") || line.starts_with("nonvoluntary_ctxt_switches")
                })
                .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_and_grows_with_work() {
        let before = ProcessUsage::now().expect("/proc is mounted");
        let mut x = 0u64;
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(100) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let spent = ProcessUsage::now().expect("/proc is mounted").since(before);
        assert!(spent.cpu_us > 0, "{spent:?}");
    }
}
