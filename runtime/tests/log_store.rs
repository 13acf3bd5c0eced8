//! D1: the log example's state machine on disk
//! (`cohort_runtime::log_store`), alone, against the contract in
//! docs/embedding.md ("State on disk"): after a reopen the state is exactly
//! the last checkpoint's, segments are cut at their size and dropped whole
//! by retention (reads below answer "trimmed"), a restored state is seen at
//! once and durable at the next checkpoint, `clear` leaves nothing, and
//! bytes from outside (snapshots, queries, damaged files) are refused
//! without a panic.

use std::path::{Path, PathBuf};

use cohort_runtime::log_store::{
    Answer, FETCH_MESSAGES_MAX, FETCH_SIZE_MAX_BYTES, LogStore, LogStoreConfig, MESSAGE_SIZE_MAX_BYTES,
    appended_offset, decode_answer, decode_snapshot, fetch,
};
use cohort_runtime::prelude::{Bytes, Durability, GroupId, Op, StateMachine};
use proptest::prelude::*;

/// Bytes of a record before its message in a segment file.
const RECORD_HEADER_SIZE_BYTES: u64 = 8;

/// Limits small enough to cut and drop segments in a test: the record of a
/// 4-byte message (`m-00`) takes 12 bytes, so a segment holds 3 of them (36
/// bytes), and a partition keeps 3 full segments (108 bytes) until a fourth
/// starts.
const SMALL: LogStoreConfig = LogStoreConfig { segment_size_max_bytes: 40, retention_bytes: 110 };

fn open(dir: &Path, config: LogStoreConfig) -> LogStore {
    LogStore::open(&LogStore::path(dir, GroupId(0)), config).expect("opens")
}

fn append(store: &mut LogStore, message: &str) -> u64 {
    appended_offset(&store.apply(Op(1), message.as_bytes())).expect("an offset")
}

/// The answer to a fetch of `count` messages from `offset`.
fn read(store: &LogStore, offset: u64, count: u32) -> Answer {
    decode_answer(&store.read(&fetch(offset, count))).expect("an answer")
}

fn messages(texts: &[&str]) -> Answer {
    Answer::Messages(texts.iter().map(|text| Bytes::copy_from_slice(text.as_bytes())).collect())
}

/// Every message kept, from the earliest, read through fetches.
fn contents(store: &LogStore) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut offset = store.earliest();
    loop {
        match read(store, offset, FETCH_MESSAGES_MAX) {
            Answer::Messages(batch) if batch.is_empty() => return out,
            Answer::Messages(batch) => {
                offset += batch.len() as u64;
                out.extend(batch);
            }
            other => panic!("at {offset}: {other:?}"),
        }
    }
}

/// The segment files of the store's current generation, by name.
fn segment_files(store: &LogStore) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(store.segments_dir()) {
        Ok(entries) => entries.map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

fn segment_path(store: &LogStore, base: u64) -> PathBuf {
    store.segments_dir().join(format!("{base:020}.log"))
}

#[test]
fn d1_log_store_state_after_reopen_is_the_last_checkpoint() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path(), LogStoreConfig::default());
    assert_eq!(store.durability(), Durability::Persistent);
    assert_eq!(store.checkpointed(), None, "a new partition has no checkpoint");
    assert_eq!((append(&mut store, "a"), append(&mut store, "b")), (0, 1));
    store.checkpoint(b"first").expect("checkpoint");
    assert_eq!(append(&mut store, "c"), 2);
    store.checkpoint(b"second").expect("checkpoint");
    // Applied after the last checkpoint: seen now, gone after a reopen.
    assert_eq!((append(&mut store, "lost"), append(&mut store, "lost too")), (3, 4));
    assert_eq!(read(&store, 2, 10), messages(&["c", "lost", "lost too"]));
    drop(store);

    let mut store = open(dir.path(), LogStoreConfig::default());
    assert_eq!(store.checkpointed().as_deref(), Some(&b"second"[..]));
    assert_eq!((store.earliest(), store.next()), (0, 3));
    assert_eq!(read(&store, 0, 10), messages(&["a", "b", "c"]));
    assert_eq!(read(&store, 3, 10), messages(&[]), "nothing past the checkpoint");
    // cohort applies them again, and they take the same offsets.
    assert_eq!(append(&mut store, "lost"), 3);
    assert_eq!(read(&store, 3, 10), messages(&["lost"]));
}

#[test]
fn d1_log_store_applies_without_a_checkpoint_are_gone_after_reopen() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path(), SMALL);
    for i in 0..10 {
        append(&mut store, &format!("m-{i:02}"));
    }
    assert!(store.segment_count() > 1, "several segments written");
    drop(store);
    let store = open(dir.path(), SMALL);
    assert_eq!((store.checkpointed(), store.next(), contents(&store)), (None, 0, Vec::new()));
    assert_eq!(segment_files(&store), Vec::<String>::new(), "leftover segments are removed");
}

#[test]
fn d1_log_store_segments_are_cut_at_their_size_and_named_by_their_first_offset() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = LogStoreConfig { retention_bytes: u64::MAX, ..SMALL };
    let mut store = open(dir.path(), config);
    for i in 0..7 {
        append(&mut store, &format!("m-{i:02}")); // 12-byte records: 3 per 40-byte segment
    }
    let big = "x".repeat(100); // a record over the segment size has one of its own
    assert_eq!(append(&mut store, &big), 7);
    append(&mut store, "m-08");
    store.checkpoint(b"record").expect("checkpoint");
    let names = ["00000000000000000000.log", "00000000000000000003.log", "00000000000000000006.log"];
    let names = [&names[..], &["00000000000000000007.log", "00000000000000000008.log"]].concat();
    assert_eq!(segment_files(&store), names);
    for (base, size) in [(0, 36), (3, 36), (6, 12), (7, 108), (8, 12)] {
        let length = std::fs::metadata(segment_path(&store, base)).expect("segment").len();
        assert_eq!(length, size, "segment {base}");
        assert!(length <= config.segment_size_max_bytes || base == 7);
    }
    drop(store);
    let store = open(dir.path(), config);
    assert_eq!(store.segment_count(), 5);
    assert_eq!(read(&store, 6, 3), messages(&["m-06", &big, "m-08"]), "reads cross segments");
}

#[test]
fn d1_log_store_retention_drops_whole_old_segments_and_reads_below_answer_trimmed() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path(), SMALL);
    for i in 0..9 {
        append(&mut store, &format!("m-{i:02}"));
    }
    store.checkpoint(b"before").expect("checkpoint");
    assert_eq!((store.earliest(), store.kept_bytes()), (0, 108), "three full segments, within 110 bytes");
    // The tenth starts a fourth segment: 120 bytes, over 110; the oldest
    // segment (offsets 0..3) is dropped whole.
    assert_eq!(append(&mut store, "m-09"), 9);
    assert_eq!((store.earliest(), store.next(), store.kept_bytes()), (3, 10, 84));
    assert_eq!(read(&store, 0, 5), Answer::Trimmed { earliest: 3 });
    assert_eq!(read(&store, 2, 5), Answer::Trimmed { earliest: 3 });
    assert_eq!(read(&store, 3, 2), messages(&["m-03", "m-04"]));
    // Its file stays until a checkpoint that no longer names it is durable:
    // a crash now restarts from the checkpoint, which still has it.
    assert!(segment_path(&store, 0).exists());
    drop(store);
    let mut store = open(dir.path(), SMALL);
    assert_eq!((store.earliest(), store.next()), (0, 9));
    assert_eq!(read(&store, 0, 1), messages(&["m-00"]));
    assert_eq!(append(&mut store, "m-09"), 9);
    store.checkpoint(b"after").expect("checkpoint");
    assert!(!segment_path(&store, 0).exists(), "removed after the checkpoint");
    assert_eq!(segment_files(&store).len(), 3);
    drop(store);
    let store = open(dir.path(), SMALL);
    assert_eq!((store.earliest(), store.next()), (3, 10));
    assert_eq!(read(&store, 1, 5), Answer::Trimmed { earliest: 3 });
    let kept: Vec<String> = (3..10).map(|i| format!("m-{i:02}")).collect();
    assert_eq!(contents(&store), kept.iter().map(|text| Bytes::from(text.clone())).collect::<Vec<_>>());
}

#[test]
fn d1_log_store_fetches_are_bounded_by_count_and_bytes() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path(), LogStoreConfig::default());
    for i in 0..100 {
        append(&mut store, &format!("{i}"));
    }
    let Answer::Messages(batch) = read(&store, 10, 1_000) else { panic!("messages") };
    assert_eq!(batch.len(), FETCH_MESSAGES_MAX as usize, "at most FETCH_MESSAGES_MAX");
    assert_eq!(batch[0], "10");
    assert_eq!(read(&store, 99, 0), messages(&[]));
    assert_eq!(read(&store, 100, 5), messages(&[]), "nothing there yet");
    // The largest message fits an answer alone; a larger one is refused.
    let largest = vec![b'x'; MESSAGE_SIZE_MAX_BYTES];
    assert_eq!(appended_offset(&store.apply(Op(1), &largest)), Some(100));
    assert_eq!(appended_offset(&store.apply(Op(1), &vec![b'y'; MESSAGE_SIZE_MAX_BYTES + 1])), None);
    append(&mut store, "after");
    let answer = store.read(&fetch(99, 10));
    assert!(answer.len() <= FETCH_SIZE_MAX_BYTES);
    assert_eq!(decode_answer(&answer), Ok(messages(&["99"])), "the next message would not fit");
    assert_eq!(read(&store, 100, 10), Answer::Messages(vec![Bytes::from(largest)]));
    assert_eq!(read(&store, 101, 10), messages(&["after"]), "the refused one took no offset");
}

#[test]
fn d1_log_store_a_malformed_fetch_is_answered_failed() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = open(dir.path(), LogStoreConfig::default());
    for query in [&b""[..], &[0u8; 11][..], &[0u8; 13][..]] {
        let answer = decode_answer(&store.read(query)).expect("an answer");
        assert!(matches!(answer, Answer::Failed(ref reason) if reason.contains("12 bytes")), "{answer:?}");
    }
}

#[test]
fn d1_log_store_index_takes_eight_bytes_per_4_kib_of_segment() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = LogStoreConfig { segment_size_max_bytes: 64 * 1024, retention_bytes: u64::MAX };
    let mut store = open(dir.path(), config);
    for i in 0..20_000 {
        append(&mut store, &format!("message {i}"));
    }
    let segments = store.segment_count() as u64;
    assert!(segments > 1);
    assert!(store.index_entries() as u64 <= store.kept_bytes() / 4096 + segments, "{}", store.index_entries());
    store.checkpoint(b"record").expect("checkpoint");
    drop(store);
    let store = open(dir.path(), config);
    assert!(store.index_entries() as u64 <= store.kept_bytes() / 4096 + segments, "rebuilt alike at open");
    for offset in [0, 1, 4_095, 10_000, 19_999] {
        assert_eq!(read(&store, offset, 1), messages(&[&format!("message {offset}")]));
    }
}

#[test]
fn d1_log_store_restored_state_is_seen_at_once_and_durable_at_the_next_checkpoint() {
    let (source_dir, dir) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    // The source's state: trimmed by retention, part checkpointed.
    let mut source = open(source_dir.path(), SMALL);
    for i in 0..12 {
        append(&mut source, &format!("s-{i:02}"));
    }
    source.checkpoint(b"source").expect("checkpoint");
    append(&mut source, "s-12");
    let snapshot = source.snapshot();
    let decoded = decode_snapshot(&snapshot).expect("decodes");
    assert_eq!((decoded.earliest, decoded.next), (source.earliest(), 13));
    assert_eq!(decoded.messages().count() as u64, 13 - source.earliest());

    let mut store = open(dir.path(), SMALL);
    append(&mut store, "old");
    store.checkpoint(b"old").expect("checkpoint");
    store.restore(&snapshot).expect("restore");
    assert_eq!((store.earliest(), store.next()), (source.earliest(), 13), "seen at once");
    assert_eq!(contents(&store), contents(&source));
    assert_eq!(store.snapshot(), snapshot);
    assert_eq!(segment_files(&store).len(), source.segment_count(), "the same segments");
    drop(store);
    // Not durable before the checkpoint: the old one is still whole.
    let mut store = open(dir.path(), SMALL);
    assert_eq!(store.checkpointed().as_deref(), Some(&b"old"[..]));
    assert_eq!(contents(&store), vec![Bytes::from_static(b"old")]);
    store.restore(&snapshot).expect("restore");
    store.checkpoint(b"restored").expect("checkpoint");
    assert_eq!(append(&mut source, "s-13"), append(&mut store, "s-13"), "offsets go on alike");
    store.checkpoint(b"after").expect("checkpoint");
    drop(store);
    let store = open(dir.path(), SMALL);
    assert_eq!(store.checkpointed().as_deref(), Some(&b"after"[..]));
    assert_eq!((store.earliest(), contents(&store)), (source.earliest(), contents(&source)));
    let partition = LogStore::path(dir.path(), GroupId(0));
    let generations = std::fs::read_dir(&partition)
        .expect("dir")
        .filter(|entry| entry.as_ref().expect("entry").file_name().to_string_lossy().starts_with("generation-"));
    assert_eq!(generations.count(), 1, "the old generation is removed");
}

#[test]
fn d1_log_store_refuses_a_corrupt_snapshot_and_keeps_its_state() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path(), SMALL);
    append(&mut store, "kept");
    let source_dir = tempfile::tempdir().expect("temporary directory");
    let mut source = open(source_dir.path(), SMALL);
    append(&mut source, "a");
    append(&mut source, "bc");
    let good = source.snapshot().to_vec();
    let mut wrong_next = good.clone();
    wrong_next[16] = 3;
    let mut too_long = good.clone();
    too_long[24..28].copy_from_slice(&(MESSAGE_SIZE_MAX_BYTES as u32 + 1).to_le_bytes());
    let cases: [(&str, Vec<u8>, &str); 7] = [
        ("empty", Vec::new(), "magic"),
        ("wrong magic", [b"logsnap2", &good[8..]].concat(), "magic"),
        ("no next offset", good[..20].to_vec(), "next offset"),
        ("a message cut short", good[..good.len() - 1].to_vec(), "offset 1"),
        ("bytes after the messages", [&good[..], b"\x00"].concat(), "offset 2"),
        ("a count other than next - earliest", wrong_next, "offsets 0..3, but 2 messages"),
        ("a message over the limit", too_long, "over MESSAGE_SIZE_MAX_BYTES"),
    ];
    for (case, bytes, reason) in cases {
        let error = store.restore(&bytes).expect_err(case);
        assert!(error.contains(reason), "{case}: {error}");
        assert_eq!(contents(&store), vec![Bytes::from_static(b"kept")], "{case}: the state is unchanged");
    }
    store.restore(&good).expect("a good one is taken");
    assert_eq!(contents(&store), vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")]);
}

#[test]
fn d1_log_store_clear_leaves_nothing_after_reopen() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path(), SMALL);
    for i in 0..5 {
        append(&mut store, &format!("m-{i:02}"));
    }
    store.checkpoint(b"record").expect("checkpoint");
    append(&mut store, "m-05");
    store.clear().expect("clear");
    assert_eq!((store.checkpointed(), store.next(), contents(&store)), (None, 0, Vec::new()));
    assert!(!LogStore::path(dir.path(), GroupId(0)).exists(), "the partition's directory is gone");
    drop(store);
    let mut store = open(dir.path(), SMALL);
    assert_eq!((store.checkpointed(), store.next()), (None, 0));
    // And the store is usable after it.
    assert_eq!(append(&mut store, "new"), 0);
    store.checkpoint(b"after").expect("checkpoint");
    drop(store);
    assert_eq!(contents(&open(dir.path(), SMALL)), vec![Bytes::from_static(b"new")]);
}

/// A partition of three checkpointed messages, then one more applied.
fn checkpointed_partition(dir: &Path) -> LogStore {
    let mut store = open(dir, LogStoreConfig::default());
    for message in ["one", "two", "three"] {
        append(&mut store, message);
    }
    store.checkpoint(b"record").expect("checkpoint");
    append(&mut store, "after");
    store
}

/// The directories under `dir` named like `prefix…`.
fn moved_aside(dir: &Path) -> Vec<String> {
    let names = std::fs::read_dir(dir).expect("dir").map(|entry| entry.expect("entry").file_name());
    names.map(|name| name.to_string_lossy().into_owned()).filter(|name| name.contains(".damaged-")).collect()
}

#[test]
fn d1_log_store_a_damaged_checkpoint_file_counts_as_none() {
    let dir = tempfile::tempdir().expect("temporary directory");
    drop(checkpointed_partition(dir.path()));
    let path = LogStore::path(dir.path(), GroupId(0));
    let file = path.join("checkpoint");
    let mut bytes = std::fs::read(&file).expect("read");
    bytes[12] ^= 0x40;
    std::fs::write(&file, &bytes).expect("write");
    let error = LogStore::open(&path, LogStoreConfig::default()).err().expect("refused");
    assert!(error.contains("checkpoint") && error.contains("checksum"), "{error}");

    let mut store = LogStore::open_or_empty(dir.path(), GroupId(0), LogStoreConfig::default());
    assert_eq!((store.checkpointed(), store.next()), (None, 0));
    assert_eq!(moved_aside(dir.path()).len(), 1, "moved aside for the operator");
    assert_eq!(append(&mut store, "anew"), 0, "usable");
    store.checkpoint(b"anew").expect("checkpoint");
    drop(store);
    assert_eq!(open(dir.path(), LogStoreConfig::default()).checkpointed().as_deref(), Some(&b"anew"[..]));
}

#[test]
fn d1_log_store_a_damaged_record_below_the_checkpoint_is_refused_at_open() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = checkpointed_partition(dir.path());
    let segment = segment_path(&store, 0);
    drop(store);
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[RECORD_HEADER_SIZE_BYTES as usize + 3 + RECORD_HEADER_SIZE_BYTES as usize] ^= 1; // "two"'s first byte
    std::fs::write(&segment, &bytes).expect("write");
    let error = LogStore::open(&LogStore::path(dir.path(), GroupId(0)), LogStoreConfig::default()).err().expect("no");
    assert!(error.contains(&segment.display().to_string()) && error.contains("checksum"), "{error}");
    let store = LogStore::open_or_empty(dir.path(), GroupId(0), LogStoreConfig::default());
    assert_eq!((store.checkpointed(), store.next()), (None, 0), "rebuilt from the log or another member");
}

#[test]
fn d1_log_store_bytes_past_the_checkpoint_are_cut_at_open() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = checkpointed_partition(dir.path());
    let segment = segment_path(&store, 0);
    drop(store);
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes.truncate(bytes.len() - 2); // "after" torn by a crash
    bytes.extend_from_slice(&[0xFF; 9]);
    std::fs::write(&segment, &bytes).expect("write");
    let store = open(dir.path(), LogStoreConfig::default());
    assert_eq!(contents(&store), ["one", "two", "three"].map(|text| Bytes::from_static(text.as_bytes())).to_vec());
    assert_eq!(std::fs::metadata(&segment).expect("segment").len(), 3 * RECORD_HEADER_SIZE_BYTES + 11);
}

#[test]
fn d1_log_store_a_segment_shorter_than_its_checkpoint_is_refused() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = checkpointed_partition(dir.path());
    let segment = segment_path(&store, 0);
    drop(store);
    let file = std::fs::OpenOptions::new().write(true).open(&segment).expect("open");
    file.set_len(RECORD_HEADER_SIZE_BYTES + 3).expect("cut");
    let error = LogStore::open(&LogStore::path(dir.path(), GroupId(0)), LogStoreConfig::default()).err().expect("no");
    assert!(error.contains("shorter than its checkpoint"), "{error}");
}

#[test]
fn d1_log_store_limits_are_checked() {
    for segment_size_max_bytes in [0, (1 << 30) + 1] {
        let config = LogStoreConfig { segment_size_max_bytes, ..LogStoreConfig::default() };
        assert!(config.check().is_err(), "{config:?}");
        let dir = tempfile::tempdir().expect("temporary directory");
        assert!(LogStore::open(&LogStore::path(dir.path(), GroupId(0)), config).is_err());
    }
    assert_eq!(LogStoreConfig::default().check(), Ok(()));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Arbitrary bytes, and bytes that start like a snapshot, never panic
    /// `restore`; what it refuses leaves the state as it was, and what it
    /// takes is what it then holds.
    #[test]
    fn d1_log_store_restore_never_panics_on_arbitrary_bytes(tail in prop::collection::vec(any::<u8>(), 0..64), magic in any::<bool>()) {
        let bytes = if magic { [&b"logsnap1"[..], &tail].concat() } else { tail };
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut store = open(dir.path(), SMALL);
        append(&mut store, "kept");
        match store.restore(&bytes) {
            Ok(()) => prop_assert_eq!(store.snapshot().to_vec(), bytes),
            Err(_) => prop_assert_eq!(contents(&store), vec![Bytes::from_static(b"kept")]),
        }
    }
}

/// What the store should hold: its segments, each a list of messages, cut
/// and dropped by the same two rules.
#[derive(Clone, Debug, Default)]
struct Model {
    earliest: u64,
    segments: Vec<Vec<Vec<u8>>>,
}

impl Model {
    fn size(segment: &[Vec<u8>]) -> u64 {
        segment.iter().map(|message| RECORD_HEADER_SIZE_BYTES + message.len() as u64).sum()
    }

    fn next(&self) -> u64 {
        self.earliest + self.segments.iter().map(|segment| segment.len() as u64).sum::<u64>()
    }

    fn kept_bytes(&self) -> u64 {
        self.segments.iter().map(|segment| Model::size(segment)).sum()
    }

    /// Append without retention (as a restore writes).
    fn write(&mut self, message: Vec<u8>, config: LogStoreConfig) {
        let record = RECORD_HEADER_SIZE_BYTES + message.len() as u64;
        let cut = self.segments.last().is_none_or(|last| Model::size(last) + record > config.segment_size_max_bytes);
        if cut {
            self.segments.push(Vec::new());
        }
        self.segments.last_mut().expect("a segment").push(message);
    }

    fn append(&mut self, message: Vec<u8>, config: LogStoreConfig) -> u64 {
        let offset = self.next();
        self.write(message, config);
        while self.kept_bytes() > config.retention_bytes && self.segments.len() > 1 {
            self.earliest += self.segments.remove(0).len() as u64;
        }
        offset
    }

    fn fetch(&self, offset: u64, count: u32) -> Answer {
        if offset < self.earliest {
            return Answer::Trimmed { earliest: self.earliest };
        }
        let all = self.segments.iter().flatten().skip((offset - self.earliest) as usize);
        Answer::Messages(all.take(count.min(FETCH_MESSAGES_MAX) as usize).map(|m| Bytes::from(m.clone())).collect())
    }

    /// The snapshot the store encodes for this state.
    fn snapshot(&self) -> Vec<u8> {
        let mut out = b"logsnap1".to_vec();
        out.extend_from_slice(&self.earliest.to_le_bytes());
        out.extend_from_slice(&self.next().to_le_bytes());
        for message in self.segments.iter().flatten() {
            out.extend_from_slice(&(message.len() as u32).to_le_bytes());
            out.extend_from_slice(message);
        }
        out
    }
}

/// A step of the model test.
#[derive(Clone, Debug)]
enum Step {
    Append(Vec<u8>),
    Checkpoint,
    Reopen,
    Restore(u64, Vec<Vec<u8>>),
    Clear,
}

fn step() -> impl Strategy<Value = Step> {
    let message = || prop::collection::vec(any::<u8>(), 0..30);
    prop_oneof![
        8 => message().prop_map(Step::Append),
        2 => Just(Step::Checkpoint),
        2 => Just(Step::Reopen),
        1 => (0..50u64, prop::collection::vec(message(), 0..8)).prop_map(|(earliest, messages)| Step::Restore(earliest, messages)),
        1 => Just(Step::Clear),
    ]
}

fn config() -> impl Strategy<Value = LogStoreConfig> {
    (20..120u64, 40..400u64).prop_map(|(segment_size_max_bytes, retention_bytes)| LogStoreConfig {
        segment_size_max_bytes,
        retention_bytes,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The store against a model: fetches, offsets and snapshots always show
    /// the state as applied, cut and trimmed alike; a reopen goes back to
    /// the last checkpoint, record and all.
    #[test]
    fn d1_log_store_matches_a_vec_model_through_appends_checkpoints_and_reopens(
        config in config(),
        steps in prop::collection::vec(step(), 1..60),
    ) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut store = open(dir.path(), config);
        let (mut model, mut durable) = (Model::default(), (None::<Bytes>, Model::default()));
        for (at, step) in steps.into_iter().enumerate() {
            match step {
                Step::Append(message) => {
                    let answer = store.apply(Op(at as u64), &message);
                    prop_assert_eq!(appended_offset(&answer), Some(model.append(message, config)));
                }
                Step::Checkpoint => {
                    let record = Bytes::from(format!("record {at}"));
                    store.checkpoint(&record).expect("checkpoint");
                    durable = (Some(record), model.clone());
                }
                Step::Reopen => {
                    drop(store);
                    store = open(dir.path(), config);
                    model = durable.1.clone();
                    prop_assert_eq!(store.checkpointed(), durable.0.clone());
                }
                Step::Restore(earliest, messages) => {
                    let mut restored = Model { earliest, segments: Vec::new() };
                    for message in messages {
                        restored.write(message, config);
                    }
                    store.restore(&restored.snapshot()).expect("restore");
                    model = restored;
                }
                Step::Clear => {
                    store.clear().expect("clear");
                    (model, durable) = (Model::default(), (None, Model::default()));
                }
            }
            prop_assert_eq!((store.earliest(), store.next()), (model.earliest, model.next()));
            prop_assert_eq!((store.segment_count(), store.kept_bytes()), (model.segments.len(), model.kept_bytes()));
            prop_assert_eq!(store.snapshot().to_vec(), model.snapshot());
            for offset in model.earliest.saturating_sub(2)..=model.next() + 1 {
                prop_assert_eq!(read(&store, offset, 3), model.fetch(offset, 3), "offset {}", offset);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Segment files with bytes overwritten, cut or added anywhere: opening
    /// and reading never panic. A store that opens holds exactly its
    /// checkpoint (damage past it is cut away); one that does not says why.
    #[test]
    fn d1_log_store_damaged_segment_bytes_never_panic(
        segment in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        garbage in prop::collection::vec(any::<u8>(), 1..24),
        damage in 0..3u8,
    ) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let config = LogStoreConfig { segment_size_max_bytes: 64, retention_bytes: 256 };
        let mut store = open(dir.path(), config);
        let mut model = Model::default();
        for i in 0..40u8 {
            let message = vec![i; usize::from(i % 7)];
            store.apply(Op(1), &message);
            model.append(message, config);
        }
        store.checkpoint(b"record").expect("checkpoint");
        store.apply(Op(1), b"past the checkpoint");
        let files: Vec<PathBuf> = segment_files(&store).iter().map(|name| store.segments_dir().join(name)).collect();
        drop(store);
        let path = &files[segment.index(files.len())];
        let mut bytes = std::fs::read(path).expect("read");
        match damage {
            0 => {
                let start = at.index(bytes.len());
                let end = (start + garbage.len()).min(bytes.len());
                bytes[start..end].copy_from_slice(&garbage[..end - start]);
            }
            1 => bytes.truncate(at.index(bytes.len())),
            _ => bytes.extend_from_slice(&garbage),
        }
        std::fs::write(path, &bytes).expect("write");
        match LogStore::open(&LogStore::path(dir.path(), GroupId(0)), config) {
            Ok(store) => {
                prop_assert_eq!(store.snapshot().to_vec(), model.snapshot());
                for offset in 0..=model.next() {
                    prop_assert_eq!(read(&store, offset, 5), model.fetch(offset, 5));
                }
            }
            Err(reason) => prop_assert!(reason.contains(".log"), "names the segment: {}", reason),
        }
    }
}

/// The bytes of every file under the store's current generation, by name.
fn files_bytes(store: &LogStore) -> Vec<(String, Vec<u8>)> {
    segment_files(store)
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(store.segments_dir().join(&name)).expect("a segment file");
            (name, bytes)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// K5: a producer's batch applied at once writes the same files, keeps
    /// and drops the same segments and answers the same offsets as its
    /// messages applied one by one. (A message over MESSAGE_SIZE_MAX_BYTES
    /// cannot be in a batch: the batch would be over the operation limit.)
    #[test]
    fn k5_log_store_a_batch_is_appended_as_its_messages_one_by_one(
        config in config(),
        batches in prop::collection::vec(prop::collection::vec(prop::collection::vec(any::<u8>(), 0..48), 1..12), 1..8),
    ) {
        let (one_dir, batch_dir) = (tempfile::tempdir().expect("a directory"), tempfile::tempdir().expect("a directory"));
        let (mut one_by_one, mut batched) = (open(one_dir.path(), config), open(batch_dir.path(), config));
        for (at, batch) in batches.into_iter().enumerate() {
            let singles: Vec<Bytes> = batch.iter().map(|message| one_by_one.apply(Op(at as u64), message)).collect();
            let encoded = cohort_runtime::op_batch::encode(&batch).expect("a batch");
            let mut results = cohort_runtime::op_batch::OpResults::with_count(batch.len());
            let parsed = cohort_runtime::op_batch::OpBatch::parse(&encoded).expect("parses");
            batched.apply_op_batch(Op(at as u64), parsed, &mut results);
            let results = results.finish().expect("results");
            prop_assert_eq!(cohort_runtime::op_batch::decode(&results).expect("an op batch"), singles);
            prop_assert_eq!((batched.earliest(), batched.next()), (one_by_one.earliest(), one_by_one.next()));
            prop_assert_eq!(batched.kept_bytes(), one_by_one.kept_bytes());
            prop_assert_eq!(files_bytes(&batched), files_bytes(&one_by_one));
            prop_assert_eq!(contents(&batched), contents(&one_by_one));
        }
        batched.checkpoint(b"record").expect("a checkpoint");
        drop(batched);
        let reopened = open(batch_dir.path(), config);
        prop_assert_eq!(contents(&reopened), contents(&one_by_one), "a batch is durable at the checkpoint");
    }
}
