//! What every table format sluice commits to shares (Delta Lake in
//! sluice-delta, Apache Iceberg in sluice-iceberg): the data files a commit
//! adds ([`NewFile`]), application transactions that make a commit exactly
//! once ([`Transaction`], [`Committed`]), a stream's table layout from its
//! key template ([`TableLayout`]: the root and the Hive-style partition
//! directories), who hears of a commit's files ([`listener`]), and rows rewritten under
//! one schema ([`rewrite`], for checkpoints and compaction).

pub mod listener;
pub mod rewrite;
pub mod upkeep;

use std::collections::BTreeMap;
use std::sync::Arc;

use listener::FileTag;

/// The media type of a Parquet object.
pub const PARQUET_CONTENT_TYPE: &str = "application/vnd.apache.parquet";

/// The name Hive, Spark and Delta give the partition of a null (or empty)
/// value.
pub const HIVE_DEFAULT_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// A data file stored under the table's location, to be added.
#[derive(Debug, Clone)]
pub struct NewFile {
    /// The object's key in the store.
    pub key: String,
    pub size: u64,
    pub records: u64,
    /// What the table's listener needs to announce it once a commit holds
    /// it (none: it is not announced).
    pub announce_as: Option<FileTag>,
    /// Its Parquet footer, where its statistics come from (none: `numRecords` only).
    pub footer: Option<Arc<parquet::file::metadata::ParquetMetaData>>,
}

/// One application transaction of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub app_id: String,
    /// The version the table must hold now (None: none yet).
    pub after: Option<i64>,
    /// The version it holds once this commit is in.
    pub version: i64,
}

impl Transaction {
    /// Transaction `app_id` moved from `after` to `version`.
    pub fn new(app_id: impl Into<String>, after: Option<i64>, version: i64) -> Transaction {
        Transaction {
            app_id: app_id.into(),
            after,
            version,
        }
    }
}

/// How long a request's idempotency key is kept after its commit: a retry
/// within it is answered from the table; checkpoints written after it leave
/// the key out (a table fed keyed requests for months would otherwise carry
/// every key ever used in every checkpoint and every reader's memory).
pub const KEY_RETENTION: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// The application transaction of a request with idempotency key `key` in
/// stream `stream`: `sluice/key/<stream>/<key>`. Every other transaction
/// sluice writes starts `sluice-` (a writer's `sluice-<stream>-<uuid>`, a
/// Kafka partition's `sluice-<group>-<topic>-<partition>`, whose group and
/// topic may hold any text), so no name of theirs can pass for a key.
pub fn key_txn(stream: &str, key: &str) -> String {
    format!("{KEY_TXN_PREFIX}{stream}/{key}")
}

const KEY_TXN_PREFIX: &str = "sluice/key/";

/// Whether `app_id` is a request's idempotency key (see [`key_txn`]).
pub fn is_key_txn(app_id: &str) -> bool {
    app_id.starts_with(KEY_TXN_PREFIX)
}

/// What a commit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// The table's new version.
    Version(u64),
    /// Its transactions were at their new versions already, by another
    /// commit: an earlier attempt that landed late, or another owner's commit
    /// of the same offsets (its records are in, through that commit's files).
    /// Nothing was written: these files are not in the table.
    Already,
}

/// What a stream's table is: where, and its partition columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableLayout {
    /// The table's root key, without a trailing `/` (`events`).
    pub location: String,
    /// Partition columns: the `name=` directories of the key template.
    pub partition_columns: Vec<String>,
}

impl TableLayout {
    /// Partition columns are the key template's `name=…` directories below
    /// the table's root.
    pub fn from_template(location: &str, rendered_template: &str) -> TableLayout {
        let below = rendered_template
            .strip_prefix(location)
            .unwrap_or(rendered_template);
        let mut segments: Vec<&str> = below.split('/').filter(|s| !s.is_empty()).collect();
        segments.pop(); // the file's own name
        let partition_columns = segments
            .iter()
            .filter_map(|s| s.split_once('=').map(|(name, _)| name))
            .filter(|name| is_column_name(name))
            .map(str::to_string)
            .collect();
        TableLayout {
            location: location.trim_end_matches('/').to_string(),
            partition_columns,
        }
    }

    /// `key` relative to the table's root; None when it is not below it.
    pub fn relative<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(self.location.as_str())?.strip_prefix('/')
    }

    /// The partition values the directories of `relative` (a file's path
    /// below the root) name, for each partition column (None: not named,
    /// or Hive's default partition).
    pub fn partition_values(&self, relative: &str) -> BTreeMap<String, Option<String>> {
        let mut values: BTreeMap<String, Option<String>> = self
            .partition_columns
            .iter()
            .map(|c| (c.clone(), None))
            .collect();
        let mut dirs: Vec<&str> = relative.split('/').collect();
        dirs.pop();
        for dir in dirs {
            if let Some((name, value)) = dir.split_once('=') {
                if let Some(slot) = values.get_mut(name) {
                    *slot = partition_value(value);
                }
            }
        }
        values
    }
}

/// A partition column's name: what a Hive-style directory can name.
fn is_column_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains(['{', '}'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The value a partition directory's `name=value` names: Hive's escaping
/// undone, and Hive's default partition null.
pub fn partition_value(escaped: &str) -> Option<String> {
    match escaped {
        HIVE_DEFAULT_PARTITION => None,
        escaped => Some(percent_decode(escaped)),
    }
}

/// `%XX` escapes undone (Delta's paths, Hive's partition directories); an
/// escape that is not one is kept as it is.
pub fn percent_decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file's key: below the root or not, and the partition values its
    /// directories name (escaped as Spark escapes them; Hive's default
    /// partition is null; a column no directory names is null too).
    #[test]
    fn a_files_key_names_its_partition_values() {
        let layout = TableLayout::from_template("events", "events/tenant=t/day=d/{uuid}.parquet");
        assert_eq!(layout.partition_columns, ["tenant", "day"]);
        let values = |pairs: &[(&str, Option<&str>)]| -> BTreeMap<String, Option<String>> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
                .collect()
        };
        // (key, the partition values; None: not below the root)
        let cases = [
            (
                "events/tenant=acme/day=2026-11-29/a.parquet",
                Some(values(&[
                    ("tenant", Some("acme")),
                    ("day", Some("2026-11-29")),
                ])),
            ),
            (
                "events/tenant=h%3Fq/day=__HIVE_DEFAULT_PARTITION__/a.parquet",
                Some(values(&[("tenant", Some("h?q")), ("day", None)])),
            ),
            (
                "events/a.parquet",
                Some(values(&[("tenant", None), ("day", None)])),
            ),
            ("eventsx/tenant=a/a.parquet", None),
            ("other/a.parquet", None),
        ];
        for (key, want) in cases {
            let got = layout.relative(key).map(|r| layout.partition_values(r));
            assert_eq!(got, want, "{key}");
        }
    }
}
