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
