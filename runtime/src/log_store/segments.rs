//! One generation of a partition's segments: the files of one directory,
//! each named by its first offset, together holding the messages from the
//! earliest offset kept to the next one.
//!
//! Where segments are cut and which are dropped by retention depends only
//! on the messages' sizes and the store's two limits, never on when a
//! checkpoint ran: every replica (with the same limits) cuts and drops the
//! same segments, so they answer a fetch alike. A segment is cut before a
//! record would take it past `segment_size_max_bytes` (a record larger
//! than that has a segment of its own); after an append, oldest segments
//! are dropped while the partition holds more than `retention_bytes` and
//! more than one segment. A dropped segment's file stays until the next
//! checkpoint, which no longer names it, is durable.

use std::collections::{BTreeSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::encoding::Fetched;
use super::files;
use super::segment::{RECORD_HEADER_SIZE_BYTES, Records, Segment, encode_record, file_name, parse_file_name};
use super::writeback::{self, WRITEBACK_INTERVAL_BYTES};

/// A generation's segments.
pub(super) struct Segments {
    /// The generation's directory.
    dir: PathBuf,
    /// Oldest first; none empty.
    segments: VecDeque<Segment>,
    /// The oldest offset kept: the first segment's base.
    earliest: u64,
    /// The offset the next append takes: the last segment's end.
    next: u64,
    /// The segments' bytes together.
    kept_bytes: u64,
    /// The last segment's file, open to write.
    active: Option<File>,
    /// Whether the last segment was written since the last sync.
    active_unsynced: bool,
    /// Earlier segments written since the last sync.
    unsynced_files: BTreeSet<PathBuf>,
    /// Directories that gained entries since the last sync.
    unsynced_dirs: BTreeSet<PathBuf>,
    /// Whether `dir` is this generation's. A new generation's directory is
    /// made at its first segment, after removing whatever a crash or a
    /// failed sweep left at that path.
    dir_ready: bool,
    /// Files of segments dropped by retention, still to remove.
    trimmed: Vec<PathBuf>,
    /// Bytes appended to the last segment since it was last handed to the
    /// background writeback ([`writeback`]).
    unhinted_bytes: u64,
}

impl Segments {
    /// A new generation in `dir` that holds nothing and counts on from
    /// `at`; its directory is made at its first append.
    pub(super) fn empty(dir: PathBuf, at: u64) -> Segments {
        Segments {
            dir,
            segments: VecDeque::new(),
            earliest: at,
            next: at,
            kept_bytes: 0,
            active: None,
            active_unsynced: false,
            unsynced_files: BTreeSet::new(),
            unsynced_dirs: BTreeSet::new(),
            dir_ready: false,
            trimmed: Vec::new(),
            unhinted_bytes: 0,
        }
    }

    /// The segments in `dir` as a checkpoint left them: offsets
    /// `earliest..next`, the last segment `active_size_bytes` long. Files
    /// outside those offsets are removed, the last segment is cut back to
    /// its checkpointed length, and every record kept is read and checked.
    /// `Err`: what is missing or damaged, or an I/O error.
    pub(super) fn open(dir: PathBuf, earliest: u64, next: u64, active_size_bytes: u64) -> Result<Segments, String> {
        let bases = Segments::bases_in(&dir, earliest..next)?;
        let mut segments = Segments::empty(dir, earliest);
        if earliest == next {
            return Ok(segments);
        }
        let dir = segments.dir.clone();
        if bases.first() != Some(&earliest) {
            return Err(format!("{}: the segment of offset {earliest} is missing", dir.display()));
        }
        for (i, base) in bases.iter().enumerate() {
            let end = bases.get(i + 1).copied().unwrap_or(next);
            let last = i + 1 == bases.len();
            let path = dir.join(file_name(*base));
            let failed = |what: &str, error: std::io::Error| format!("{}: could not {what}: {error}", path.display());
            let file = OpenOptions::new().read(true).write(last).open(&path).map_err(|error| failed("open", error))?;
            let length = file.metadata().map_err(|error| failed("read its length", error))?.len();
            let size_bytes = match last {
                false => length,
                true if length < active_size_bytes => {
                    return Err(format!(
                        "{}: {length} bytes, shorter than its checkpoint's {active_size_bytes}",
                        path.display()
                    ));
                }
                true => {
                    if length > active_size_bytes {
                        file.set_len(active_size_bytes).map_err(|error| failed("cut it to its checkpoint", error))?;
                    }
                    active_size_bytes
                }
            };
            let mut segment = Segment::scan(&file, &path, *base, size_bytes)?;
            if !last {
                segment.seal();
            }
            if segment.end() != end {
                return Err(format!(
                    "{}: {} messages, where offsets say {}",
                    path.display(),
                    segment.count,
                    end - base
                ));
            }
            segments.kept_bytes += segment.size_bytes;
            segments.next = segment.end();
            segments.segments.push_back(segment);
            segments.active = last.then_some(file);
        }
        segments.dir_ready = true;
        segments.invariants();
        Ok(segments)
    }

    /// The first offsets of the segment files in `dir` within `kept`, in
    /// order; files of other segments are removed (a failure to is only
    /// reported: what is left is removed next time).
    fn bases_in(dir: &Path, kept: std::ops::Range<u64>) -> Result<Vec<u64>, String> {
        let entries = match std::fs::read_dir(dir) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            entries => entries.map_err(|error| format!("{}: could not list: {error}", dir.display()))?,
        };
        let mut bases = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|error| format!("{}: could not list: {error}", dir.display()))?;
            let Some(base) = entry.file_name().to_str().and_then(parse_file_name) else { continue };
            match kept.contains(&base) {
                true => bases.push(base),
                false => {
                    if let Err(error) = files::remove_file(&entry.path()) {
                        eprintln!("log: {error}");
                    }
                }
            }
        }
        bases.sort_unstable();
        Ok(bases)
    }

    /// The oldest offset kept.
    pub(super) fn earliest(&self) -> u64 {
        self.earliest
    }

    /// The offset the next append takes.
    pub(super) fn next(&self) -> u64 {
        self.next
    }

    /// The segments' bytes together.
    pub(super) fn kept_bytes(&self) -> u64 {
        self.kept_bytes
    }

    /// The segments kept.
    pub(super) fn count(&self) -> usize {
        self.segments.len()
    }

    /// The last segment's length, 0 if none.
    pub(super) fn active_size_bytes(&self) -> u64 {
        self.segments.back().map_or(0, |last| last.size_bytes)
    }

    /// The index's entries over every segment.
    pub(super) fn index_entries(&self) -> usize {
        self.segments.iter().map(Segment::index_entries).sum()
    }

    fn path(&self, base: u64) -> PathBuf {
        self.dir.join(file_name(base))
    }

    /// Append `message` (written, not synced) and return its offset.
    pub(super) fn append(&mut self, message: &[u8], segment_size_max_bytes: u64) -> Result<u64, String> {
        let mut appender = self.appender(segment_size_max_bytes);
        let offset = appender.append(message)?;
        appender.finish()?;
        Ok(offset)
    }

    /// K5: append many messages with one write per segment they reach
    /// (a producer's batch): [`Appender::append`] each, then
    /// [`Appender::finish`]. The files hold what `append` one by one
    /// would have written.
    pub(super) fn appender(&mut self, segment_size_max_bytes: u64) -> Appender<'_> {
        Appender { segments: self, segment_size_max_bytes, pending: Vec::new(), pending_at: 0 }
    }

    /// Write `records` at `position` of the last segment's file.
    fn write_active(&self, records: &[u8], position: u64) -> Result<(), String> {
        let (Some(last), Some(file)) = (self.segments.back(), &self.active) else {
            unreachable!("records are pending only in a segment that was started")
        };
        file.write_all_at(records, position).map_err(|error| {
            let path = self.dir.join(file_name(last.base));
            format!("{}: could not append at byte {position}: {error}", path.display())
        })
    }

    /// Start a segment at the next offset (its directory too, for a new
    /// generation: in the partition's directory, which must exist).
    fn start_segment(&mut self) -> Result<(), String> {
        if !self.dir_ready {
            files::remove_dir(&self.dir)?;
            std::fs::create_dir(&self.dir)
                .map_err(|error| format!("{}: could not create: {error}", self.dir.display()))?;
            self.unsynced_dirs.extend(self.dir.parent().map(Path::to_owned));
            self.dir_ready = true;
        }
        // The segment that ends here is written: push it to the disk now.
        if let Some(last) = self.segments.back()
            && self.unhinted_bytes > 0
        {
            writeback::hint(self.path(last.base));
        }
        self.unhinted_bytes = 0;
        let path = self.path(self.next);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|error| format!("{}: could not create: {error}", path.display()))?;
        if let Some(last) = self.segments.back_mut() {
            last.seal();
            if self.active_unsynced {
                let path = self.dir.join(file_name(last.base));
                self.unsynced_files.insert(path);
            }
        }
        self.unsynced_dirs.insert(self.dir.clone());
        self.segments.push_back(Segment::new(self.next));
        self.active = Some(file);
        self.active_unsynced = true;
        Ok(())
    }

    /// Drop oldest segments while more than `retention_bytes` and more
    /// than one segment are kept.
    pub(super) fn trim(&mut self, retention_bytes: u64) {
        while self.kept_bytes > retention_bytes && self.segments.len() > 1 {
            let Some(oldest) = self.segments.pop_front() else { break };
            self.kept_bytes -= oldest.size_bytes;
            let path = self.path(oldest.base);
            self.unsynced_files.remove(&path);
            self.trimmed.push(path);
        }
        self.earliest = self.segments.front().map_or(self.next, |first| first.base);
        self.invariants();
    }

    /// Add to `fetched` the messages from `offset` (at least the earliest)
    /// until it is full or none is left.
    pub(super) fn read(&self, offset: u64, fetched: &mut Fetched) -> Result<(), String> {
        debug_assert!(offset >= self.earliest, "the store answers trimmed below");
        let first = self.segments.partition_point(|segment| segment.end() <= offset);
        let mut wanted = offset;
        for (i, segment) in self.segments.iter().enumerate().skip(first) {
            let (mut at, position) = segment.seek(wanted);
            let complete = self.each_record(i, position, |message| {
                if at == wanted {
                    if !fetched.push(message) {
                        return false;
                    }
                    wanted += 1;
                }
                at += 1;
                true
            })?;
            if !complete || !fetched.open() {
                break;
            }
            if at != segment.end() {
                return Err(format!("{}: {at} is its end, not {}", self.path(segment.base).display(), segment.end()));
            }
        }
        Ok(())
    }

    /// Call `each` with every message kept, in offset order.
    pub(super) fn for_each(&self, mut each: impl FnMut(&[u8])) -> Result<(), String> {
        for i in 0..self.segments.len() {
            self.each_record(i, 0, |message| {
                each(message);
                true
            })?;
        }
        Ok(())
    }

    /// Call `each` with the messages of segment `i` from `position` (a
    /// record's) to its end, until it returns `false`; whether it never
    /// did.
    fn each_record(&self, i: usize, position: u64, mut each: impl FnMut(&[u8]) -> bool) -> Result<bool, String> {
        let segment = &self.segments[i];
        let path = self.path(segment.base);
        let opened;
        let file = match (&self.active, i + 1 == self.segments.len()) {
            (Some(active), true) => active,
            _ => {
                opened = File::open(&path).map_err(|error| format!("{}: could not open: {error}", path.display()))?;
                &opened
            }
        };
        let mut records = Records::new(file, &path, position, segment.size_bytes);
        while let Some((_, message)) = records.next()? {
            if !each(message) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Make every segment written since the last sync durable, with the
    /// directory entries of those created.
    pub(super) fn sync(&mut self) -> Result<(), String> {
        for path in &self.unsynced_files {
            files::sync(path)?;
        }
        if let (Some(file), true) = (&self.active, self.active_unsynced) {
            let path = self.path(self.segments.back().map_or(self.next, |last| last.base));
            file.sync_all().map_err(|error| format!("{}: could not sync: {error}", path.display()))?;
        }
        for dir in &self.unsynced_dirs {
            files::sync(dir)?;
        }
        self.unsynced_files.clear();
        self.unsynced_dirs.clear();
        self.active_unsynced = false;
        Ok(())
    }

    /// Remove the files of segments dropped by retention; `Err` lists
    /// those left (tried again next time).
    pub(super) fn remove_trimmed(&mut self) -> Result<(), String> {
        let mut failures = Vec::new();
        self.trimmed.retain(|path| files::remove_file(path).map_err(|error| failures.push(error)).is_err());
        match failures.is_empty() {
            true => Ok(()),
            false => Err(failures.join("; ")),
        }
    }

    /// Whether files of dropped segments are still to be removed.
    pub(super) fn has_trimmed(&self) -> bool {
        !self.trimmed.is_empty()
    }

    /// Remove this generation's directory (a restore that failed half way).
    pub(super) fn discard(self) {
        if self.dir_ready
            && let Err(error) = files::remove_dir(&self.dir)
        {
            eprintln!("log: {error}");
        }
    }

    /// The rules of the segments, checked in debug builds after each change.
    pub(super) fn invariants(&self) {
        debug_assert_eq!(self.segments.front().map_or(self.next, |first| first.base), self.earliest);
        debug_assert_eq!(self.segments.back().map_or(self.earliest, Segment::end), self.next);
        debug_assert!(self.segments.iter().all(|segment| segment.count > 0), "no segment is empty");
        debug_assert!(
            self.segments.iter().zip(self.segments.iter().skip(1)).all(|(a, b)| a.end() == b.base),
            "segments follow one another"
        );
        debug_assert_eq!(self.segments.iter().map(|segment| segment.size_bytes).sum::<u64>(), self.kept_bytes);
        debug_assert_eq!(self.active.is_some(), !self.segments.is_empty(), "the last segment is open");
    }
}

/// Appends to the last segment that are counted at once and written when
/// the segment is cut or at [`Appender::finish`].
pub(super) struct Appender<'a> {
    segments: &'a mut Segments,
    segment_size_max_bytes: u64,
    /// Records counted in the last segment and not written yet.
    pending: Vec<u8>,
    /// Where in the last segment's file `pending` goes.
    pending_at: u64,
}

impl Appender<'_> {
    /// Count `message` as appended and return its offset; its bytes are
    /// written when its segment is cut or at [`Appender::finish`].
    pub(super) fn append(&mut self, message: &[u8]) -> Result<u64, String> {
        let record_size = RECORD_HEADER_SIZE_BYTES + message.len() as u64;
        let fits = |last: &Segment| last.size_bytes + record_size <= self.segment_size_max_bytes;
        if !self.segments.segments.back().is_some_and(fits) {
            self.write_pending()?;
            self.segments.start_segment()?;
        }
        let segments = &mut *self.segments;
        let Some(last) = segments.segments.back_mut() else {
            unreachable!("a segment was just started if there was none")
        };
        if self.pending.is_empty() {
            self.pending_at = last.size_bytes;
        }
        encode_record(&mut self.pending, message);
        last.push(record_size);
        let offset = segments.next;
        segments.next += 1;
        segments.kept_bytes += record_size;
        segments.unhinted_bytes += record_size;
        segments.active_unsynced = true;
        Ok(offset)
    }

    /// Write what is pending (not synced), and hand the segment to the
    /// background writeback every [`WRITEBACK_INTERVAL_BYTES`].
    pub(super) fn finish(mut self) -> Result<(), String> {
        self.write_pending()?;
        let segments = &mut *self.segments;
        if segments.unhinted_bytes >= WRITEBACK_INTERVAL_BYTES
            && let Some(last) = segments.segments.back()
        {
            writeback::hint(segments.path(last.base));
            segments.unhinted_bytes = 0;
        }
        segments.invariants();
        Ok(())
    }

    fn write_pending(&mut self) -> Result<(), String> {
        if !self.pending.is_empty() {
            self.segments.write_active(&self.pending, self.pending_at)?;
            self.pending.clear();
        }
        Ok(())
    }
}
