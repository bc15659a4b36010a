//! Records as tables: a stream with `format = "parquet"` writes each batch as
//! one Parquet file. Its records are checked against the stream's schema
//! ([`schema`]: declared, or inferred and widened) before they are taken, and
//! encoded frame by frame into the file ([`file`]) on the CPU pool. With
//! `table = "delta"`, each stored file is then committed to the stream's
//! Delta Lake table ([`delta`]).

pub mod delta;
pub(crate) mod file;
pub mod schema;
pub mod sink;

/// The media type of a Parquet object.
pub const PARQUET_CONTENT_TYPE: &str = "application/vnd.apache.parquet";

/// A fault for tests: with `SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS=N`, the
/// process ends at once (exit status 137, as SIGKILL's; nothing flushed, the
/// group not left) right after its N-th table commit: before a Kafka source commits the
/// group's offsets, before a gateway answers the requests the commit holds —
/// the window a SIGKILL from outside hits only by luck.
pub(crate) fn exit_after_table_commit(commits: u64) {
    static AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| {
        std::env::var("SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    if *at == Some(commits) {
        eprintln!("SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS: exiting after table commit {commits}");
        std::process::exit(137);
    }
}
