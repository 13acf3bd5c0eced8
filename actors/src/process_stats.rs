//! What the kernel says about this process and about the disk it writes
//! to, read on each scrape: CPU time, resident memory, threads and open
//! file descriptors from `/proc/self`, and the free space of the data
//! directory's filesystem from `statvfs`.
//!
//! Why by hand: these are a few fields of a few text files, and a crate
//! that reads all of `/proc` for them would be the heaviest dependency of
//! the metrics. The files are the kernel's, but they are still input: each
//! parser says why a text is unusable instead of panicking, and a value
//! that cannot be read leaves its family out of the scrape rather than
//! exporting a made-up zero. Off Linux there is no `/proc/self`, and the
//! process families are simply absent.

use std::path::Path;

/// The fields of `/proc/self/stat` the metrics use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ProcessStat {
    /// User plus system CPU time, in seconds.
    pub(crate) cpu_seconds: f64,
    /// Threads of the process.
    pub(crate) threads: u64,
}

/// The process's figures, each `None` where the kernel did not say.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ProcessStats {
    /// `/proc/self/stat`: CPU time and threads.
    pub(crate) stat: Option<ProcessStat>,
    /// Resident memory, from `/proc/self/statm`.
    pub(crate) resident_memory_bytes: Option<u64>,
    /// Entries of `/proc/self/fd`.
    pub(crate) open_fds: Option<u64>,
    /// The soft limit on open files, from `/proc/self/limits` (`None` when
    /// unlimited).
    pub(crate) max_fds: Option<u64>,
}

/// Files of `/proc/self` read at most this many bytes: the largest of them
/// (`limits`) is about 1.4 KiB, so a longer one is not what we expect.
const PROC_FILE_SIZE_MAX_BYTES: u64 = 16 * 1024;

/// Entries of `/proc/self/fd` counted at most; past this the count says
/// "at least". Far above any `ulimit -n` a node is run with.
const OPEN_FDS_COUNTED_MAX: u64 = 1 << 24;

fn read_proc(name: &str) -> Option<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(Path::new("/proc/self").join(name)).ok()?;
    let mut text = String::new();
    file.take(PROC_FILE_SIZE_MAX_BYTES).read_to_string(&mut text).ok()?;
    Some(text)
}

impl ProcessStats {
    /// Read the figures now.
    pub(crate) fn read() -> ProcessStats {
        let ticks_per_second = rustix::param::clock_ticks_per_second();
        let page_size_bytes = u64::try_from(rustix::param::page_size()).unwrap_or(0);
        ProcessStats {
            stat: read_proc("stat").and_then(|text| parse_stat(&text, ticks_per_second).ok()),
            resident_memory_bytes: read_proc("statm").and_then(|text| parse_statm(&text, page_size_bytes).ok()),
            open_fds: count_open_fds(),
            max_fds: read_proc("limits").and_then(|text| parse_limits(&text).ok().flatten()),
        }
    }
}

/// Count the entries of `/proc/self/fd` (the directory's own descriptor
/// included, as every Prometheus client counts it).
fn count_open_fds() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    let mut count = 0;
    for entry in entries {
        if entry.is_ok() {
            count += 1;
        }
        if count >= OPEN_FDS_COUNTED_MAX {
            break;
        }
    }
    Some(count)
}

/// CPU time and threads from `/proc/self/stat`. Its second field, the
/// command name, is in parentheses and may itself hold spaces and
/// parentheses, so the fields are counted from the last `)`.
pub(crate) fn parse_stat(text: &str, ticks_per_second: u64) -> Result<ProcessStat, &'static str> {
    if ticks_per_second == 0 {
        return Err("the clock tick rate is zero");
    }
    let (_, rest) = text.rsplit_once(')').ok_or("no `)` after the command name")?;
    // After the name: state (field 3), ... utime (14), stime (15), ...
    // num_threads (20). Index 0 here is field 3.
    let fields: Vec<&str> = rest.split_ascii_whitespace().take(18).collect();
    let field = |number: usize| -> Result<u64, &'static str> {
        let text = fields.get(number - 3).ok_or("fewer fields than expected")?;
        text.parse::<u64>().map_err(|_| "a field is not a number")
    };
    let ticks = field(14)?.checked_add(field(15)?).ok_or("CPU ticks overflow")?;
    Ok(ProcessStat { cpu_seconds: ticks as f64 / ticks_per_second as f64, threads: field(20)? })
}

/// Resident memory from `/proc/self/statm`: its second field, in pages.
pub(crate) fn parse_statm(text: &str, page_size_bytes: u64) -> Result<u64, &'static str> {
    if page_size_bytes == 0 {
        return Err("the page size is zero");
    }
    let pages = text.split_ascii_whitespace().nth(1).ok_or("no resident field")?;
    let pages: u64 = pages.parse().map_err(|_| "the resident field is not a number")?;
    pages.checked_mul(page_size_bytes).ok_or("resident bytes overflow")
}

/// The soft limit on open files from `/proc/self/limits`, whose line reads
/// `Max open files  <soft>  <hard>  files`; `None` for `unlimited`.
pub(crate) fn parse_limits(text: &str) -> Result<Option<u64>, &'static str> {
    let line = text.lines().find_map(|line| line.strip_prefix("Max open files")).ok_or("no `Max open files` line")?;
    let soft = line.split_ascii_whitespace().next().ok_or("no soft limit")?;
    if soft == "unlimited" {
        return Ok(None);
    }
    soft.parse().map(Some).map_err(|_| "the soft limit is not a number")
}

/// The filesystem that holds a directory: its size and what an unprivileged
/// writer may still use (`f_bavail`, which leaves out blocks reserved for root).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DiskSpace {
    /// Bytes the filesystem holds, used and free.
    pub(crate) size_bytes: u64,
    /// Bytes the node may still write.
    pub(crate) free_bytes: u64,
}

impl DiskSpace {
    /// The space of the filesystem holding `dir`, if `statvfs` answers.
    pub(crate) fn of(dir: &Path) -> Option<DiskSpace> {
        let stats = rustix::fs::statvfs(dir).ok()?;
        let size_bytes = stats.f_blocks.checked_mul(stats.f_frsize)?;
        let free_bytes = stats.f_bavail.checked_mul(stats.f_frsize)?;
        debug_assert!(free_bytes <= size_bytes, "free {free_bytes} of {size_bytes} bytes");
        Some(DiskSpace { size_bytes, free_bytes: free_bytes.min(size_bytes) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn o2_stat_fields_are_counted_from_the_last_parenthesis() {
        let text = "4242 (cohort (node) x) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 130 0 0 20 0 17 0 123 456 789\n";
        let stat = parse_stat(text, 100).expect("a sound stat line");
        assert_eq!(stat, ProcessStat { cpu_seconds: 3.8, threads: 17 });
    }

    #[test]
    fn o2_unusable_proc_texts_are_refused_not_panicked_on() {
        for text in ["", "4242 cohort S 1", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 ab 1 0 0 20 0 3"] {
            assert!(parse_stat(text, 100).is_err(), "{text:?}");
        }
        assert!(parse_stat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 3", 0).is_err(), "a zero tick rate");
        let overflow = format!("1 (x) S 1 1 1 0 -1 0 0 0 0 0 {} 1 0 0 20 0 3", u64::MAX);
        assert!(parse_stat(&overflow, 100).is_err());
        assert_eq!(parse_statm("1000 250 30 1 0 200 0\n", 4096), Ok(1_024_000));
        for text in ["", "1000", "1000 many"] {
            assert!(parse_statm(text, 4096).is_err(), "{text:?}");
        }
        assert!(parse_statm(&format!("1 {}", u64::MAX), 4096).is_err());
        assert!(parse_limits("Max cpu time  unlimited  unlimited  seconds\n").is_err());
        assert!(parse_limits("Max open files  lots  lots  files\n").is_err());
    }

    #[test]
    fn o2_open_file_limit_is_read_from_its_line() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max processes             63704                63704                processes\n\
                    Max open files            1024                 524288               files\n";
        assert_eq!(parse_limits(text), Ok(Some(1024)));
        assert_eq!(parse_limits("Max open files  unlimited  unlimited  files\n"), Ok(None));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn o2_this_process_reads_its_own_figures() {
        let stats = ProcessStats::read();
        let stat = stats.stat.expect("/proc/self/stat");
        assert!(stat.threads >= 1 && stat.cpu_seconds >= 0.0, "{stat:?}");
        assert!(stats.resident_memory_bytes.is_some_and(|bytes| bytes > 0), "{stats:?}");
        assert!(stats.open_fds.is_some_and(|fds| fds >= 3), "{stats:?}");
        let space = DiskSpace::of(&std::env::temp_dir()).expect("statvfs of the temp dir");
        assert!(space.size_bytes > 0 && space.free_bytes <= space.size_bytes, "{space:?}");
    }
}
