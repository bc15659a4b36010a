//! Wildcards in a location, as s5cmd takes them: `'s3://b/logs/2026-*/*.gz'`
//! lists `s3://b/logs/` and keeps the objects whose rest of key matches
//! `2026-*/*.gz`, where `*` matches any run of characters, `/` included, and
//! `?` one character (quote the location, or the shell expands it first). The
//! part before the first wildcard, up to its last `/`, is the prefix the
//! matched objects are taken from: under a destination they keep the rest of
//! their keys (`2026-03/app.gz`), as files of a directory do. A local source
//! (`'photos/*.jpg'`) works the same way on a directory.

use globset::{GlobBuilder, GlobMatcher};

use crate::UsageError;

/// A location with wildcards, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wildcard {
    /// The location up to the last `/` before the first wildcard, ending in `/`
    /// (`./` for a local pattern without a directory).
    pub base: String,
    /// The rest, matched against each key (or path) relative to `base`.
    pub pattern: String,
}

/// The characters that make a location a pattern.
const WILDCARDS: [char; 2] = ['*', '?'];

impl Wildcard {
    /// Splits `location` when it holds a wildcard (in the key, for `s3://`
    /// and `az://`).
    /// A local path that exists as written is itself, not a pattern
    /// (`what?.txt` names that file).
    pub fn split(location: &str) -> Option<Wildcard> {
        let bucket_rest = ["s3://", "az://"]
            .into_iter()
            .find_map(|scheme| location.strip_prefix(scheme));
        if bucket_rest.is_none() && std::path::Path::new(location).exists() {
            return None;
        }
        let searched_from = match bucket_rest {
            Some(rest) => location.len() - rest.len() + rest.find('/')? + 1,
            None => 0,
        };
        let first = searched_from + location[searched_from..].find(WILDCARDS)?;
        let (base, pattern) = match location[..first].rfind('/') {
            Some(slash) => (location[..=slash].to_string(), &location[slash + 1..]),
            None => ("./".to_string(), location),
        };
        Some(Wildcard {
            base,
            pattern: pattern.to_string(),
        })
    }

    /// The pattern compiled: `*` crosses `/`, as in s5cmd.
    pub fn matcher(&self) -> Result<GlobMatcher, UsageError> {
        GlobBuilder::new(&self.pattern)
            .literal_separator(false)
            .backslash_escape(true)
            .build()
            .map(|glob| glob.compile_matcher())
            .map_err(|e| UsageError(format!("wildcard {:?}: {}", self.pattern, e.kind())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_split_where_their_wildcards_start() {
        // (location, base, pattern)
        let cases: [(&str, Option<(&str, &str)>); 8] = [
            (
                "s3://b/logs/2026-*/*.gz",
                Some(("s3://b/logs/", "2026-*/*.gz")),
            ),
            ("s3://b/*", Some(("s3://b/", "*"))),
            ("s3://b/a/b?.txt", Some(("s3://b/a/", "b?.txt"))),
            ("s3://b/logs/", None),
            ("s3://b/logs/x.gz", None),
            ("photos/*.jpg", Some(("photos/", "*.jpg"))),
            ("*.jpg", Some(("./", "*.jpg"))),
            ("./a/file.txt", None),
        ];
        for (location, split) in cases {
            let want = split.map(|(base, pattern)| Wildcard {
                base: base.into(),
                pattern: pattern.into(),
            });
            assert_eq!(Wildcard::split(location), want, "{location}");
        }
    }

    #[test]
    fn a_star_crosses_slashes_as_in_s5cmd() {
        // (pattern, relative key, matches)
        let cases = [
            ("*.gz", "a.gz", true),
            ("*.gz", "2026-01/a.gz", true),
            ("2026-*/*.gz", "2026-01/a.gz", true),
            ("2026-*/*.gz", "2025-12/a.gz", false),
            ("b?.txt", "b1.txt", true),
            ("b?.txt", "b12.txt", false),
            ("*", "anything/at/all", true),
        ];
        for (pattern, key, matches) in cases {
            let wildcard = Wildcard {
                base: "s3://b/".into(),
                pattern: pattern.into(),
            };
            assert_eq!(
                wildcard.matcher().unwrap().is_match(key),
                matches,
                "{pattern} {key}"
            );
        }
    }
}
