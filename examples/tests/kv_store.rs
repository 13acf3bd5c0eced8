//! D1: the kv example's state machine on disk (`cohort_examples::kv_store`),
//! alone, against the contract in docs/embedding.md ("State on disk"): after
//! a reopen the state is exactly the last checkpoint's, `clear` leaves
//! nothing, a restored state is seen at once and durable at the next
//! checkpoint, and bytes from outside (snapshots, damaged files) are refused
//! without a panic.

use std::collections::BTreeMap;
use std::path::Path;

use cohort_examples::kv_store::{KvStore, decode_snapshot, delete, put};
use cohort_runtime::prelude::{Bytes, Durability, GroupId, Op, StateMachine};
use proptest::prelude::*;

fn open(dir: &Path) -> KvStore {
    KvStore::open(&KvStore::path(dir, GroupId(0))).expect("opens")
}

fn set(store: &mut KvStore, key: &str, value: &str) -> Bytes {
    store.apply(Op(1), &put(key.as_bytes(), value.as_bytes()))
}

fn remove(store: &mut KvStore, key: &str) -> Bytes {
    store.apply(Op(1), &delete(key.as_bytes()))
}

/// A key's value as `read` answers it.
fn get(store: &KvStore, key: &str) -> Option<String> {
    let answer = store.read(key.as_bytes());
    match answer.split_first() {
        Some((1, value)) => Some(String::from_utf8(value.to_vec()).expect("utf-8 in these tests")),
        Some((0, [])) => None,
        _ => panic!("not a read answer: {answer:?}"),
    }
}

/// Every key and value, from the store's own snapshot.
fn contents(store: &KvStore) -> BTreeMap<Bytes, Bytes> {
    decode_snapshot(&store.snapshot()).expect("the store's own snapshot decodes")
}

fn map(entries: &[(&str, &str)]) -> BTreeMap<Bytes, Bytes> {
    entries
        .iter()
        .map(|(key, value)| (Bytes::copy_from_slice(key.as_bytes()), Bytes::copy_from_slice(value.as_bytes())))
        .collect()
}

#[test]
fn d1_kv_store_state_after_reopen_is_the_last_checkpoint() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path());
    assert_eq!(store.durability(), Durability::Persistent);
    assert_eq!(store.checkpointed(), None, "a new file has no checkpoint");
    assert_eq!(set(&mut store, "a", "1"), "new");
    assert_eq!(set(&mut store, "b", "2"), "new");
    store.checkpoint(b"first").expect("checkpoint");
    assert_eq!(set(&mut store, "a", "changed"), "existed");
    assert_eq!(remove(&mut store, "b"), "existed");
    assert_eq!(set(&mut store, "c", "3"), "new");
    store.checkpoint(b"second").expect("checkpoint");
    // Applied after the last checkpoint: seen now, gone after a reopen.
    assert_eq!(set(&mut store, "a", "lost"), "existed");
    assert_eq!(remove(&mut store, "c"), "existed");
    assert_eq!(set(&mut store, "d", "lost"), "new");
    assert_eq!(
        (get(&store, "a"), get(&store, "c"), get(&store, "d")),
        (Some("lost".into()), None, Some("lost".into()))
    );
    drop(store);

    let store = open(dir.path());
    assert_eq!(store.checkpointed().as_deref(), Some(&b"second"[..]));
    assert_eq!(contents(&store), map(&[("a", "changed"), ("c", "3")]));
    assert_eq!((get(&store, "a"), get(&store, "b"), get(&store, "d")), (Some("changed".into()), None, None));
}

#[test]
fn d1_kv_store_applies_without_a_checkpoint_are_gone_after_reopen() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path());
    set(&mut store, "a", "1");
    assert_eq!(get(&store, "a").as_deref(), Some("1"), "reads see what is applied");
    drop(store);
    let store = open(dir.path());
    assert_eq!((store.checkpointed(), contents(&store)), (None, BTreeMap::new()));
}

#[test]
fn d1_kv_store_clear_leaves_nothing_after_reopen() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path());
    set(&mut store, "a", "1");
    store.checkpoint(b"record").expect("checkpoint");
    set(&mut store, "b", "2");
    store.clear().expect("clear");
    assert_eq!((store.checkpointed(), contents(&store), get(&store, "a")), (None, BTreeMap::new(), None));
    drop(store);
    let mut store = open(dir.path());
    assert_eq!((store.checkpointed(), contents(&store)), (None, BTreeMap::new()));
    // And the store is usable after it.
    set(&mut store, "c", "3");
    store.checkpoint(b"after").expect("checkpoint");
    drop(store);
    assert_eq!(contents(&open(dir.path())), map(&[("c", "3")]));
}

#[test]
fn d1_kv_store_restored_state_is_seen_at_once_and_durable_at_the_next_checkpoint() {
    let (source_dir, dir) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    // The source's state is part checkpoint, part overlay.
    let mut source = open(source_dir.path());
    set(&mut source, "a", "1");
    set(&mut source, "b", "2");
    source.checkpoint(b"source").expect("checkpoint");
    remove(&mut source, "a");
    set(&mut source, "c", "3");
    let snapshot = source.snapshot();
    assert_eq!(decode_snapshot(&snapshot).expect("decodes"), map(&[("b", "2"), ("c", "3")]));

    let mut store = open(dir.path());
    set(&mut store, "a", "old");
    set(&mut store, "z", "old");
    store.checkpoint(b"old").expect("checkpoint");
    store.restore(&snapshot).expect("restore");
    assert_eq!((get(&store, "a"), get(&store, "b")), (None, Some("2".into())), "seen at once");
    assert_eq!(store.snapshot(), snapshot);
    assert_eq!(remove(&mut store, "z"), "new", "the old state is gone");
    drop(store);
    // Not durable before the checkpoint: the old one is still there.
    let mut store = open(dir.path());
    assert_eq!(
        (store.checkpointed().as_deref(), contents(&store)),
        (Some(&b"old"[..]), map(&[("a", "old"), ("z", "old")]))
    );
    store.restore(&snapshot).expect("restore");
    set(&mut store, "d", "4");
    store.checkpoint(b"restored").expect("checkpoint");
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.checkpointed().as_deref(), Some(&b"restored"[..]));
    assert_eq!(contents(&store), map(&[("b", "2"), ("c", "3"), ("d", "4")]));
}

/// A snapshot of `entries` as the store encodes it.
fn snapshot_of(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut out = b"kvsnap01".to_vec();
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (key, value) in entries {
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
    out
}

#[test]
fn d1_kv_store_refuses_a_corrupt_snapshot_and_keeps_its_state() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path());
    set(&mut store, "kept", "yes");
    let good = snapshot_of(&[(b"a", b"1"), (b"b", b"2")]);
    assert_eq!(decode_snapshot(&good).expect("decodes"), map(&[("a", "1"), ("b", "2")]));
    let mut wrong_count = good.clone();
    wrong_count[8] = 3;
    let cases: [(&str, Vec<u8>, &str); 8] = [
        ("empty", Vec::new(), "magic"),
        ("wrong magic", [b"kvsnap02", &good[8..]].concat(), "magic"),
        ("no count", b"kvsnap01\x01".to_vec(), "count"),
        ("truncated value", good[..good.len() - 1].to_vec(), "entry 1's value"),
        ("bytes after the entries", [&good[..], b"\x00"].concat(), "entry 2's key"),
        ("count differs", wrong_count, "says 3 entries, holds 2"),
        ("same key twice", snapshot_of(&[(b"a", b"1"), (b"a", b"2")]), "entry 1's key is not above"),
        ("keys out of order", snapshot_of(&[(b"b", b"1"), (b"a", b"2")]), "entry 1's key is not above"),
    ];
    for (case, bytes, reason) in cases {
        let error = store.restore(&bytes).expect_err(case);
        assert!(error.contains(reason), "{case}: {error}");
        assert_eq!(contents(&store), map(&[("kept", "yes")]), "{case}: the state is unchanged");
    }
    store.restore(&good).expect("a good one is taken");
    assert_eq!(contents(&store), map(&[("a", "1"), ("b", "2")]));
}

#[test]
fn d1_kv_store_answers_a_malformed_operation_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = open(dir.path());
    set(&mut store, "a", "1");
    for operation in [&b""[..], b"X", b"P", b"P\x05\x00abc", b"P\x01"] {
        assert_eq!(store.apply(Op(1), operation), "malformed", "{operation:?}");
    }
    assert_eq!(contents(&store), map(&[("a", "1")]));
}

#[test]
fn d1_kv_store_an_unusable_file_starts_empty_and_is_moved_aside_at_the_next_checkpoint() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = KvStore::path(dir.path(), GroupId(3));
    std::fs::write(&path, vec![0xA5; 64 * 1024]).expect("garbage");
    let error = KvStore::open(&path).err().expect("garbage is refused");
    assert!(error.contains(&path.display().to_string()), "the error names the file: {error}");

    let mut store = KvStore::open_or_empty(dir.path(), GroupId(3));
    assert_eq!((store.checkpointed(), contents(&store)), (None, BTreeMap::new()));
    assert_eq!(set(&mut store, "a", "1"), "new");
    store.checkpoint(b"record").expect("a new file takes the checkpoint");
    drop(store);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|name| name.starts_with("group-3.redb.unusable-")), "moved aside: {names:?}");
    let store = KvStore::open(&path).expect("the new file opens");
    assert_eq!((store.checkpointed().as_deref(), contents(&store)), (Some(&b"record"[..]), map(&[("a", "1")])));

    drop(store);

    // `clear` starts a new file too.
    std::fs::write(&path, b"not a database").expect("garbage");
    let mut store = KvStore::open_or_empty(dir.path(), GroupId(3));
    store.clear().expect("clear");
    drop(store);
    assert_eq!(contents(&KvStore::open(&path).expect("opens")), BTreeMap::new());
}

#[test]
fn d1_kv_store_never_moves_aside_a_file_another_store_holds() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut first = KvStore::open_or_empty(dir.path(), GroupId(0));
    set(&mut first, "a", "1");
    first.checkpoint(b"first").expect("checkpoint");
    let mut second = KvStore::open_or_empty(dir.path(), GroupId(0));
    assert_eq!(second.checkpointed(), None, "a locked file is not read");
    assert!(second.clear().is_err(), "nor cleared");
    drop(second);
    drop(first);
    let store = open(dir.path());
    assert_eq!((store.checkpointed().as_deref(), contents(&store)), (Some(&b"first"[..]), map(&[("a", "1")])));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Arbitrary bytes, and bytes that start like a snapshot, never panic
    /// the decoder; what it accepts encodes back to the same bytes.
    #[test]
    fn d1_kv_store_snapshot_decoding_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..64), magic in any::<bool>()) {
        let bytes = if magic { [&b"kvsnap01"[..], &tail].concat() } else { tail };
        if let Ok(entries) = decode_snapshot(&bytes) {
            let pairs: Vec<(&[u8], &[u8])> = entries.iter().map(|(key, value)| (key.as_ref(), value.as_ref())).collect();
            prop_assert_eq!(snapshot_of(&pairs), bytes);
        }
    }
}

/// A step of the model test.
#[derive(Clone, Debug)]
enum Step {
    Put(u8, u8),
    Delete(u8),
    Checkpoint,
    Reopen,
    Restore(Vec<(u8, u8)>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..8u8, any::<u8>()).prop_map(|(key, value)| Step::Put(key, value)),
        2 => (0..8u8).prop_map(Step::Delete),
        1 => Just(Step::Checkpoint),
        1 => Just(Step::Reopen),
        1 => proptest::collection::vec((0..8u8, any::<u8>()), 0..4).prop_map(Step::Restore),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The store against a map: reads and snapshots always show the state as
    /// applied; a reopen goes back to the last checkpoint, record and all.
    #[test]
    fn d1_kv_store_matches_a_map_through_checkpoints_restores_and_reopens(steps in proptest::collection::vec(step(), 1..40)) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut store = open(dir.path());
        let (mut applied, mut durable) = (BTreeMap::<Bytes, Bytes>::new(), (None::<Bytes>, BTreeMap::new()));
        for (at, step) in steps.into_iter().enumerate() {
            match step {
                Step::Put(key, value) => {
                    let existed = applied.insert(Bytes::from(vec![key]), Bytes::from(vec![value])).is_some();
                    let answer = store.apply(Op(at as u64), &put(&[key], &[value]));
                    prop_assert_eq!(answer, if existed { "existed" } else { "new" });
                }
                Step::Delete(key) => {
                    let existed = applied.remove(&[key][..]).is_some();
                    let answer = store.apply(Op(at as u64), &delete(&[key]));
                    prop_assert_eq!(answer, if existed { "existed" } else { "new" });
                }
                Step::Checkpoint => {
                    let record = Bytes::from(format!("record {at}"));
                    store.checkpoint(&record).expect("checkpoint");
                    durable = (Some(record), applied.clone());
                }
                Step::Reopen => {
                    drop(store);
                    store = open(dir.path());
                    applied = durable.1.clone();
                    prop_assert_eq!(store.checkpointed(), durable.0.clone());
                }
                Step::Restore(entries) => {
                    let entries: BTreeMap<Bytes, Bytes> =
                        entries.into_iter().map(|(key, value)| (Bytes::from(vec![key]), Bytes::from(vec![value]))).collect();
                    let pairs: Vec<(&[u8], &[u8])> = entries.iter().map(|(key, value)| (key.as_ref(), value.as_ref())).collect();
                    store.restore(&snapshot_of(&pairs)).expect("restore");
                    applied = entries;
                }
            }
            prop_assert_eq!(&contents(&store), &applied);
            for key in 0..8u8 {
                let answer = store.read(&[key]);
                let expected = applied.get(&[key][..]).map_or_else(|| vec![0], |value| [&[1u8][..], value].concat());
                prop_assert_eq!(answer.as_ref(), &expected[..]);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A checkpointed file with bytes overwritten anywhere: opening it never
    /// panics. It is refused, or it opens at a checkpoint it held.
    #[test]
    fn d1_kv_store_opening_a_damaged_file_never_panics(at in any::<prop::sample::Index>(), garbage in proptest::collection::vec(any::<u8>(), 1..64)) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = KvStore::path(dir.path(), GroupId(0));
        let mut store = open(dir.path());
        set(&mut store, "a", "1");
        store.checkpoint(b"first").expect("checkpoint");
        set(&mut store, "b", "2");
        store.checkpoint(b"second").expect("checkpoint");
        drop(store);
        let mut bytes = std::fs::read(&path).expect("read");
        let start = at.index(bytes.len());
        let end = (start + garbage.len()).min(bytes.len());
        bytes[start..end].copy_from_slice(&garbage[..end - start]);
        std::fs::write(&path, &bytes).expect("write");
        if let Ok(store) = KvStore::open(&path) {
            let state = (store.checkpointed(), contents(&store));
            let first = (Some(Bytes::from_static(b"first")), map(&[("a", "1")]));
            let second = (Some(Bytes::from_static(b"second")), map(&[("a", "1"), ("b", "2")]));
            prop_assert!(state == first || state == second, "{:?}", state);
        }
    }
}

/// D3: a checkpoint streamed from a read transaction, in chunks of at most
/// `chunk_max` bytes, staged by another store that is reopened halfway (a
/// restart of the receiver), and installed: the receiver holds exactly the
/// checkpoint's entries, not what was applied after it, and its stream
/// size agrees with the sender's.
#[test]
fn d3_kv_store_streams_its_checkpoint_and_a_staged_stream_resumes_after_a_reopen() {
    let (from, to) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let mut source = open(from.path());
    for index in 0..200 {
        set(&mut source, &format!("key-{index:03}"), &"v".repeat(index % 37));
    }
    remove(&mut source, "key-007");
    source.checkpoint(b"at 201").expect("checkpoint");
    let checkpointed = contents(&source);
    set(&mut source, "key-999", "after the checkpoint: not streamed");
    let mut view = source.export().expect("exports").expect("a view of the checkpoint");
    assert_eq!(view.record(), Bytes::from_static(b"at 201"));
    let size = view.size_bytes();
    let mut target = open(to.path());
    set(&mut target, "stale", "replaced by the stream");
    target.checkpoint(b"old").expect("checkpoint");
    target.import_begin(b"stream key").expect("stages");
    let mut offset = 0;
    while offset < size / 2 {
        let chunk = view.read(offset, 256).expect("reads").expect("a chunk");
        assert!(chunk.len() <= 256);
        assert_eq!(view.read(offset, 256).expect("again"), Some(chunk.clone()), "a chunk read again is the same");
        target.import_write(offset, &chunk).expect("staged");
        offset += chunk.len() as u64;
    }
    drop(target);
    let mut target = open(to.path());
    assert_eq!(target.import_staged(), Some((Bytes::from_static(b"stream key"), offset)), "resumes where it stopped");
    assert_eq!(get(&target, "stale").as_deref(), Some("replaced by the stream"), "staging leaves the state alone");
    assert!(target.import_write(offset + 1, b"x").is_err(), "a chunk past the staged length is refused");
    while offset < size {
        let chunk = view.read(offset, 256).expect("reads").expect("a chunk");
        target.import_write(offset, &chunk).expect("staged");
        offset += chunk.len() as u64;
    }
    target.import_finish(b"at 201").expect("installs");
    assert_eq!(contents(&target), checkpointed, "the checkpoint's entries, none after it");
    assert_eq!(target.checkpointed().as_deref(), Some(&b"at 201"[..]));
    drop(target);
    let mut reopened = open(to.path());
    assert_eq!(contents(&reopened), checkpointed, "durable");
    assert_eq!(reopened.import_staged(), None);
    let mut again = reopened.export().expect("exports").expect("a view");
    assert_eq!(again.size_bytes(), size, "the installed file records the stream's size");
    assert!(again.read(17, 256).expect("reads").is_none(), "an offset no chunk started at starts over");
}

/// D3: a stream chunk that does not decode is refused, and nothing is
/// staged from it.
#[test]
fn d3_kv_store_refuses_a_chunk_that_does_not_decode() {
    let dir = tempfile::tempdir().expect("dir");
    let mut store = open(dir.path());
    store.import_begin(b"key").expect("stages");
    for bad in [&[5u8, 0, b'a'][..], &[1, 0, b'b', 9, 0, 0, 0][..]] {
        assert!(store.import_write(0, bad).is_err(), "{bad:?}");
    }
    assert_eq!(store.import_staged(), Some((Bytes::from_static(b"key"), 0)));
}
