//! What the formats' upkeep takes and reports: compaction's bin packing
//! (files below a target size, rewritten once a partition has enough of
//! them) and the removal of files no version reads (Delta's vacuum,
//! Iceberg's orphan-file removal), so that `sluice tables` reads the same
//! for both.

/// What compaction takes and makes.
#[derive(Debug, Clone, Copy)]
pub struct CompactOptions {
    /// Files at least this large are left alone; bins are filled up to it.
    pub target_bytes: u64,
    /// A partition's small files are compacted once there are this many.
    pub min_files: usize,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            target_bytes: 256 << 20,
            min_files: 4,
        }
    }
}

/// What a compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactReport {
    pub files_before: usize,
    pub files_after: usize,
    /// Files rewritten, and the files they became.
    pub removed: usize,
    pub added: usize,
    /// The version that holds the rewrite (None: nothing to do).
    pub version: Option<u64>,
    /// The current snapshot's manifests before and after (Iceberg; None
    /// for formats without them).
    pub manifests: Option<(usize, usize)>,
}

/// What a vacuum found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VacuumReport {
    /// Deleted (or, in a dry run, to be deleted): not read by any version
    /// within the retention, and older than it.
    pub deleted: Vec<String>,
    /// Not referenced, but younger than the retention (may be a file being
    /// committed right now): kept.
    pub kept_young: usize,
    /// Read by the table (or by a version within the retention).
    pub referenced: usize,
    /// Under the table's root but no data file (hidden, or not Parquet):
    /// never deleted.
    pub not_data: usize,
}

/// `small` (one partition's files below the target, in the order they are
/// to be read) packed into bins of about `options.target_bytes`, each of two
/// files or more; none when there are fewer than `options.min_files`.
pub fn pack<T>(small: Vec<T>, size: impl Fn(&T) -> u64, options: &CompactOptions) -> Vec<Vec<T>> {
    if small.len() < options.min_files.max(2) {
        return Vec::new();
    }
    let mut bins = Vec::new();
    let mut bin: Vec<T> = Vec::new();
    let mut bytes = 0u64;
    for file in small {
        if !bin.is_empty() && bytes + size(&file) > options.target_bytes {
            bins.push(std::mem::take(&mut bin));
            bytes = 0;
        }
        bytes += size(&file);
        bin.push(file);
    }
    bins.push(bin);
    bins.retain(|bin| bin.len() >= 2);
    bins
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (case, sizes, target, min files, bins by size)
    #[test]
    fn small_files_are_packed_up_to_the_target() {
        type Case = (&'static str, Vec<u64>, u64, usize, Vec<Vec<u64>>);
        let cases: Vec<Case> = vec![
            ("too few", vec![1, 1, 1], 10, 4, vec![]),
            ("one bin", vec![1, 2, 3, 4], 10, 4, vec![vec![1, 2, 3, 4]]),
            (
                "two bins",
                vec![4, 4, 4, 4],
                10,
                2,
                vec![vec![4, 4], vec![4, 4]],
            ),
            (
                "a lone last file stays",
                vec![6, 3, 6],
                10,
                2,
                vec![vec![6, 3]],
            ),
        ];
        for (case, sizes, target, min_files, expected) in cases {
            let options = CompactOptions {
                target_bytes: target,
                min_files,
            };
            assert_eq!(pack(sizes, |s| *s, &options), expected, "{case}");
        }
    }
}
