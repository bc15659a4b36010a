//! Maps object keys to paths under the store's root, refusing every key that could
//! name something outside it or collide with the store's own bookkeeping.

use std::path::{Path, PathBuf};

use crate::error::StoreError;
use crate::limits::MAX_KEY_LEN;

/// Directory under the root where the store keeps staging files, sidecars and
/// multipart uploads. No segment of a key may be it: a store's bookkeeping
/// (this one's, or a store's made inside it) never reads as an object.
pub const INTERNAL_DIR: &str = ".sluice";

/// Longest path segment most filesystems accept.
const MAX_SEGMENT_LEN: usize = 255;

/// Checks that `key` maps to a path strictly inside the root and returns the
/// relative path.
pub fn key_to_relative(key: &str) -> Result<PathBuf, StoreError> {
    let invalid = |reason: &'static str| StoreError::InvalidKey {
        key: key.to_string(),
        reason,
    };
    if key.is_empty() {
        return Err(invalid("the key is empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(invalid("the key is longer than 1024 bytes"));
    }
    if key.contains('\0') {
        return Err(invalid("the key contains a NUL byte"));
    }
    if key.starts_with('/') {
        return Err(invalid("the key starts with '/'"));
    }
    if key.ends_with('/') {
        return Err(invalid(
            "the key ends with '/': a directory store cannot hold it",
        ));
    }
    let mut relative = PathBuf::new();
    for segment in key.split('/') {
        match segment {
            "" => return Err(invalid("the key contains an empty segment ('//')")),
            "." | ".." => return Err(invalid("the key contains a '.' or '..' segment")),
            INTERNAL_DIR => {
                return Err(invalid(
                    "'.sluice' is the name of a directory store's bookkeeping: no segment of a key may be it",
                ))
            }
            s if s.len() > MAX_SEGMENT_LEN => {
                return Err(invalid("a segment of the key is longer than 255 bytes"))
            }
            s => relative.push(s),
        }
    }
    Ok(relative)
}

/// The inverse of [`key_to_relative`] for paths found while walking the root.
pub fn relative_to_key(relative: &Path) -> Option<String> {
    let mut key = String::new();
    for component in relative.components() {
        let std::path::Component::Normal(part) = component else {
            return None;
        };
        if !key.is_empty() {
            key.push('/');
        }
        key.push_str(part.to_str()?);
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_mapping_table() {
        let long_segment = "x".repeat(256);
        let long_key = "a/".repeat(513);
        let cases: Vec<(&str, Option<&str>)> = vec![
            ("a", Some("a")),
            ("a/b/c.txt", Some("a/b/c.txt")),
            (
                "tenant/2026/11/22/file name (1).bin",
                Some("tenant/2026/11/22/file name (1).bin"),
            ),
            ("ünïcødé/ключ", Some("ünïcødé/ключ")),
            ("..hidden", Some("..hidden")),
            ("a/.sluice", None),
            ("a/.sluice/sidecars/x.json", None),
            ("", None),
            ("/etc/passwd", None),
            ("../escape", None),
            ("a/../../escape", None),
            ("a/./b", None),
            ("a//b", None),
            ("dir/", None),
            (".sluice/tmp/x", None),
            (".sluice", None),
            ("nul\0byte", None),
            (&long_segment, None),
            (&long_key, None),
        ];
        for (key, expected) in cases {
            let got = key_to_relative(key).ok();
            assert_eq!(got.as_deref(), expected.map(Path::new), "{key:?}");
            if let Some(relative) = got {
                assert_eq!(relative_to_key(&relative).as_deref(), Some(key));
            }
        }
    }
}
