//! The files of a local directory tree, as transfers see them: regular files
//! with their path relative to the root (segments joined by `/` on every
//! platform), size and modification time, in path order.
//!
//! Symbolic links to files are followed (the object holds the target's bytes);
//! links to directories are not descended, so a link cycle cannot make the walk
//! endless; both are reported as skipped with their reason, as are sockets,
//! FIFOs and devices and names that are not UTF-8. Empty directories hold no
//! file and make no object.

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

/// What a walk found.
#[derive(Debug, Default)]
pub struct Walk {
    pub files: Vec<LocalFile>,
    pub skipped: Vec<Skipped>,
}

/// Walks `root` (a blocking call: run it off the async runtime).
pub fn walk(root: &Path, filter: &Filter) -> std::io::Result<Walk> {
    let mut walk = Walk::default();
    // Directories still to read, with their relative path ("" for the root).
    let mut pending = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, relative_dir)) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if relative_dir.is_empty() => return Err(error),
            Err(error) => {
                walk.skip(dir, format!("cannot read the directory: {error}"));
                continue;
            }
        };
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                walk.skip(path, "the name is not UTF-8".into());
                continue;
            };
            let relative = if relative_dir.is_empty() {
                name
            } else {
                format!("{relative_dir}/{name}")
            };
            let kind = match entry.file_type() {
                Ok(kind) => kind,
                Err(error) => {
                    walk.skip(path, error.to_string());
                    continue;
                }
            };
            if kind.is_dir() {
                pending.push((path, relative));
                continue;
            }
            // Follows a link to its target.
            let meta = match std::fs::metadata(&path) {
                Ok(meta) => meta,
                Err(error) => {
                    walk.skip(path, format!("cannot read it: {error}"));
                    continue;
                }
            };
            if meta.is_dir() {
                walk.skip(path, "a symbolic link to a directory (not followed)".into());
                continue;
            }
            if !meta.is_file() {
                walk.skip(path, "not a regular file".into());
                continue;
            }
            if !filter.accepts(&relative) {
                continue;
            }
            walk.files.push(LocalFile {
                relative,
                path,
                size: meta.len(),
                modified: meta.modified()?,
            });
        }
    }
    walk.files.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(walk)
}

impl Walk {
    fn skip(&mut self, path: PathBuf, reason: String) {
        self.skipped.push(Skipped { path, reason });
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
        let walk = walk(root, &filter).unwrap();
        let found: Vec<(&str, u64)> = walk
            .files
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
            walk.skipped
                .iter()
                .any(|s| s.path.ends_with("a/loop") && s.reason.contains("directory")),
            "{:?}",
            walk.skipped
        );
    }

    #[test]
    fn a_missing_root_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(walk(&dir.path().join("nope"), &Filter::all()).is_err());
    }
}
