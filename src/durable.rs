//! Making a new file's name durable. An fsync of a file makes its contents durable, but its
//! name (its entry in the folder) only an fsync of the folder holding it does (POSIX): without
//! one, a power cut soon after the first start could lose the ledger, its log or the secret
//! file whole, and the next start would begin on an empty ledger without a word.
//!
//! The ground floor: it imports nothing of the crate. It never syncs a file's contents; the
//! owner of each file does (redb's commits, the log's syncer, the secret's own `sync_all`).
//! Its callers sync a folder once per name they create, never on a start that finds the file.

use std::fs::File;
use std::io;
use std::path::Path;

/// Syncs the folder holding `path`, just created, so that its name survives a power cut.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    match File::open(folder)?.sync_all() {
        // A file system that cannot sync a folder (EINVAL) offers no other way to make a
        // name durable; PostgreSQL lets it pass too.
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Ok(()),
        synced => synced,
    }
}

/// `std::fs::create_dir_all`, each folder it makes synced into the folder holding it.
pub fn create_dir_all(folder: &Path) -> io::Result<()> {
    if folder.as_os_str().is_empty() || folder.is_dir() {
        return Ok(());
    }
    if let Some(parent) = folder.parent() {
        create_dir_all(parent)?;
    }
    match std::fs::create_dir(folder) {
        Ok(()) => sync_parent(folder),
        // Made by another process meanwhile, which syncs it.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && folder.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_are_made_as_create_dir_all_makes_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let deep = dir.path().join("a/b/c");
        create_dir_all(&deep).expect("made");
        assert!(deep.is_dir());
        create_dir_all(&deep).expect("already there");
        std::fs::write(dir.path().join("a/file"), "x").expect("a file");
        assert!(create_dir_all(&dir.path().join("a/file/d")).is_err());
        sync_parent(&deep.join("new")).expect("synced");
        assert!(sync_parent(&dir.path().join("nowhere/new")).is_err());
    }
}
