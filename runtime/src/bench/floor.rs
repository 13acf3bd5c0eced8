//! The physical floor of a replicated write on this machine, measured in
//! the same run as the workload: the median `fdatasync` of a 4 KiB append
//! in the data directory, plus the median round trip of a small message
//! over loopback TCP. A commit needs the primary's sync and a backup's, and
//! one round trip; on one machine the syncs share a disk.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Instant;

/// Appends synced to measure the disk.
const SYNCS: usize = 200;
/// Round trips measured.
const ROUND_TRIPS: usize = 2000;
/// Bytes of one append.
const APPEND_BYTES: usize = 4096;
/// Bytes of one message.
const MESSAGE_BYTES: usize = 64;

/// The floor, in microseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Floor {
    /// Median `fdatasync` of a 4 KiB append.
    pub fdatasync_us: u64,
    /// Median loopback TCP round trip.
    pub round_trip_us: u64,
}

impl Floor {
    /// The floor: one sync plus one round trip.
    pub(crate) fn total_us(&self) -> u64 {
        self.fdatasync_us + self.round_trip_us
    }
}

/// Measure both in `dir`; errors name what failed.
pub(crate) fn measure(dir: &Path) -> Result<Floor, String> {
    Ok(Floor { fdatasync_us: fdatasync_us(dir)?, round_trip_us: round_trip_us()? })
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
