//! `--include` / `--exclude`: which files of a directory or objects under a
//! prefix a command takes. Paths are relative, with `/` between segments. A glob
//! with a `/` matches the whole relative path (`*` stays inside one segment, `**`
//! crosses them); a glob without one matches the file name wherever it is.
//! With includes, a path must match one of them; an exclude always wins.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::UsageError;

/// Compiled include and exclude globs, and the wildcard of the location.
#[derive(Debug, Clone)]
pub struct Filter {
    include: Option<Globs>,
    exclude: Option<Globs>,
    /// From a location with wildcards ([`crate::wildcard`]): `*` crosses `/`.
    pattern: Option<globset::GlobMatcher>,
}

#[derive(Debug, Clone)]
struct Globs {
    /// Globs with a `/`, against the relative path.
    paths: GlobSet,
    /// Globs without one, against the last segment.
    names: GlobSet,
}

impl Globs {
    fn new(patterns: &[String], flag: &str) -> Result<Option<Globs>, UsageError> {
        if patterns.is_empty() {
            return Ok(None);
        }
        let (mut paths, mut names) = (GlobSetBuilder::new(), GlobSetBuilder::new());
        for pattern in patterns {
            let glob = GlobBuilder::new(pattern)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| UsageError(format!("{flag} {pattern:?}: {}", e.kind())))?;
            if pattern.contains('/') {
                paths.add(glob);
            } else {
                names.add(glob);
            }
        }
        let build = |set: GlobSetBuilder| {
            set.build()
                .map_err(|e| UsageError(format!("{flag}: {}", e.kind())))
        };
        Ok(Some(Globs {
            paths: build(paths)?,
            names: build(names)?,
        }))
    }

    fn matches(&self, relative: &str) -> bool {
        let name = relative.rsplit('/').next().unwrap_or(relative);
        self.paths.is_match(relative) || self.names.is_match(name)
    }
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Filter, UsageError> {
        Ok(Filter {
            include: Globs::new(include, "--include")?,
            exclude: Globs::new(exclude, "--exclude")?,
            pattern: None,
        })
    }

    /// The filter of a transfer's flags and its source's wildcard, if any.
    pub fn of(many: &crate::args::ManyArgs) -> Result<Filter, UsageError> {
        Filter::new(&many.include, &many.exclude)?.matching(many.pattern.as_ref())
    }

    /// Takes only what `wildcard`'s pattern matches, besides the globs.
    pub fn matching(
        mut self,
        wildcard: Option<&crate::wildcard::Wildcard>,
    ) -> Result<Filter, UsageError> {
        self.pattern = wildcard.map(|w| w.matcher()).transpose()?;
        Ok(self)
    }

    /// Takes everything.
    #[cfg(test)]
    pub fn all() -> Filter {
        Filter {
            include: None,
            exclude: None,
            pattern: None,
        }
    }

    /// Whether the file or object at `relative` is taken.
    pub fn accepts(&self, relative: &str) -> bool {
        // A directory store's bookkeeping, on either side, is never data: not
        // uploaded, not downloaded (it would make a store of the directory),
        // not deleted by `sync --delete`.
        if relative
            .split('/')
            .any(|segment| segment == sluice_store::fs::INTERNAL_DIR)
        {
            return false;
        }
        if self.pattern.as_ref().is_some_and(|p| !p.is_match(relative)) {
            return false;
        }
        if self.exclude.as_ref().is_some_and(|g| g.matches(relative)) {
            return false;
        }
        self.include.as_ref().is_none_or(|g| g.matches(relative))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_select_relative_paths() {
        let s = |v: &[&str]| v.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        // (include, exclude, path, taken)
        let cases: &[(&[&str], &[&str], &str, bool)] = &[
            (&[], &[], "a/b.txt", true),
            (&["*.txt"], &[], "a/b.txt", true),
            (&["*.txt"], &[], "b.txt", true),
            (&["*.txt"], &[], "a/b.log", false),
            (&["a/*.txt"], &[], "a/b.txt", true),
            (&["a/*.txt"], &[], "a/c/b.txt", false),
            (&["a/**/*.txt"], &[], "a/c/d/b.txt", true),
            (&[], &["*.tmp"], "x/y.tmp", false),
            (&[], &["*.tmp"], "x/y.txt", true),
            (&["*.txt"], &["secret/**"], "secret/k.txt", false),
            (&["*.txt"], &["secret/**"], "public/k.txt", true),
            (&["data"], &[], "data/x", false),
            (&["data/**"], &[], "data/x/y", true),
            (&["\\*"], &[], "*", true),
            (&["\\*"], &[], "a", false),
        ];
        for (include, exclude, path, taken) in cases {
            let filter = Filter::new(&s(include), &s(exclude)).unwrap();
            assert_eq!(
                filter.accepts(path),
                *taken,
                "include {include:?} exclude {exclude:?} path {path}"
            );
        }
    }

    #[test]
    fn a_bad_glob_is_a_usage_error() {
        let error = Filter::new(&["a[".to_string()], &[]).unwrap_err();
        assert!(error.0.starts_with("--include \"a[\""), "{}", error.0);
    }
}
