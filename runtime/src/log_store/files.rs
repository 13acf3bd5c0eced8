//! File system steps the store needs made durable: creating directories
//! (whose entries last only once their parent is synced), syncing a file or
//! a directory by its path, removing what may already be gone.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Create `dir` and its missing ancestors; add to `unsynced` each
/// directory that gained an entry (the parent of each one created).
pub(super) fn create_dirs(dir: &Path, unsynced: &mut BTreeSet<PathBuf>) -> std::io::Result<()> {
    let missing: Vec<&Path> =
        dir.ancestors().take_while(|ancestor| !ancestor.as_os_str().is_empty() && !ancestor.exists()).collect();
    std::fs::create_dir_all(dir)?;
    for created in missing {
        let parent = created.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
        unsynced.insert(parent.to_owned());
    }
    Ok(())
}

/// Make a file's data, or a directory's entries, durable (`fsync`; Linux
/// syncs a file through any descriptor of it).
pub(super) fn sync(path: &Path) -> Result<(), String> {
    std::fs::File::open(path)
        .and_then(|file| file.sync_all())
        .map_err(|error| format!("{}: could not sync: {error}", path.display()))
}

/// Remove a file; one already gone is removed.
pub(super) fn remove_file(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != ErrorKind::NotFound => {
            Err(format!("{}: could not remove: {error}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Remove a directory and what it holds; one already gone is removed.
pub(super) fn remove_dir(path: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(path) {
        Err(error) if error.kind() != ErrorKind::NotFound => {
            Err(format!("{}: could not remove: {error}", path.display()))
        }
        _ => Ok(()),
    }
}
