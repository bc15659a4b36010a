//! What says a file is still the version an upload started reading: its size,
//! modification time and inode. A write, a truncation or a replacement while
//! the file is read changes the stamp, and the upload is refused (nothing is
//! stored) instead of storing bytes of two versions under one name, which a
//! later sync, seeing an object younger than the file, would take as current.
//! The stamp is checked once the last byte is read: after the read for a
//! single PUT, after the last part for a multipart upload, before it completes.
//! A change is seen within the filesystem's timestamp resolution (fine-grained
//! once a time has been read, on Linux 6.13 and later).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

use crate::error::TransferError;

/// A file's size, modification time and identity at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    device: u64,
    inode: u64,
}

impl FileStamp {
    pub(crate) fn of(meta: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            device: meta.dev(),
            inode: meta.ino(),
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Refuses `now` unless it is the same version of the file.
    pub(crate) fn check(&self, now: &std::fs::Metadata) -> Result<(), TransferError> {
        let now = FileStamp::of(now);
        if now == *self {
            return Ok(());
        }
        let what = if (now.device, now.inode) != (self.device, self.inode) {
            "was replaced".to_string()
        } else if now.len != self.len {
            format!("changed size ({} bytes, then {})", self.len, now.len)
        } else {
            "was modified".to_string()
        };
        Err(TransferError::SourceChanged(what))
    }

    /// Reads the stamp of `path` again, off the async runtime, and refuses it
    /// unless it is the same version of the file.
    pub(crate) async fn check_path(&self, path: &Path) -> Result<(), TransferError> {
        let path = path.to_path_buf();
        let now = tokio::task::spawn_blocking(move || std::fs::metadata(path))
            .await
            .map_err(|e| TransferError::Source(io::Error::other(e)))?
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => TransferError::SourceChanged("was removed".into()),
                _ => TransferError::Source(e),
            })?;
        self.check(&now)
    }

    /// Reads the whole file at `path`, which must be this version of it
    /// before and after the read (blocking).
    pub(crate) fn read_whole(&self, path: &Path) -> Result<Vec<u8>, TransferError> {
        let mut file = std::fs::File::open(path).map_err(TransferError::Source)?;
        self.check(&file.metadata().map_err(TransferError::Source)?)?;
        let mut bytes = Vec::with_capacity(self.len as usize);
        io::Read::read_to_end(&mut file, &mut bytes).map_err(TransferError::Source)?;
        self.check(&file.metadata().map_err(TransferError::Source)?)?;
        if bytes.len() as u64 != self.len {
            // Written and set back to the same time and size: still not one version.
            return Err(TransferError::SourceChanged(format!(
                "changed size ({} bytes, then {})",
                self.len,
                bytes.len()
            )));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_the_same_version_until_it_changes() {
        type Change = fn(&Path);
        let cases: [(&str, Change, Option<&str>); 5] = [
            ("untouched", |_| {}, None),
            ("read only", |p| drop(std::fs::read(p).unwrap()), None),
            (
                "rewritten with the same size",
                |p| {
                    let old = std::fs::metadata(p).unwrap().modified().unwrap();
                    std::fs::write(p, b"HELLO").unwrap();
                    let f = std::fs::File::options().write(true).open(p).unwrap();
                    f.set_modified(old + std::time::Duration::from_secs(1))
                        .unwrap();
                },
                Some("was modified"),
            ),
            (
                "appended to",
                |p| {
                    use std::io::Write;
                    let mut f = std::fs::File::options().append(true).open(p).unwrap();
                    f.write_all(b"!").unwrap();
                },
                Some("changed size (5 bytes, then 6)"),
            ),
            (
                "replaced by a rename",
                |p| {
                    let other = p.with_extension("new");
                    std::fs::write(&other, b"hello").unwrap();
                    std::fs::rename(&other, p).unwrap();
                },
                Some("was replaced"),
            ),
        ];
        for (name, change, expected) in cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            std::fs::write(&path, b"hello").unwrap();
            let stamp = FileStamp::of(&std::fs::metadata(&path).unwrap());
            change(&path);
            let got = stamp.check(&std::fs::metadata(&path).unwrap());
            match (got, expected) {
                (Ok(()), None) => {}
                (Err(TransferError::SourceChanged(what)), Some(expected)) => {
                    assert_eq!(what, expected, "{name}")
                }
                (got, _) => panic!("{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_whole_read_checks_the_version_it_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello").unwrap();
        let stamp = FileStamp::of(&std::fs::metadata(&path).unwrap());
        assert_eq!(stamp.read_whole(&path).unwrap(), b"hello");
        // Replaced between the stamp and the open.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"jello!").unwrap();
        assert!(matches!(
            stamp.read_whole(&path),
            Err(TransferError::SourceChanged(_))
        ));
    }
}
