//! Records as tables: a stream with `format = "parquet"` writes each batch as
//! one Parquet file. Its records are checked against the stream's schema
//! ([`schema`]: declared, or inferred and widened) before they are taken, and
//! encoded frame by frame into the file ([`file`], decoded by [`json_rows`],
//! dictionaries chosen by [`dictionary`]) on the CPU pool. With
//! `table = "delta"` or `"iceberg"`, the table is read as the stream opens
//! ([`opening`]) and each stored file is then committed to it by the
//! stream's writer ([`sink`]) through [`stream_table`]: a Delta Lake table
//! ([`delta`], the sluice-delta crate; the stream's schema as its columns in
//! [`columns`]) or an Apache Iceberg one (sluice-iceberg;
//! [`iceberg_columns`]). Its files are announced once a commit holds them
//! ([`announce`]).

pub mod announce;
pub mod columns;
pub(crate) mod dictionary;
pub(crate) mod file;
pub mod iceberg_columns;
pub(crate) mod iceberg_partitions;
pub(crate) mod json_rows;
pub(crate) mod opening;
pub(crate) mod rules;
pub mod schema;
pub mod sink;
pub mod stream_table;

/// The Delta table itself (its log, protocol, commits and upkeep): a crate
/// of its own, seen here under its old path.
pub use sluice_delta as delta;
pub use sluice_delta::PARQUET_CONTENT_TYPE;
/// The Iceberg table (metadata, manifests, commits, catalog and upkeep).
pub use sluice_iceberg as iceberg;

/// A fault for tests: with `SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS=N`, the
/// process ends at once (exit status 137, as SIGKILL's; nothing flushed, the
/// group not left) right after its N-th table commit: before the commit's
/// files are announced, before a Kafka source commits the group's offsets,
/// before a gateway answers the requests the commit holds — the window a
/// SIGKILL from outside hits only by luck. Called by every commit that ends
/// well.
pub(crate) fn table_committed() {
    static AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    static COMMITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let at = AT.get_or_init(|| {
        std::env::var("SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    let Some(at) = *at else {
        return;
    };
    let commits = COMMITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if commits == at {
        eprintln!("SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS: exiting after table commit {commits}");
        std::process::exit(137);
    }
}
