//! The command line: subcommands and flags, each flag also readable from a
//! `SLUICE_…` environment variable (flags win). Parsing only; `main` validates and builds.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::size::parse_size;

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Streams bytes into S3-compatible object storage (or a local directory) with concurrent multipart upload",
    long_about = None,
    after_help = "Credentials for S3 come from the standard AWS chain: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, \
AWS_PROFILE, web identity or instance metadata.\nExit codes: 0 success, 1 failure, 2 usage error."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Upload a file, or standard input, to s3://bucket/key or a local directory store.
    #[command(
        after_help = "Examples:\n  sluice put big.iso s3://media/isos/big.iso --endpoint http://127.0.0.1:9000\n  \
tar c dir | sluice put - s3://backups/dir.tar\n  sluice put report.pdf ./store/reports/report.pdf"
    )]
    Put(PutArgs),
    /// Download an object to a file, or to standard output with `-`.
    #[command(
        after_help = "Examples:\n  sluice get s3://media/isos/big.iso ./big.iso\n  sluice get s3://backups/dir.tar - | tar x"
    )]
    Get(GetArgs),
}

#[derive(Debug, Args)]
pub struct PutArgs {
    /// File to upload, or `-` for standard input.
    pub src: PathBuf,
    /// `s3://bucket/key` (a key ending in `/` takes the file's name), or a path in a
    /// local directory store (the directory is the store, the file name the key).
    pub dest: String,
    /// Content-Type stored with the object.
    #[arg(long, env = "SLUICE_CONTENT_TYPE")]
    pub content_type: Option<String>,
    #[command(flatten)]
    pub transfer: TransferArgs,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// `s3://bucket/key`, or a file in a local directory store.
    pub src: String,
    /// File to write (replaced only when complete), a directory, or `-` for standard output.
    pub dest: PathBuf,
    #[command(flatten)]
    pub transfer: TransferArgs,
}

/// Flags shared by every transfer.
#[derive(Debug, Args)]
pub struct TransferArgs {
    /// S3 endpoint URL for MinIO, Ceph RGW, R2 and others (path-style addressing is then the default).
    #[arg(long, env = "SLUICE_ENDPOINT", value_name = "URL")]
    pub endpoint: Option<String>,
    /// S3 region [default: from the AWS configuration, else us-east-1].
    #[arg(long, env = "SLUICE_REGION")]
    pub region: Option<String>,
    /// Size of each part, 5MiB to 5GiB; raised when needed to fit the object in 10,000 parts.
    #[arg(long, env = "SLUICE_PART_SIZE", value_parser = parse_size, default_value = "8MiB")]
    pub part_size: u64,
    /// Keep every part the same size (Cloudflare R2 requires it).
    #[arg(long, env = "SLUICE_FIXED_PART_SIZE")]
    pub fixed_part_size: bool,
    /// Parts (or ranges) in flight at once.
    #[arg(long, env = "SLUICE_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,
    /// Most bytes buffered in memory at once.
    #[arg(long, env = "SLUICE_MEMORY_LIMIT", value_parser = parse_size, default_value = "256MiB")]
    pub memory_limit: u64,
    /// Objects up to this size go up in a single PUT; larger ones in parts.
    #[arg(long, env = "SLUICE_THRESHOLD", value_parser = parse_size, default_value = "16MiB")]
    pub threshold: u64,
    /// Checksum each part carries and the store verifies.
    #[arg(long, env = "SLUICE_CHECKSUM", value_enum, default_value = "crc32c")]
    pub checksum: ChecksumChoice,
    /// No progress bar (the final summary line is still printed).
    #[arg(long, short, env = "SLUICE_QUIET")]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChecksumChoice {
    Crc32c,
    Crc64nvme,
    None,
}
