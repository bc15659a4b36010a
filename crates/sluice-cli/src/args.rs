//! The command line: subcommands and flags, each flag also readable from a
//! `SLUICE_…` environment variable (flags win). Parsing only; `main` validates and builds.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use sluice_upload::parse_size;

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Streams bytes into S3-compatible object storage (or a local directory) with concurrent multipart upload",
    long_about = None,
    after_help = "Credentials for S3 come from the standard AWS chain: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, \
AWS_PROFILE, web identity or instance metadata.\nExit codes: 0 success (a reader of standard output that went away, as with | head, is no failure), 1 failure, 2 usage error, 130 stopped by Ctrl-C (after cleaning up)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// How log lines are written to standard error: `text` for people (colours
    /// only on a terminal), `json` (one object per line) for log collectors.
    #[arg(
        long,
        global = true,
        env = "SLUICE_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

/// See [`Cli::log_format`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the upload gateway (HTTP) on the local directory store or a bucket.
    #[command(
        after_help = "Settings come from flags, then SLUICE_* variables, then the TOML file given with \
--config, then defaults.\nExamples:\n  sluice serve\n  sluice serve --store s3://uploads/incoming --endpoint http://127.0.0.1:9000\n  \
sluice serve --config /etc/sluice.toml"
    )]
    Serve(Box<ServeArgs>),
    /// Upload a file, a directory, or standard input to s3://bucket/key or a local directory store.
    #[command(
        after_help = "Examples:\n  sluice put big.iso s3://media/isos/big.iso --endpoint http://127.0.0.1:9000\n  \
tar c dir | sluice put - s3://backups/dir.tar\n  sluice put report.pdf ./store/reports/report.pdf\n  \
sluice put ./photos s3://media/photos/ --exclude '*.tmp' --jobs 128"
    )]
    Put(PutArgs),
    /// Download an object to a file or standard output, or a prefix to a directory.
    #[command(
        after_help = "Examples:\n  sluice get s3://media/isos/big.iso ./big.iso\n  sluice get s3://backups/dir.tar - | tar x\n  sluice get s3://media/photos/ ./photos --include '*.jpg'"
    )]
    Get(GetArgs),
    /// List objects under a prefix of a bucket or a directory store.
    #[command(
        after_help = "Examples:\n  sluice ls                      # the buckets\n  sluice ls s3://media/\n  \
sluice ls s3://media/photos/ --recursive --human-readable --summarize\n  sluice ls s3://media/photos/2026 --json"
    )]
    Ls(LsArgs),
    /// Print an object's bytes to standard output.
    #[command(
        after_help = "Examples:\n  sluice cat s3://logs/app.log | grep ERROR\n  sluice cat s3://www/index.html --endpoint http://127.0.0.1:9000"
    )]
    Cat(CatArgs),
    /// Show what is known of an object: size, times, type, headers, storage class, encryption, metadata.
    #[command(
        after_help = "Examples:\n  sluice stat s3://media/photo.jpg\n  sluice stat s3://media/photo.jpg --json"
    )]
    Stat(StatArgs),
    /// Total size and number of the objects under a prefix.
    #[command(
        after_help = "Examples:\n  sluice du s3://media/photos/\n  sluice du s3://media/ --include '*.jpg' --json"
    )]
    Du(DuArgs),
    /// Print a presigned URL: one GET, PUT or DELETE of an object without
    /// credentials until it expires (SigV4 query signing on S3, as aws s3
    /// presign; a service SAS signed with the account key on Azure; a V4
    /// signed URL signed with a service account's key on GCS).
    #[command(
        after_help = "A PUT to an Azure SAS URL must send `x-ms-blob-type: BlockBlob`, as Azure wants of every Put Blob.\n\
Examples:\n  sluice presign s3://media/photo.jpg --expires 1h\n  \
curl -T photo.jpg \"$(sluice presign s3://media/photo.jpg --method PUT)\"\n  \
curl -T photo.jpg -H 'x-ms-blob-type: BlockBlob' \"$(sluice presign az://media/photo.jpg --method PUT)\""
    )]
    Presign(PresignArgs),
    /// Move: copy as cp does, then remove each source once its copy is complete.
    #[command(
        after_help = "A source is removed only after its copy succeeded; one that failed stays.\nExamples:\n  \
sluice mv ./report.pdf s3://docs/2026/\n  sluice mv s3://inbox/ s3://archive/2026-11/ --include '*.eml'\n  \
sluice mv s3://media/tmp/big.iso ./big.iso"
    )]
    Mv(CopyArgs),
    /// Run the commands of a file (or standard input), one per line as they
    /// would follow `sluice`, several at once in this process and on one
    /// memory budget, as s5cmd run does.
    #[command(
        after_help = "Lines are split as a shell splits words (quotes and \\ escapes; no variables, \
globs or pipes: a wildcard in quotes reaches sluice as it is). Blank lines and lines starting with # are skipped. \
The commands' own output is printed as they run; each command that fails is reported with its line number, \
and the exit code is 1 when any failed.\nCommands: put, get, cp, mv, sync, rm, ls, cat, stat, du, presign, mb, rb.\n\
Examples:\n  sluice run commands.txt --endpoint http://127.0.0.1:9000\n  \
printf 'cp s3://a/1 ./1\\ncp s3://a/2 ./2\\n' | sluice run -"
    )]
    Run(RunArgs),
    /// Make a bucket, or a directory store.
    #[command(
        after_help = "Examples:\n  sluice mb s3://media --endpoint http://127.0.0.1:9000\n  sluice mb s3://logs --region eu-west-3\n  sluice mb ./store"
    )]
    Mb(MbArgs),
    /// Remove a bucket (or a directory store), which must be empty unless --force.
    #[command(
        after_help = "Examples:\n  sluice rb s3://scratch\n  sluice rb s3://scratch --force   # every object and unfinished upload first\n  sluice rb ./store"
    )]
    Rb(RbArgs),
    /// Remove an object, or the objects under a prefix (batched, with filters and --dry-run).
    #[command(
        after_help = "Examples:\n  sluice rm s3://media/old.iso\n  sluice rm s3://media/tmp/ --dry-run\n  \
sluice rm s3://logs/2025/ --include '*.gz' --exclude 'keep/**'"
    )]
    Rm(RmArgs),
    /// Copy between locations: a file or directory to a bucket (s3://, az://,
    /// gs://), a bucket to a file or directory, or bucket to bucket of one
    /// service by server-side copy.
    #[command(
        after_help = "A location ending in / (or a local directory) is a prefix: every object under it is copied, \
keeping the rest of each key.\nExamples:\n  sluice cp ./site s3://www/\n  sluice cp s3://www/ ./backup\n  \
sluice cp s3://media/raw/ s3://archive/raw/ --include '*.mov'\n  sluice cp gs://media/a.mov gs://archive/"
    )]
    Cp(CopyArgs),
    /// Make DEST hold what SRC holds, moving only what differs (directory to s3://,
    /// s3:// to directory, or prefix to prefix).
    #[command(
        after_help = "Files are compared by size and modification time (kept in the object's mtime metadata), \
or with --checksum by the stored CRC.\nExamples:\n  sluice sync ./site s3://www/\n  \
sluice sync s3://www/ ./mirror --delete --dry-run\n  sluice sync ./data s3://backup/data --checksum"
    )]
    Sync(SyncArgs),
    /// Abort stale multipart uploads and remove expired resumable-upload state.
    #[command(
        after_help = "Live resumable uploads (unexpired tus state) keep their multipart uploads.\nExamples:\n  \
sluice janitor --store s3://uploads --endpoint http://127.0.0.1:9000 --dry-run\n  \
sluice janitor --store s3://uploads --older-than 0s\n  sluice janitor --store s3://uploads --install-lifecycle 7\n  \
sluice janitor --store s3://events --table clicks"
    )]
    Janitor(JanitorArgs),
    /// Run a fault-injecting proxy in front of an S3 server (for testing).
    #[command(
        after_help = "Point a client's --endpoint at the proxy. Its counters are at GET /_chaos/stats \
(JSON, per second); GET or PUT /_chaos/config reads or replaces the configuration.\nExamples:\n  \
sluice chaos-proxy --upstream http://127.0.0.1:9000 --slowdown 0.1 --reset-request 0.02 --internal-error 0.01\n  \
sluice chaos-proxy --upstream http://127.0.0.1:9000 --write-rate 500 --latency 20ms"
    )]
    ChaosProxy(ChaosProxyArgs),
    /// Generate load against an upload gateway or an S3 endpoint and report statuses, rates and latency.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// List the upload events waiting in a store's outbox, or those given up on.
    #[command(
        after_help = "Examples:\n  sluice events --store s3://uploads --endpoint http://127.0.0.1:9000\n  \
sluice events --store ./sluice-data --failed"
    )]
    Events(EventsArgs),
    /// Turn records (one JSON value per line on standard input, or the messages of
    /// a Kafka topic) into batched, compressed objects of a stream, as
    /// `POST /v1/streams/NAME` does.
    #[command(
        after_help = "Batches are flushed on --flush-bytes, --flush-records or --flush-age, and at the end of \
the input; the summary is printed once every batch is stored. An invalid line stops the run (the records \
of earlier blocks stay stored) unless --dead-letter-template keeps it aside.\nFrom Kafka, sluice joins the \
consumer group, commits a partition's offset once the batches holding its records are stored, and names \
batches {stream}/{partition}/{offset} (written only if absent), so a restart neither loses nor repeats a \
record.\nExamples:\n  \
app | sluice ingest --stream clicks --store s3://events --endpoint http://127.0.0.1:9000\n  \
app | sluice ingest --stream clicks --store s3://events --table delta\n  \
app | sluice ingest --stream clicks --store s3://events --table iceberg\n  \
zcat logs.ndjson.gz | sluice ingest --stream logs --store ./sluice-data --key-template '{stream}/{field:service}/{offset}'\n  \
sluice ingest --stream clicks --store s3://events --config clicks.toml < records.ndjson\n  \
sluice ingest --stream clicks --from kafka://127.0.0.1:9092/clicks --group sluice --store s3://events"
    )]
    Ingest(Box<IngestArgs>),
    /// Keep a stream's Delta Lake or Iceberg table fast to read: compact
    /// small files, delete files no version reads, expire snapshots, write a
    /// checkpoint.
    #[command(subcommand)]
    Tables(TablesCommand),
    /// Print a signed URL: one PUT, GET/HEAD or DELETE of one key until it expires,
    /// for a gateway started with the same --url-secret-file.
    #[command(
        after_help = "The scheme is in docs/AUTH.md (any language can sign in a few lines).\nExamples:\n  \
sluice sign --url-secret-file url.secret --method PUT --key acme/photo.jpg --expires 15m\n  \
curl -T photo.jpg \"$(sluice sign --url-secret-file url.secret --key acme/photo.jpg --method PUT)\""
    )]
    Sign(SignArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  sluice completions bash > /etc/bash_completion.d/sluice\n  \
sluice completions zsh > \"${fpath[1]}/_sluice\"\n  sluice completions fish > ~/.config/fish/completions/sluice.fish"
    )]
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), made from the same definitions as --help.
    #[command(after_help = "Example:\n  sluice man > /usr/local/share/man/man1/sluice.1")]
    Man,
}

/// `sluice events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pub store: OpenStoreArgs,
    /// The events given up on (kept under _sluice/events/failed/) instead of
    /// those still being delivered.
    #[arg(long)]
    pub failed: bool,
    /// Most events listed.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
}

/// `sluice sign`.
#[derive(Debug, Args)]
pub struct SignArgs {
    /// The secret in FILE that signed URLs (`sluice sign`) are made with (at least
    /// 32 bytes); `serve` then takes them too [default: none].
    #[arg(long, env = "SLUICE_URL_SECRET_FILE", value_name = "FILE")]
    pub url_secret_file: std::path::PathBuf,
    /// The request the URL allows: PUT, GET (and HEAD) or DELETE.
    #[arg(long, default_value = "PUT", value_parser = ["PUT", "GET", "DELETE"])]
    pub method: String,
    /// The object's key.
    #[arg(long)]
    pub key: String,
    /// How long the URL stays good.
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    pub expires: std::time::Duration,
    /// The tenant the request acts as ({tenant}, fair admission) [default: default].
    #[arg(long)]
    pub tenant: Option<String>,
    /// The largest body the URL may upload.
    #[arg(long, value_parser = parse_size)]
    pub max_size: Option<u64>,
    /// The gateway's address.
    #[arg(long, env = "SLUICE_URL", default_value = "http://127.0.0.1:8080")]
    pub base_url: String,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Uploads from many users (closed model, --users) or at a constant arrival rate
    /// (open model, --rate), to a gateway, a tus server or an S3 endpoint, with a summary
    /// table and optional JSON and HTML reports.
    #[command(after_help = "Examples:\n  \
sluice bench load http://127.0.0.1:8080/v1/objects --users 1000 --size 10KiB\n  \
sluice bench load http://127.0.0.1:8080/v1/objects --rate 500 --duration 30s --json run.json\n  \
sluice bench load --api tus http://127.0.0.1:1080/files/ --users 100 --iterations 10 --size 1MiB\n\
Targets outside loopback are refused unless --allow-remote is given. The JSON schema is in docs/BENCH.md.")]
    Load(LoadArgs),
    /// One object per size uploaded as a single PUT, as a multipart upload one part at a
    /// time, and with parts in parallel, against a store: a table of times and MiB/s.
    #[command(after_help = "Examples:\n  \
sluice bench strategies --store ./bench-store --sizes 100KiB,1MiB,10MiB,100MiB\n  \
sluice bench strategies --store s3://bench/tmp --endpoint http://127.0.0.1:9000 --sizes 1MiB,100MiB,1GiB\n\
Objects are written under the store's bench-strategies/ prefix and deleted after each measurement.")]
    Strategies(StrategiesArgs),
}

#[derive(Debug, Args)]
pub struct StrategiesArgs {
    /// The store: a directory, or s3://bucket[/prefix].
    #[arg(long)]
    pub store: String,
    /// S3 endpoint URL for MinIO, Ceph RGW, R2 and others (path-style addressing then).
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// S3 region [default: from the AWS configuration, else us-east-1].
    #[arg(long)]
    pub region: Option<String>,
    /// Object sizes, comma-separated (at most 1GiB each: the payload is held in memory).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "100KiB,1MiB,10MiB,100MiB")]
    pub sizes: Vec<u64>,
    /// Part size of the multipart strategies.
    #[arg(long, value_parser = parse_size, default_value = "8MiB")]
    pub part_size: u64,
    /// Parts in flight for the parallel strategy.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Uploads per size and strategy (the median is shown).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Allow a store outside loopback (AWS S3, or an endpoint on another machine).
    #[arg(long)]
    pub allow_remote: bool,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Where uploads go: a sluice gateway's objects URL (http://HOST:PORT/v1/objects) for
    /// put and form, a tus server's creation URL for tus, s3://bucket[/prefix] for the
    /// S3 APIs.
    pub url: String,
    /// How each object is sent: put (PUT URL/KEY), form (multipart/form-data POST to URL),
    /// tus (creation-with-upload POST to URL, then PATCH if needed), draft (the IETF
    /// resumable-upload draft, interop 6: a POST with the whole body, or with
    /// --chunk-size an empty POST and PATCHes), records (POST of
    /// NDJSON records of about 1 KiB, --size bytes of them, to a stream URL such as
    /// http://HOST:PORT/v1/streams/NAME), s3-put (one PutObject) or s3-multipart (a
    /// multipart upload) straight to the S3 endpoint.
    #[arg(long, value_enum, default_value = "put")]
    pub api: BenchApi,
    /// S3 APIs: the endpoint (MinIO and friends; path-style addressing); without it, AWS.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// S3 APIs: the region [default: us-east-1].
    #[arg(long)]
    pub region: Option<String>,
    /// Closed model: this many users, each uploading one object after another.
    #[arg(long, conflicts_with = "rate", required_unless_present = "rate")]
    pub users: Option<usize>,
    /// Open model: uploads started per second, whatever the response times (needs --duration).
    #[arg(long, requires = "duration")]
    pub rate: Option<f64>,
    /// Closed model: uploads per user [default: 1 unless --duration is given].
    #[arg(long, conflicts_with_all = ["rate", "duration"])]
    pub iterations: Option<u64>,
    /// How long to start new uploads (uploads in flight then finish).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// Closed model: start the users evenly over this time instead of all at once.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s", conflicts_with = "rate")]
    pub ramp: std::time::Duration,
    /// Open model: arrivals finding this many uploads in flight are not started (and counted).
    #[arg(long, default_value_t = 10_000)]
    pub max_in_flight: usize,
    /// Bytes per object (generated in memory; at most 1GiB), or a range MIN..MAX to
    /// draw each object's size from, log-uniformly.
    #[arg(long, value_parser = parse_size_range, default_value = "10KiB")]
    pub size: (Option<u64>, u64),
    /// put: keys start with this prefix.
    #[arg(long, default_value = "bench")]
    pub key_prefix: String,
    /// How keys spread: common (PREFIX/RUN/N), tenants:N (PREFIX/tenant-T/RUN/N; form and
    /// tus send x-sluice-tenant) or shards:N (HHHH/PREFIX/RUN/N, a hashed first segment; put and the S3 APIs).
    #[arg(long, value_parser = sluice_bench::KeyScheme::parse, default_value = "common")]
    pub keys: sluice_bench::KeyScheme,
    /// Retries of one upload after a 503 that carries Retry-After (waiting that long, +0-50%).
    #[arg(long, default_value_t = 3)]
    pub retries: u32,
    /// Longest time one request may take.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub timeout: std::time::Duration,
    /// tus and draft: create without a body, then PATCH chunks of this size
    /// [default: the whole object in the creation request].
    #[arg(long, value_parser = parse_size)]
    pub chunk_size: Option<u64>,
    /// Also write the summary as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write a self-contained HTML report with charts to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Allow a target outside loopback.
    #[arg(long)]
    pub allow_remote: bool,
    /// No live progress line (the summary is still printed).
    #[arg(long, short)]
    pub quiet: bool,
}

/// How many transfers run at once: a number, or found as it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    Auto,
    Fixed(usize),
}

impl Concurrency {
    /// The engine's limit on transfers in flight.
    pub fn tuning(self) -> sluice_upload::TuningConfig {
        match self {
            Concurrency::Auto => sluice_upload::TuningConfig::adaptive(),
            Concurrency::Fixed(limit) => sluice_upload::TuningConfig::fixed(limit),
        }
    }
}

fn parse_concurrency(text: &str) -> Result<Concurrency, String> {
    if text == "auto" {
        return Ok(Concurrency::Auto);
    }
    match text.parse::<usize>() {
        Ok(limit @ 1..=1024) => Ok(Concurrency::Fixed(limit)),
        _ => Err("expected `auto` or a number in 1..=1024".into()),
    }
}

/// `SIZE` or `MIN..MAX`.
fn parse_size_range(text: &str) -> Result<(Option<u64>, u64), String> {
    match text.split_once("..") {
        Some((min, max)) => Ok((Some(parse_size(min)?), parse_size(max)?)),
        None => Ok((None, parse_size(text)?)),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchApi {
    Put,
    Form,
    Tus,
    Draft,
    Records,
    S3Put,
    S3Multipart,
}

#[derive(Debug, Args)]
pub struct PutArgs {
    /// File or directory to upload, or `-` for standard input.
    pub src: PathBuf,
    /// `s3://bucket/key` (a key ending in `/` takes the file's name), or a path in a
    /// local directory store (the directory is the store, the file name the key).
    /// For a directory: the prefix its files go under (`DIR/a/b.txt` becomes
    /// `PREFIX/a/b.txt`).
    pub dest: String,
    #[command(flatten)]
    pub object: ObjectArgs,
    /// Continue the multipart upload an earlier, interrupted run of this command
    /// left in the store: parts whose checksum matches the file are not sent
    /// again. With --resume a failed or interrupted upload keeps its parts for
    /// the next run (the janitor removes them when it is never continued).
    /// It takes over the newest incomplete upload of the key, so do not run it
    /// while another client uploads that key: one of the two then fails.
    #[arg(long)]
    pub resume: bool,
    #[command(flatten)]
    pub many: ManyArgs,
    #[command(flatten)]
    pub transfer: TransferArgs,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// `s3://bucket/key`, or a file in a local directory store; a location
    /// ending in `/` downloads every object under that prefix.
    pub src: String,
    /// File to write (replaced only when complete), a directory, or `-` for
    /// standard output. For a prefix: the directory the objects go into
    /// (`PREFIX/a/b.txt` becomes `DIR/a/b.txt`), created if missing.
    pub dest: PathBuf,
    #[command(flatten)]
    pub many: ManyArgs,
    #[command(flatten)]
    pub transfer: TransferArgs,
}

/// `sluice ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    /// The stream's name: `{stream}` in its key template.
    #[arg(long)]
    pub stream: String,
    /// Where records come from: `-` (standard input) or kafka://BROKERS/TOPIC
    /// (BROKERS is host:port[,host:port…]).
    #[arg(long, default_value = "-", value_name = "SOURCE")]
    pub from: String,
    /// Kafka: the consumer group; instances in one group split the topic's partitions.
    #[arg(long, default_value = "sluice")]
    pub group: String,
    /// Kafka: stop once no message came for this long and everything read is
    /// stored and committed (default: run until stopped). Not counted while
    /// no partition is assigned; a topic the brokers do not know is waited
    /// for, and once they have said so for 30 s the run ends with an error
    /// naming it.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub idle_exit: Option<std::time::Duration>,
    #[command(flatten)]
    pub store: StoreFlag,
    /// A TOML file with the stream's settings (the keys of a gateway's
    /// `[streams.NAME]` table); the stream settings' flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The stream's settings, defined once with the gateway's `[streams.NAME]`.
    #[command(flatten)]
    pub settings: sluice_streams::StreamConfig,
    /// Standard input into a --table: load the whole input exactly once under
    /// this key (1-128 of A-Z a-z 0-9 - _ . :). Its files join the table in
    /// one commit at the end, with the key; a rerun with the same key after a
    /// crash loads it again if nothing was committed, and appends nothing if
    /// it was.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// The summary as one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Serve the stream's figures (records, batches, flush time, consumer lag…;
    /// docs/METRICS.md) for Prometheus at http://ADDR/metrics while the run
    /// lasts, e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub transfer: TransferArgs,
    /// Where the `upload.completed` events of the objects the run stores go
    /// (written to the store's outbox, delivered by the gateways on it).
    #[command(flatten)]
    pub events: sluice_server::events::EventSettings,
}

/// `sluice cat`.
#[derive(Debug, Args)]
pub struct CatArgs {
    /// `s3://bucket/key`, or a file in a directory store.
    pub location: String,
    #[command(flatten)]
    pub transfer: TransferArgs,
}

/// `sluice stat`.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// `s3://bucket/key`, or a file in a directory store.
    pub location: String,
    /// One JSON object rather than lines for people.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `sluice du`.
#[derive(Debug, Args)]
pub struct DuArgs {
    /// `s3://bucket/prefix/` (or a bucket, or a directory store).
    pub location: String,
    /// Only keys (relative to the prefix) matching this glob; repeatable.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Not keys matching this glob; repeatable.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Sizes in bytes rather than KiB/MiB/GiB.
    #[arg(long)]
    pub exact: bool,
    /// One JSON object: {"location", "objects", "bytes"}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `sluice presign`.
#[derive(Debug, Args)]
pub struct PresignArgs {
    /// `s3://bucket/key`, `az://container/blob` or `gs://bucket/object`.
    pub location: String,
    /// How long the URL stays good (at most 7 days).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub expires: std::time::Duration,
    /// The request the URL allows.
    #[arg(long, default_value = "GET", value_parser = ["GET", "PUT", "DELETE"], ignore_case = true)]
    pub method: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `sluice run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The file of commands, or `-` for standard input.
    #[arg(default_value = "-")]
    pub file: PathBuf,
    /// Commands run at once at most.
    #[arg(long, default_value_t = 16)]
    pub jobs: usize,
    /// The memory every command's transfers share.
    #[arg(long, value_parser = parse_size, default_value = "512MiB")]
    pub memory_limit: u64,
    /// Where the store is and how to sign for it: given to every line
    /// (as if written on it) that does not give its own.
    #[command(flatten)]
    pub store: StoreArgs,
    /// One JSON line per command ({"line", "command", "ok", "error"}) on standard error.
    #[arg(long)]
    pub json: bool,
    /// Give --dry-run to every command that changes something: nothing changes.
    #[arg(long)]
    pub dry_run: bool,
}

/// `sluice mb`.
#[derive(Debug, Args)]
pub struct MbArgs {
    /// `s3://bucket`, or a directory to make a directory store in.
    pub location: String,
    /// Say what would be made; make nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `sluice rb`.
#[derive(Debug, Args)]
pub struct RbArgs {
    /// `s3://bucket`, or a directory store.
    pub location: String,
    /// Remove every object (and abort every unfinished multipart upload)
    /// first; for a directory store, the whole directory.
    #[arg(long)]
    pub force: bool,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `sluice ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// `s3://bucket[/prefix]` or a local directory store. A prefix not ending in
    /// `/` lists the objects and sub-prefixes starting with it. None (or
    /// `s3://`) lists the buckets.
    pub location: Option<String>,
    /// Every object under the prefix (shown by its whole key), not one level.
    #[arg(long, short)]
    pub recursive: bool,
    /// Sizes in KiB, MiB, GiB rather than bytes.
    #[arg(long, short = 'H')]
    pub human_readable: bool,
    /// Sizes in bytes, as they are without --human-readable (kept for scripts
    /// of earlier releases, when sizes were human-readable by default).
    #[arg(long, hide = true, conflicts_with = "human_readable")]
    pub exact: bool,
    /// Then the number of objects and their total size.
    #[arg(long)]
    pub summarize: bool,
    /// One JSON object per line: {"key", "size", "etag", "last_modified"}
    /// (the whole key) or {"prefix"}; with no location, {"bucket", "created"}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `sluice rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// `s3://bucket/key` removes one object; `s3://bucket/prefix/` (ending in
    /// `/`) every object under the prefix that the filters select.
    pub location: String,
    /// Only keys (relative to the prefix) matching this glob; repeatable.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Not keys (relative to the prefix) matching this glob; repeatable.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Print what would be removed and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Take `*` and `?` as characters of the key, not as wildcards.
    #[arg(long)]
    pub raw: bool,
    /// One JSON line per key removed (or that would be).
    #[arg(long)]
    pub json: bool,
    /// A line per key removed.
    #[arg(long, short)]
    pub verbose: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// What is stored with each object an upload makes (put, and cp and sync
/// towards a bucket or directory store).
#[derive(Debug, Args, Default, Clone)]
pub struct ObjectArgs {
    /// Content-Type of every object [default: guessed from each file's
    /// extension (or the key's), application/octet-stream when unknown].
    #[arg(long, env = "SLUICE_CONTENT_TYPE", help_heading = "Object settings")]
    pub content_type: Option<String>,
    /// Store application/octet-stream rather than a type guessed from the extension.
    #[arg(
        long,
        conflicts_with = "content_type",
        help_heading = "Object settings"
    )]
    pub no_guess_mime_type: bool,
    /// Cache-Control sent back with the object, e.g. `max-age=3600`.
    #[arg(long, value_name = "VALUE", help_heading = "Object settings")]
    pub cache_control: Option<String>,
    /// Content-Encoding sent back with the object, e.g. `gzip` (the bytes are stored as given).
    #[arg(long, value_name = "VALUE", help_heading = "Object settings")]
    pub content_encoding: Option<String>,
    /// Content-Disposition sent back with the object, e.g. `attachment; filename="a.pdf"`.
    #[arg(long, value_name = "VALUE", help_heading = "Object settings")]
    pub content_disposition: Option<String>,
    /// User metadata (x-amz-meta-KEY); repeatable.
    #[arg(long, value_name = "KEY=VALUE", help_heading = "Object settings")]
    pub metadata: Vec<String>,
    /// Storage class (buckets only): STANDARD, STANDARD_IA, ONEZONE_IA,
    /// INTELLIGENT_TIERING, GLACIER_IR, GLACIER, DEEP_ARCHIVE, REDUCED_REDUNDANCY, …
    #[arg(long, value_name = "CLASS", help_heading = "Object settings")]
    pub storage_class: Option<String>,
    /// Canned ACL (buckets only): private, public-read, public-read-write,
    /// authenticated-read, aws-exec-read, bucket-owner-read, bucket-owner-full-control.
    #[arg(long, value_name = "ACL", help_heading = "Object settings")]
    pub acl: Option<String>,
    /// Server-side encryption (buckets only): AES256 (keys the store
    /// manages) or aws:kms (a KMS key: the account's default, or --sse-kms-key-id).
    #[arg(long, value_name = "AES256|aws:kms", value_parser = ["AES256", "aws:kms"], help_heading = "Object settings")]
    pub sse: Option<String>,
    /// The KMS key for --sse aws:kms (id, ARN or alias).
    #[arg(
        long,
        value_name = "KEY",
        requires = "sse",
        help_heading = "Object settings"
    )]
    pub sse_kms_key_id: Option<String>,
}

/// `sluice cp` and `sluice sync`.
#[derive(Debug, Args)]
pub struct CopyArgs {
    /// A local file or directory, `s3://bucket/key`, or `s3://bucket/prefix/`
    /// (`az://container/…` and `gs://bucket/…` alike).
    pub src: String,
    /// A local file or directory, `s3://bucket/key`, or `s3://bucket/prefix/`
    /// (`az://container/…` and `gs://bucket/…` alike).
    pub dest: String,
    #[command(flatten)]
    pub object: ObjectArgs,
    #[command(flatten)]
    pub many: ManyArgs,
    #[command(flatten)]
    pub transfer: TransferArgs,
}

/// `sluice sync`.
#[derive(Debug, Args)]
pub struct SyncArgs {
    #[command(flatten)]
    pub copy: CopyArgs,
    /// Compare by checksum (the object's stored full-object CRC against the
    /// file's) instead of size and modification time; objects without a stored
    /// CRC are compared by size and time.
    #[arg(long = "checksum")]
    pub checksum_compare: bool,
    /// Remove what the destination holds and the source does not (within the filters).
    #[arg(long)]
    pub delete: bool,
}

/// The store a command works on: the one definition of `--store` and
/// `SLUICE_STORE` for every command that takes one (`serve` reads the same
/// variable, with the same meaning, as its setting `store`, docs/CONFIG.md).
#[derive(Debug, Args, Clone)]
pub struct StoreFlag {
    /// The store: s3://bucket[/prefix], az://container[/prefix] or a local
    /// directory [serve's default: ./sluice-data].
    #[arg(long = "store", env = "SLUICE_STORE", value_name = "STORE")]
    pub location: String,
}

/// A store and how to reach it, for the commands that open one themselves.
#[derive(Debug, Args, Clone)]
pub struct OpenStoreArgs {
    #[command(flatten)]
    pub location: StoreFlag,
    #[command(flatten)]
    pub reach: StoreArgs,
}

/// Where to find a bucket and how to sign for it, as aws s3 takes them.
#[derive(Debug, Args, Clone, Default)]
pub struct StoreArgs {
    /// S3 endpoint URL for MinIO, Ceph RGW, R2 and others (path-style
    /// addressing then); for az://, the blob endpoint (Azurite:
    /// http://127.0.0.1:10000/devstoreaccount1); for gs://, the JSON API's
    /// origin (fake-gcs-server: http://127.0.0.1:4443).
    #[arg(
        long,
        visible_alias = "endpoint-url",
        env = "SLUICE_ENDPOINT",
        value_name = "URL"
    )]
    pub endpoint: Option<String>,
    /// S3 region [default: from the AWS configuration, else us-east-1].
    #[arg(long, env = "SLUICE_REGION")]
    pub region: Option<String>,
    /// The profile of ~/.aws/config and ~/.aws/credentials to take
    /// credentials and region from [default: AWS_PROFILE, else default].
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Send requests unsigned, for public buckets (no credentials are looked up).
    #[arg(long)]
    pub no_sign_request: bool,
}

impl TransferArgs {
    /// Where the store is, as the commands that transfer nothing take it.
    pub fn reach(&self) -> StoreArgs {
        self.store.clone()
    }
}

/// Flags of transfers of many files.
#[derive(Debug, Args)]
pub struct ManyArgs {
    /// Only files (paths relative to the directory or prefix, with `/`) matching
    /// this glob; a glob without `/` matches the file name. Repeatable.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Not files matching this glob (as --include); repeatable, wins over --include.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Files in flight at most; their transfers share --concurrency.
    #[arg(long, env = "SLUICE_JOBS", default_value_t = 64)]
    pub jobs: usize,
    /// Stop at the first failed file (files in flight are abandoned, their
    /// multipart uploads aborted) instead of going on with the others.
    #[arg(long)]
    pub fail_fast: bool,
    /// A line per file as it finishes.
    #[arg(long, short)]
    pub verbose: bool,
    /// One JSON line per file on standard output ({"op", "source", "target",
    /// "size", "ok", "error"}), then a summary line ({"summary": …}).
    #[arg(long)]
    pub json: bool,
    /// Leave a destination that exists as it is (and, for mv, its source):
    /// an upload is made only if the key is free, checked by the store as it
    /// is written; a download or copy checks before it starts.
    #[arg(long, short = 'n')]
    pub no_clobber: bool,
    /// Print what would be transferred (or removed) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Take `*` and `?` in the source as characters of the key or path, not
    /// as wildcards.
    #[arg(long)]
    pub raw: bool,
    /// Set by `mv`: each source is removed once its copy is complete.
    #[arg(skip)]
    pub move_sources: bool,
    /// Set when the source location held wildcards (it is then their base).
    #[arg(skip)]
    pub pattern: Option<crate::wildcard::Wildcard>,
}

impl ManyArgs {
    /// When `location` holds wildcards: its base, with the pattern set here
    /// for the transfer's filter (a second pattern is refused).
    pub fn take_wildcard(&mut self, location: &str) -> Result<Option<String>, crate::UsageError> {
        if self.raw {
            return Ok(None);
        }
        let Some(wildcard) = crate::wildcard::Wildcard::split(location) else {
            return Ok(None);
        };
        wildcard.matcher()?;
        if self.pattern.is_some() {
            return Err(crate::UsageError(format!(
                "{location}: only the source may hold wildcards"
            )));
        }
        let base = wildcard.base.clone();
        self.pattern = Some(wildcard);
        Ok(Some(base))
    }
}

/// Flags shared by every transfer.
#[derive(Debug, Args)]
pub struct TransferArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub engine: sluice_upload::EngineSettings,
    /// Transfers in flight at once: parts, ranges and whole small files
    /// together. `auto` starts at 32 and raises it (up to 64) while the measured
    /// throughput grows, halving it when the store throttles or fails.
    #[arg(long, env = "SLUICE_CONCURRENCY", value_name = "N|auto", value_parser = parse_concurrency, default_value = "auto")]
    pub concurrency: Concurrency,
    /// No progress bar (the final summary line is still printed).
    #[arg(long, short, env = "SLUICE_QUIET")]
    pub quiet: bool,
    /// Downloads into files: flush each file to disk before it takes its name.
    /// Without it (as cp, rsync and the S3 tools) a download ends once the
    /// page cache holds it, and a power loss soon after can leave a file at
    /// full size with zeros inside, which a sync by size and time takes as
    /// current. Uploads ignore it.
    #[arg(long, env = "SLUICE_FSYNC")]
    pub fsync: bool,
}

/// `sluice serve`: the config file, and every setting (each defined once, in
/// `sluice_server::ServerConfig`; see docs/CONFIG.md).
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML file with settings, by the keys in docs/CONFIG.md (`[limits]`,
    /// `[engine]`, `[tus]`, ... tables); flags and variables win over it.
    #[arg(long, env = "SLUICE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The flag of earlier releases for --upload-page=false (hidden; warns).
    #[arg(long, hide = true)]
    pub no_upload_page: bool,
    #[command(flatten)]
    pub settings: sluice_server::ServerConfig,
}

/// `sluice tables …`.
#[derive(Debug, Subcommand)]
pub enum TablesCommand {
    /// Bin-pack each partition's small files into larger ones, in one commit
    /// that changes no data (readers of older versions still read the old
    /// files); an Iceberg table's data manifests are merged in the same commit.
    #[command(
        after_help = "Examples:\n  sluice tables compact --store s3://events --endpoint http://127.0.0.1:9000 clicks\n  \
sluice tables compact --store ./sluice-data clicks --target-size 128MiB"
    )]
    Compact(TableCompactArgs),
    /// Delete the table's files that no version within --retain reads, and
    /// files writers stored and never committed, once older than --retain
    /// (for an Iceberg table: data files and manifests no snapshot reads).
    #[command(
        after_help = "Examples:\n  sluice tables vacuum --store s3://events clicks --dry-run\n  \
sluice tables vacuum --store s3://events clicks --retain 48h"
    )]
    Vacuum(TableVacuumArgs),
    /// Write a checkpoint of the table's current version (writers write one
    /// every delta.checkpointInterval versions by themselves, 100 without it).
    /// Delta Lake only.
    Checkpoint(TableCheckpointArgs),
    /// Drop an Iceberg table's snapshots older than --retain (keeping the
    /// newest --keep and every branch's and tag's) and delete the files only
    /// they read: time travel to them ends. Writers do this by themselves
    /// every 100 versions, by the table's history.expire.* properties.
    #[command(after_help = "Examples:
  sluice tables expire --store s3://events clicks
  sluice tables expire --store s3://events clicks --retain 1h --keep 10")]
    Expire(TableExpireArgs),
}

/// `sluice tables expire`.
#[derive(Debug, Args)]
pub struct TableExpireArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Keep snapshots this recent [default: the table's
    /// history.expire.max-snapshot-age-ms, else 5 days].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub retain: Option<std::time::Duration>,
    /// Keep at least this many of the main branch's newest snapshots
    /// [default: the table's history.expire.min-snapshots-to-keep, else 1].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: Option<u64>,
}

/// `sluice tables checkpoint`.
#[derive(Debug, Args)]
pub struct TableCheckpointArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Actions per file: a table with more is checkpointed in parts (a V2
    /// checkpoint: in sidecars), each built and stored in turn.
    #[arg(long, default_value_t = sluice_streams::table::delta::checkpoint::PART_ACTIONS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub part_actions: u64,
}

/// Which table.
#[derive(Debug, Args)]
pub struct TableArgs {
    #[command(flatten)]
    pub store: OpenStoreArgs,
    /// The table's root key under the store (a stream's table_location; by
    /// default the stream's name).
    pub table: String,
}

/// `sluice tables compact`.
#[derive(Debug, Args)]
pub struct TableCompactArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Files this large are left alone; small ones are packed up to it.
    #[arg(long, value_parser = sluice_upload::parse_size, default_value = "256MiB")]
    pub target_size: u64,
    /// Compact a partition once it has this many small files.
    #[arg(long, default_value_t = 4)]
    pub min_files: usize,
}

/// `sluice tables vacuum`.
#[derive(Debug, Args)]
pub struct TableVacuumArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Keep what versions this recent read, and any file this young (a
    /// writer's file not committed yet); at least 1h.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "7days")]
    pub retain: std::time::Duration,
    /// Print what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `sluice janitor`.
#[derive(Debug, Args)]
pub struct JanitorArgs {
    #[command(flatten)]
    pub store: OpenStoreArgs,
    /// Abort incomplete multipart uploads initiated longer ago than this (0s: all
    /// that no live resumable upload owns, including uploads in flight right now).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "24h")]
    pub older_than: std::time::Duration,
    /// Print what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also put a lifecycle rule on the bucket so that S3 itself aborts multipart
    /// uploads left incomplete for DAYS days (the rule covers the store's prefix;
    /// MinIO refuses such rules and purges stale uploads by itself).
    #[arg(long, value_name = "DAYS", num_args = 0..=1, default_missing_value = "1")]
    pub install_lifecycle: Option<u32>,
    /// Also vacuum this stream's Delta or Iceberg table (its root key;
    /// repeatable): files a writer stored and never committed, and files no
    /// version reads, once older than --older-than (at least 1h), as
    /// `sluice tables vacuum --retain` does.
    #[arg(long = "table", value_name = "KEY")]
    pub tables: Vec<String>,
    /// Where the `upload.completed` events of the uploads this pass finishes
    /// go (written to the store's outbox, delivered by the gateways on it).
    #[command(flatten)]
    pub events: sluice_server::events::EventSettings,
}

/// `sluice chaos-proxy`.
#[derive(Debug, Args)]
pub struct ChaosProxyArgs {
    /// Address to listen on (loopback unless --allow-remote).
    #[arg(long, default_value = "127.0.0.1:9300")]
    pub listen: std::net::SocketAddr,
    /// The S3 server to forward to, e.g. http://127.0.0.1:9000 (path-style requests).
    #[arg(long, value_name = "URL")]
    pub upstream: String,
    /// Chance per request of a 503 SlowDown answer.
    #[arg(long, default_value_t = 0.0, value_name = "RATE")]
    pub slowdown: f64,
    /// Chance per request of a 500 InternalError answer.
    #[arg(long, default_value_t = 0.0, value_name = "RATE")]
    pub internal_error: f64,
    /// Chance per request of a connection reset while the request body is read.
    #[arg(long, default_value_t = 0.0, value_name = "RATE")]
    pub reset_request: f64,
    /// Chance per request of a connection reset after the store handled it.
    #[arg(long, default_value_t = 0.0, value_name = "RATE")]
    pub reset_response: f64,
    /// Chance per request of an answer held back for --stall-for.
    #[arg(long, default_value_t = 0.0, value_name = "RATE")]
    pub stall: f64,
    /// Apply the fault rates only to these operations (comma-separated, e.g.
    /// put-object,upload-part) [default: all].
    #[arg(long, value_delimiter = ',', value_name = "OPS")]
    pub only: Vec<String>,
    /// Added to every request before it is forwarded.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub latency: std::time::Duration,
    /// How long a stalled answer is held back.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub stall_for: std::time::Duration,
    /// Writes per second allowed per prefix before SlowDown; 0 for no cap.
    #[arg(long, default_value_t = 3500.0, value_name = "N")]
    pub write_rate: f64,
    /// Key path segments that make a prefix for --write-rate.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub prefix_depth: usize,
    /// Send Retry-After: SECONDS with injected SlowDown answers (S3 sends none).
    #[arg(long, value_name = "SECONDS")]
    pub retry_after: Option<u32>,
    /// Allow listening on a non-loopback address.
    #[arg(long)]
    pub allow_remote: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A switch with an optional value takes it only after `=`, so it never
    /// swallows the positional argument that follows it.
    #[test]
    fn switches_leave_the_next_argument_alone() {
        // (command line, fixed part size, source)
        let cases: [(&[&str], bool, &str); 4] = [
            (
                &["sluice", "put", "--fixed-part-size", "big.iso", "s3://b/k"],
                true,
                "big.iso",
            ),
            (
                &["sluice", "put", "--fixed-part-size", "-", "s3://b/k"],
                true,
                "-",
            ),
            (
                &["sluice", "put", "--fixed-part-size=false", "a", "s3://b/k"],
                false,
                "a",
            ),
            (&["sluice", "put", "a", "s3://b/k"], false, "a"),
        ];
        for (argv, fixed, src) in cases {
            let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            let Command::Put(put) = cli.command else {
                panic!("{argv:?} is not a put");
            };
            assert_eq!(put.transfer.engine.fixed_part_size, fixed, "{argv:?}");
            assert_eq!(put.src, PathBuf::from(src), "{argv:?}");
        }
    }
}
