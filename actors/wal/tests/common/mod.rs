//! Helpers shared by the file storage tests: temporary shard directories and
//! a conformance harness.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use cohort_core::storage::conformance::Harness;
use cohort_core::storage::{Recovered, Storage};
use cohort_wal::{FileStorage, FileStorageConfig};

/// Limits that hold the conformance suite's 64 KiB operation.
pub fn roomy_config() -> FileStorageConfig {
    FileStorageConfig {
        segment_size_max_bytes: 160 * 1024,
        record_size_max_bytes: 80 * 1024,
        ..FileStorageConfig::default()
    }
}

/// Small segments, so that rotation and segment removal happen often, and
/// zeros written ahead a few records at a time (K3).
pub fn small_segments_config() -> FileStorageConfig {
    FileStorageConfig {
        segment_size_max_bytes: 2048,
        record_size_max_bytes: 1024,
        preallocation_size_bytes: 512,
        ..FileStorageConfig::default()
    }
}

/// [`roomy_config`] without preallocation: a segment file ends where its
/// log does, so a test can damage it at exact offsets.
pub fn exact_roomy_config() -> FileStorageConfig {
    FileStorageConfig { preallocation_size_bytes: 0, ..roomy_config() }
}

/// [`small_segments_config`] without preallocation (see [`exact_roomy_config`]).
pub fn exact_small_config() -> FileStorageConfig {
    FileStorageConfig { preallocation_size_bytes: 0, ..small_segments_config() }
}

/// A temporary directory under the system temp dir, removed on drop.
pub fn temp_dir(label: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("cohort-storage-{label}-")).tempdir().expect("create a temp dir")
}

/// Open `dir` and recover, panicking on error.
pub fn open_recover(dir: &Path, config: &FileStorageConfig) -> (FileStorage, Recovered) {
    let mut storage = FileStorage::open(dir, config.clone()).expect("valid config");
    let recovered = match storage.recover() {
        Ok(recovered) => recovered,
        Err(error) => panic!("recover of {} failed: {error}", dir.display()),
    };
    (storage, recovered)
}

/// Copy every file of `from` into `to` (a fresh directory).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy");
    for entry in std::fs::read_dir(from).expect("list") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy a file");
    }
}

/// The segment files of `dir`, oldest first.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "seg"))
        .collect();
    found.sort();
    found
}

/// The conformance harness for [`FileStorage`]: each `open_empty` is a new
/// temporary directory; a crash drops the storage (nothing is written on
/// drop) and opens the same directory again.
pub struct FileHarness {
    config: FileStorageConfig,
    dirs: Vec<tempfile::TempDir>,
}

impl FileHarness {
    pub fn new(config: FileStorageConfig) -> Self {
        Self { config, dirs: Vec::new() }
    }
}

impl Harness for FileHarness {
    type Storage = FileStorage;

    fn open_empty(&mut self) -> FileStorage {
        // Keep only the newest few directories alive.
        if self.dirs.len() > 4 {
            self.dirs.remove(0);
        }
        let dir = temp_dir("conformance");
        let storage = FileStorage::open(dir.path(), self.config.clone()).expect("valid config");
        self.dirs.push(dir);
        storage
    }

    fn crash_and_reopen(&mut self, storage: FileStorage) -> FileStorage {
        let dir = storage.dir().to_path_buf();
        drop(storage);
        FileStorage::open(dir, self.config.clone()).expect("valid config")
    }
}
