//! The physical floor of a replicated write on this machine, measured in
//! the same run as the workload: the median `fdatasync` of a 4 KiB append
//! in the data directory, plus the median round trip of a small message
//! over loopback TCP. A commit needs the primary's sync and a backup's, and
//! one round trip; on one machine the syncs share a disk.
//!
//! And a floor for bytes (D5): the disk's write bandwidth when each write
//! of the bench's op size is followed by an `fdatasync`, as a log that
//! syncs every write would see it, divided by the nodes whose logs share
//! that disk (every node of the in-process cluster: each writes every
//! write). The run's MB/s is read as a fraction of it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// Appends synced to measure the disk.
const SYNCS: usize = 200;
/// Round trips measured.
const ROUND_TRIPS: usize = 2000;
/// Bytes of one append.
const APPEND_BYTES: usize = 4096;
/// Bytes of one message.
const MESSAGE_BYTES: usize = 64;
/// The bytes floor writes for at most this long...
const BANDWIDTH_DURATION: Duration = Duration::from_secs(1);
/// ...and its file grows to at most this size.
const BANDWIDTH_FILE_MAX_BYTES: u64 = 64 * 1024 * 1024;

const _: () = assert!(cohort_messages::OPERATION_SIZE_MAX_BYTES as u64 <= BANDWIDTH_FILE_MAX_BYTES);

/// The floor of a write, in microseconds, and of bytes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Floor {
    /// Median `fdatasync` of a 4 KiB append.
    pub fdatasync_us: u64,
    /// Median loopback TCP round trip.
    pub round_trip_us: u64,
    /// Bytes per second the disk took with an `fdatasync` after each
    /// write of the op size (0 for 0-byte ops).
    pub disk_synced_bytes_per_sec: u64,
    /// Nodes whose logs share the disk.
    pub nodes_per_disk: usize,
}

impl Floor {
    /// The floor: one sync plus one round trip.
    pub(crate) fn total_us(&self) -> u64 {
        self.fdatasync_us + self.round_trip_us
    }

    /// The bytes floor: the disk's synced bandwidth over the nodes sharing it.
    pub(crate) fn bytes_per_sec(&self) -> f64 {
        self.disk_synced_bytes_per_sec as f64 / self.nodes_per_disk.max(1) as f64
    }

    /// `bytes_per_sec` of payload as a fraction of the bytes floor (0 when
    /// there is no floor, as with 0-byte ops).
    pub(crate) fn share_of_bytes(&self, bytes_per_sec: f64) -> f64 {
        let floor = self.bytes_per_sec();
        if floor > 0.0 { bytes_per_sec / floor } else { 0.0 }
    }
}

/// Measure all of it in `dir`, the bytes floor with writes of
/// `op_size_bytes` shared by `nodes`; errors name what failed.
pub(crate) fn measure(dir: &Path, op_size_bytes: usize, nodes: usize) -> Result<Floor, String> {
    Ok(Floor {
        fdatasync_us: fdatasync_us(dir)?,
        round_trip_us: round_trip_us()?,
        disk_synced_bytes_per_sec: disk_synced_bytes_per_sec(
            dir,
            op_size_bytes,
            BANDWIDTH_DURATION,
            BANDWIDTH_FILE_MAX_BYTES,
        )?,
        nodes_per_disk: nodes,
    })
}

fn median(mut samples: Vec<u64>) -> u64 {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or(0)
}

fn fdatasync_us(dir: &Path) -> Result<u64, String> {
    std::fs::create_dir_all(dir).map_err(|error| format!("creating {}: {error}", dir.display()))?;
    let path = dir.join("floor.tmp");
    let error = |what: &str, error: std::io::Error| format!("{what} {}: {error}", path.display());
    let mut file = std::fs::File::create(&path).map_err(|e| error("creating", e))?;
    let block = [0xA5u8; APPEND_BYTES];
    let mut samples = Vec::with_capacity(SYNCS);
    for _ in 0..SYNCS {
        file.write_all(&block).map_err(|e| error("writing", e))?;
        let started = Instant::now();
        file.sync_data().map_err(|e| error("syncing", e))?;
        samples.push(started.elapsed().as_micros() as u64);
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(median(samples))
}

/// Write `op_size_bytes` and `fdatasync` in `dir` until `duration` has
/// passed or the file would exceed `file_max_bytes`: the bytes written per
/// second. The file is removed afterwards.
fn disk_synced_bytes_per_sec(
    dir: &Path,
    op_size_bytes: usize,
    duration: Duration,
    file_max_bytes: u64,
) -> Result<u64, String> {
    if op_size_bytes == 0 {
        return Ok(0);
    }
    std::fs::create_dir_all(dir).map_err(|error| format!("creating {}: {error}", dir.display()))?;
    let path = dir.join("floor-bytes.tmp");
    let error = |what: &str, error: std::io::Error| format!("{what} {}: {error}", path.display());
    let mut file = std::fs::File::create(&path).map_err(|e| error("creating", e))?;
    let block = vec![0xA5u8; op_size_bytes];
    let writes_max = (file_max_bytes / op_size_bytes as u64).max(1);
    let result = write_synced(block.len(), writes_max, duration, |_| {
        file.write_all(&block)?;
        file.sync_data()
    });
    drop(file);
    let _ = std::fs::remove_file(&path);
    let (written_bytes, elapsed) = result.map_err(|e| error("writing and syncing", e))?;
    Ok((written_bytes as f64 / elapsed.as_secs_f64().max(1e-6)) as u64)
}

/// The bytes floor's disk rate with writes past the page cache
/// (`O_DIRECT`, see `direct_io`) of `block_bytes` (a multiple of
/// `direct_io::ALIGN_BYTES`), each synced, for as long and as far as
/// [`measure`] writes; `Ok(None)` if the file system refuses them.
pub(crate) fn direct_synced_bytes_per_sec(dir: &Path, block_bytes: usize) -> Result<Option<u64>, String> {
    let (duration, file_max_bytes) = (BANDWIDTH_DURATION, BANDWIDTH_FILE_MAX_BYTES);
    std::fs::create_dir_all(dir).map_err(|error| format!("creating {}: {error}", dir.display()))?;
    let path = dir.join("floor-direct.tmp");
    let error = |what: &str, error: std::io::Error| format!("{what} {}: {error}", path.display());
    let Some(file) = super::direct_io::open(&path, true).map_err(|e| error("creating", e))? else {
        let _ = std::fs::remove_file(&path);
        return Ok(None);
    };
    let block = vec![0xA5u8; block_bytes];
    if !super::direct_io::AlignedBuffer::fits(0, &block) {
        return Err(format!("a direct write of {block_bytes} bytes is not aligned"));
    }
    let mut buffer = super::direct_io::AlignedBuffer::default();
    let writes_max = (file_max_bytes / block_bytes.max(1) as u64).max(1);
    let result = write_synced(block_bytes, writes_max, duration, |offset| {
        buffer.write_at(&file, offset, &block)?;
        file.sync_data()
    });
    drop(file);
    let _ = std::fs::remove_file(&path);
    let (written_bytes, elapsed) = result.map_err(|e| error("writing directly and syncing", e))?;
    Ok(Some((written_bytes as f64 / elapsed.as_secs_f64().max(1e-6)) as u64))
}

/// Write a block of `block_bytes` and sync it (`write_synced_at`, given
/// the block's offset), `writes_max` times or until `duration` has passed
/// (once at least): the bytes written and the time it took.
fn write_synced(
    block_bytes: usize,
    writes_max: u64,
    duration: Duration,
    mut write_synced_at: impl FnMut(u64) -> std::io::Result<()>,
) -> std::io::Result<(u64, Duration)> {
    let mut written_bytes = 0u64;
    let started = Instant::now();
    for _ in 0..writes_max {
        write_synced_at(written_bytes)?;
        written_bytes += block_bytes as u64;
        if started.elapsed() >= duration {
            break;
        }
    }
    Ok((written_bytes, started.elapsed()))
}

fn round_trip_us() -> Result<u64, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|error| format!("binding loopback: {error}"))?;
    let address = listener.local_addr().map_err(|error| error.to_string())?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut message = [0u8; MESSAGE_BYTES];
        for _ in 0..ROUND_TRIPS {
            stream.read_exact(&mut message)?;
            stream.write_all(&message)?;
        }
        Ok(())
    });
    let mut stream = TcpStream::connect(address).map_err(|error| format!("connecting to loopback: {error}"))?;
    stream.set_nodelay(true).map_err(|error| error.to_string())?;
    let mut message = [7u8; MESSAGE_BYTES];
    let mut samples = Vec::with_capacity(ROUND_TRIPS);
    for _ in 0..ROUND_TRIPS {
        let started = Instant::now();
        stream.write_all(&message).map_err(|error| format!("loopback write: {error}"))?;
        stream.read_exact(&mut message).map_err(|error| format!("loopback read: {error}"))?;
        samples.push(started.elapsed().as_micros() as u64);
    }
    echo.join().map_err(|_| "the echo thread panicked".to_string())?.map_err(|error| error.to_string())?;
    Ok(median(samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn d5_the_bytes_floor_is_the_disk_divided_by_the_nodes_sharing_it() {
        let floor = Floor { disk_synced_bytes_per_sec: 90_000_000, nodes_per_disk: 3, ..Floor::default() };
        assert_eq!(floor.bytes_per_sec(), 30_000_000.0);
        assert_eq!(floor.share_of_bytes(15_000_000.0), 0.5);
        let alone = Floor { nodes_per_disk: 0, ..floor };
        assert_eq!(alone.bytes_per_sec(), 90_000_000.0, "no nodes counts as one");
        let none = Floor { disk_synced_bytes_per_sec: 0, ..floor };
        assert_eq!(none.share_of_bytes(1.0), 0.0, "no floor, no fraction");
    }

    #[test]
    fn d5_the_disk_bandwidth_is_measured_bounded_and_cleaned_up() {
        let dir = tempfile::tempdir().expect("a temp dir");
        // Bounded by the file size long before a minute: 16 writes of 4 KiB.
        let bytes_per_sec =
            disk_synced_bytes_per_sec(dir.path(), 4096, Duration::from_secs(60), 16 * 4096).expect("measured");
        assert!(bytes_per_sec > 0);
        // Bounded by time: one write at least, however short.
        assert!(disk_synced_bytes_per_sec(dir.path(), 100, Duration::ZERO, 1 << 20).expect("measured") > 0);
        assert_eq!(disk_synced_bytes_per_sec(dir.path(), 0, Duration::ZERO, 1 << 20), Ok(0), "no bytes to write");
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("readable").collect();
        assert!(left.is_empty(), "the file is removed: {left:?}");
    }
}
