//! The object tree under the store's root. A key's path is resolved one directory
//! at a time from a descriptor of the root, with `O_NOFOLLOW` at every step, so a
//! symbolic link placed under the root is never followed: it reads as no object
//! and refuses a write through it. Every change to the tree (a new directory, a
//! file renamed into place, a removal) is made durable by syncing the directory
//! that changed, when the store syncs at all.
//!
//! A directory tree cannot hold both `a` and `a/b`; such a write is refused with
//! [`StoreError::KeyConflict`] before its body is staged, and again (under the
//! key's lock) when it is renamed into place.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, Mode, OFlags, CWD};
use rustix::io::Errno;

use super::paths::key_to_relative;
use crate::error::StoreError;

/// Why a write cannot go where its key points.
const UNDER_AN_OBJECT: &str = "an object is stored at a prefix of this key (a directory store cannot hold both `a` and `a/b`)";
const OVER_OBJECTS: &str = "objects are stored under this key as a prefix (a directory store cannot hold both `a` and `a/b`)";
const THROUGH_A_LINK: &str =
    "the key's path crosses a symbolic link under the store's root, which the store never follows";
const NAME_TOO_LONG: &str = "the filesystem cannot hold a name this long";
const NAME_REFUSED: &str = "the filesystem refuses a name in this key";

/// The root directory, opened once.
#[derive(Debug)]
pub struct ObjectTree {
    root: OwnedFd,
    sync: bool,
}

/// The directories from the root down to a key's parent (each an open
/// descriptor) and the key's last segment.
struct Chain<'k> {
    dirs: Vec<OwnedFd>,
    names: Vec<&'k OsStr>,
}

impl Chain<'_> {
    fn parent(&self) -> &OwnedFd {
        self.dirs.last().expect("a chain holds the root at least")
    }

    fn name(&self) -> &OsStr {
        self.names.last().expect("a key has one segment at least")
    }
}

impl ObjectTree {
    pub fn open(root: &Path, sync: bool) -> io::Result<ObjectTree> {
        let root = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(ObjectTree { root, sync })
    }

    /// Opens the object at `key` for reading; a missing key, a directory and a
    /// symbolic link all read as no object.
    pub fn open_object(&self, key: &str) -> Result<File, StoreError> {
        let missing = || StoreError::NoSuchKey {
            key: key.to_string(),
        };
        let relative = key_to_relative(key)?;
        let chain = match self.walk(&relative, false) {
            Ok(chain) => chain,
            Err(e) if is_absent(e) => return Err(missing()),
            Err(e) => return Err(key_fault(e, key)),
        };
        let fd = rustix::fs::openat(
            chain.parent(),
            chain.name(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| {
            if is_absent(e) {
                missing()
            } else {
                key_fault(e, key)
            }
        })?;
        let file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(missing());
        }
        Ok(file)
    }

    /// The metadata of the regular file at `key`, if there is one (a symbolic
    /// link or a directory is none).
    pub fn object_metadata(&self, key: &str) -> Result<Option<fs::Metadata>, StoreError> {
        let relative = key_to_relative(key)?;
        match self.walk(&relative, false) {
            Ok(chain) => stat_file(&chain, key),
            Err(e) if is_absent(e) => Ok(None),
            Err(e) => Err(key_fault(e, key)),
        }
    }

    /// Checks that a write to `key` could be renamed into place: no object at a
    /// prefix of it, no objects under it, no symbolic link on its path.
    pub fn check_room(&self, key: &str) -> Result<(), StoreError> {
        let relative = key_to_relative(key)?;
        let chain = match self.walk(&relative, false) {
            Ok(chain) => chain,
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(key_fault(e, key)),
        };
        match rustix::fs::statat(chain.parent(), chain.name(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if rustix::fs::FileType::from_raw_mode(stat.st_mode).is_dir() => {
                Err(conflict(key, OVER_OBJECTS))
            }
            Ok(_) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(key_fault(e, key)),
        }
    }

    /// Renames the file at `staged` (an absolute path in the store's own
    /// directories) to `key`, creating the directories it needs, and returns the
    /// metadata of the file it replaced, if any.
    pub fn rename_into(
        &self,
        staged: &Path,
        key: &str,
    ) -> Result<Option<fs::Metadata>, StoreError> {
        let relative = key_to_relative(key)?;
        let chain = self.walk(&relative, true).map_err(|e| key_fault(e, key))?;
        let replaced = stat_file(&chain, key)?;
        rustix::fs::renameat(CWD, staged, chain.parent(), chain.name()).map_err(|e| match e {
            Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST => conflict(key, OVER_OBJECTS),
            e => key_fault(e, key),
        })?;
        self.sync_dir(chain.parent()).map_err(io::Error::from)?;
        Ok(replaced)
    }

    /// Removes the object at `key` and the directories it leaves empty; returns
    /// the metadata of the file removed (none when there was no object).
    pub fn remove(&self, key: &str) -> Result<Option<fs::Metadata>, StoreError> {
        let relative = key_to_relative(key)?;
        let chain = match self.walk(&relative, false) {
            Ok(chain) => chain,
            Err(e) if is_absent(e) => return Ok(None),
            Err(e) => return Err(key_fault(e, key)),
        };
        let Some(removed) = stat_file(&chain, key)? else {
            return Ok(None);
        };
        match rustix::fs::unlinkat(chain.parent(), chain.name(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(key_fault(e, key)),
        }
        self.sync_dir(chain.parent()).map_err(io::Error::from)?;
        // Empty directories go, deepest first; the first one still in use stops it.
        for depth in (1..chain.dirs.len()).rev() {
            let parent = &chain.dirs[depth - 1];
            if rustix::fs::unlinkat(parent, chain.names[depth - 1], AtFlags::REMOVEDIR).is_err() {
                break;
            }
            self.sync_dir(parent).map_err(io::Error::from)?;
        }
        Ok(Some(removed))
    }

    /// Opens the directories from the root to the parent of `relative`, creating
    /// the missing ones when `create`. Without `create`, a missing directory is
    /// `NOENT`; a file or a link where a directory should be is `NOTDIR` or `LOOP`.
    fn walk<'k>(&self, relative: &'k Path, create: bool) -> Result<Chain<'k>, Errno> {
        let names: Vec<&OsStr> = relative
            .components()
            .map(|c| match c {
                Component::Normal(name) => name,
                _ => unreachable!("key_to_relative yields normal components only"),
            })
            .collect();
        let mut dirs = vec![rustix::io::fcntl_dupfd_cloexec(&self.root, 0)?];
        for name in &names[..names.len() - 1] {
            let parent = dirs.last().expect("the root is first");
            let dir = match open_dir(parent, name) {
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(parent, *name, Mode::from_raw_mode(0o755)) {
                        Ok(()) => self.sync_dir(parent)?,
                        Err(Errno::EXIST) => {}
                        Err(e) => return Err(e),
                    }
                    open_dir(parent, name)?
                }
                other => other?,
            };
            dirs.push(dir);
        }
        Ok(Chain { dirs, names })
    }

    fn sync_dir(&self, dir: &OwnedFd) -> Result<(), Errno> {
        if self.sync {
            rustix::fs::fsync(dir)?;
        }
        Ok(())
    }
}

/// A path that stops at a missing name, a file or a link: no object there.
fn is_absent(error: Errno) -> bool {
    matches!(error, Errno::NOENT | Errno::NOTDIR | Errno::LOOP)
}

fn open_dir(parent: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The metadata of the chain's last name if it is a regular file.
fn stat_file(chain: &Chain<'_>, key: &str) -> Result<Option<fs::Metadata>, StoreError> {
    let fd = match rustix::fs::openat(
        chain.parent(),
        chain.name(),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(key_fault(e, key)),
    };
    let meta = File::from(fd).metadata()?;
    Ok(meta.is_file().then_some(meta))
}

fn conflict(key: &str, reason: &'static str) -> StoreError {
    StoreError::KeyConflict {
        key: key.to_string(),
        reason,
    }
}

/// What an error met while resolving `key` means for the client.
fn key_fault(error: Errno, key: &str) -> StoreError {
    match error {
        Errno::NOTDIR => conflict(key, UNDER_AN_OBJECT),
        Errno::LOOP => conflict(key, THROUGH_A_LINK),
        Errno::NAMETOOLONG => StoreError::InvalidKey {
            key: key.to_string(),
            reason: NAME_TOO_LONG,
        },
        Errno::INVAL | Errno::ILSEQ => StoreError::InvalidKey {
            key: key.to_string(),
            reason: NAME_REFUSED,
        },
        e => StoreError::Io(e.into()),
    }
}

/// Syncs a directory by path (the store's own directories), when `sync`.
pub fn sync_dir_at(path: &Path, sync: bool) -> io::Result<()> {
    if sync {
        File::open(path)?.sync_all()?;
    }
    Ok(())
}
