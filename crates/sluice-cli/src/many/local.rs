//! The files of a local directory tree, as transfers see them: regular files
//! with their path relative to the root (segments joined by `/` on every
//! platform), size and modification time, in the order their keys sort (so a
//! walk and a store listing can be merged), one at a time: a walk holds the
//! entries still to visit of each directory on its path (all of a flat
//! directory's), never the whole tree.
//!
//! Symbolic links to files are followed (the object holds the target's bytes);
//! links to directories are not descended, so a link cycle cannot make the walk
//! endless; both are reported as skipped with their reason, as are sockets,
//! FIFOs and devices and names that are not UTF-8. Empty directories hold no
//! file and make no object; `.sluice` directories (a directory store's
//! bookkeeping) are not entered.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::filter::Filter;

/// A regular file to transfer.
#[derive(Debug, Clone)]
pub struct LocalFile {
    /// Relative to the root, `/`-separated.
    pub relative: String,
    pub path: PathBuf,
    pub size: u64,
    pub modified: SystemTime,
}

/// A file the walk did not take, and why.
#[derive(Debug, Clone)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: String,
}

/// One step of a walk.
#[derive(Debug)]
pub enum Found {
    File(LocalFile),
    Skipped(Skipped),
}

/// An entry of a directory being walked, not yet looked at.
struct Pending {
    /// Its path relative to the root; a directory's ends in `/`, so that it
    /// sorts where its keys do (`a-b` before `a/x`, `a/x` before `a0`).
    sort_key: String,
    path: PathBuf,
}

/// A walk of a tree, file by file in key order (a blocking iterator: run it
/// off the async runtime). A directory's entries are read and sorted when the
/// walk enters it; it holds those still to visit of each directory on its path.
pub struct Walker {
    filter: Filter,
    /// The entries still to visit of each directory entered, innermost last,
    /// each sorted in reverse (the next one last).
    stack: Vec<Vec<Pending>>,
    /// Entries found while reading a directory that the walk cannot take.
    skipped: VecDeque<Skipped>,
}

impl Walker {
    /// Starts a walk of `root`; an unreadable root is an error.
    pub fn new(root: &Path, filter: Filter) -> std::io::Result<Walker> {
        let mut walker = Walker {
            filter,
            stack: Vec::new(),
            skipped: VecDeque::new(),
        };
        let entries = walker.read_sorted(root, "")?;
        walker.stack.push(entries);
        Ok(walker)
    }

    /// The entries of `dir` (at `relative_dir/`, or the root for ""), sorted
    /// in reverse key order; entries it cannot name are reported as skipped.
    fn read_sorted(&mut self, dir: &Path, relative_dir: &str) -> std::io::Result<Vec<Pending>> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = match entry {
                Ok(entry) => entry,
                Err(error) => {
                    self.skip(
                        dir.to_path_buf(),
                        format!("cannot read the directory: {error}"),
                    );
                    break;
                }
            };
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                self.skip(path, "the name is not UTF-8".into());
                continue;
            };
            let is_dir = match entry.file_type() {
                Ok(kind) => kind.is_dir(),
                Err(error) => {
                    self.skip(path, error.to_string());
                    continue;
                }
            };
            // A directory store's bookkeeping is not data: `sync ./sluice-data
            // s3://…` copies the objects, not the staging files and sidecars.
            if is_dir && name == sluice_store::fs::INTERNAL_DIR {
                continue;
            }
            let mut sort_key = String::with_capacity(relative_dir.len() + name.len() + 2);
            if !relative_dir.is_empty() {
                sort_key.push_str(relative_dir);
                sort_key.push('/');
            }
            sort_key.push_str(&name);
            if is_dir {
                sort_key.push('/');
            }
            entries.push(Pending { sort_key, path });
        }
        entries.sort_unstable_by(|a, b| b.sort_key.cmp(&a.sort_key));
        Ok(entries)
    }

    fn skip(&mut self, path: PathBuf, reason: String) {
        self.skipped.push_back(Skipped { path, reason });
    }

    /// Looks at one entry: a file the walk takes, or none (a directory
    /// entered, a file filtered out or skipped).
    fn visit(&mut self, entry: Pending) -> Option<LocalFile> {
        let Pending { mut sort_key, path } = entry;
        if sort_key.ends_with('/') {
            sort_key.pop();
            match self.read_sorted(&path, &sort_key) {
                Ok(entries) => self.stack.push(entries),
                Err(error) => self.skip(path, format!("cannot read the directory: {error}")),
            }
            return None;
        }
        // Follows a link to its target.
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            Err(error) => {
                self.skip(path, format!("cannot read it: {error}"));
                return None;
            }
        };
        if meta.is_dir() {
            self.skip(path, "a symbolic link to a directory (not followed)".into());
            return None;
        }
        if !meta.is_file() {
            self.skip(path, "not a regular file".into());
            return None;
        }
        if !self.filter.accepts(&sort_key) {
            return None;
        }
        match meta.modified() {
            Ok(modified) => Some(LocalFile {
                relative: sort_key,
                path,
                size: meta.len(),
                modified,
            }),
            Err(error) => {
                self.skip(path, format!("cannot read its modification time: {error}"));
                None
            }
        }
    }
}

impl Iterator for Walker {
    type Item = Found;

    fn next(&mut self) -> Option<Found> {
        loop {
            if let Some(skipped) = self.skipped.pop_front() {
                return Some(Found::Skipped(skipped));
            }
            let top = self.stack.last_mut()?;
            let Some(entry) = top.pop() else {
                self.stack.pop();
                continue;
            };
            if let Some(file) = self.visit(entry) {
                return Some(Found::File(file));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_files_with_slash_paths_and_skips_what_it_cannot_take() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(root.join("top.txt"), b"1").unwrap();
        std::fs::write(root.join("a/b/deep.txt"), b"22").unwrap();
        std::fs::write(root.join("a/skip.tmp"), b"333").unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(root.join("top.txt"), root.join("link.txt")).unwrap();
            std::os::unix::fs::symlink(root.join("a"), root.join("a/loop")).unwrap();
        }
        let filter = Filter::new(&[], &["*.tmp".to_string()]).unwrap();
        let (mut files, mut skipped) = (Vec::new(), Vec::new());
        for found in Walker::new(root, filter).unwrap() {
            match found {
                Found::File(file) => files.push(file),
                Found::Skipped(skip) => skipped.push(skip),
            }
        }
        let found: Vec<(&str, u64)> = files
            .iter()
            .map(|f| (f.relative.as_str(), f.size))
            .collect();
        #[cfg(unix)]
        assert_eq!(
            found,
            [("a/b/deep.txt", 2), ("link.txt", 1), ("top.txt", 1)]
        );
        #[cfg(unix)]
        assert!(
            skipped
                .iter()
                .any(|s| s.path.ends_with("a/loop") && s.reason.contains("directory")),
            "{:?}",
            skipped
        );
    }

    /// A directory's files come where their keys sort, not where the
    /// directory's name does: `/` sorts after `-` and before `0`.
    #[test]
    fn files_come_in_key_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for relative in ["a0", "a-b", "a/x", "a/y/z", "a/y-", "b", "a/y0"] {
            let path = root.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b"").unwrap();
        }
        let found: Vec<String> = Walker::new(root, Filter::all())
            .unwrap()
            .map(|found| match found {
                Found::File(file) => file.relative,
                Found::Skipped(skipped) => panic!("skipped {skipped:?}"),
            })
            .collect();
        let mut sorted = found.clone();
        sorted.sort();
        assert_eq!(found, sorted);
        assert_eq!(found, ["a-b", "a/x", "a/y-", "a/y/z", "a/y0", "a0", "b"]);
    }

    #[test]
    fn a_missing_root_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Walker::new(&dir.path().join("nope"), Filter::all()).is_err());
    }
}
