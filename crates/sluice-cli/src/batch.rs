//! `sluice run`: commands from a file or standard input, one per line as they
//! would follow `sluice` (s5cmd run's form), run `--jobs` at a time in this
//! process. Every engine the commands make draws on one memory budget (a
//! task-local the commands' engines find, see [`engine`]), progress bars stay
//! off, each command's own output is printed as it runs, a failed command is
//! reported with its line, and the exit code says whether any failed.

use std::io::BufRead;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches};
use futures::StreamExt;
use sluice_store::ObjectStore;
use sluice_upload::{ConfigError, Engine, EngineConfig, MemoryBudget};

use crate::args::{Cli, RunArgs};
use crate::UsageError;

/// The commands a line may run.
const ALLOWED: [&str; 13] = [
    "put", "get", "cp", "mv", "sync", "rm", "ls", "cat", "stat", "du", "presign", "mb", "rb",
];

tokio::task_local! {
    /// The budget of the `sluice run` the current command is a line of.
    static SHARED_BUDGET: MemoryBudget;
}

/// An engine for a command: on the budget of the `sluice run` it is a line
/// of, else on a budget of its own.
pub fn engine(store: Arc<dyn ObjectStore>, config: EngineConfig) -> Result<Engine, ConfigError> {
    match SHARED_BUDGET.try_with(|budget| budget.clone()) {
        Ok(budget) => Engine::with_budget(store, config, budget),
        Err(_) => Engine::new(store, config),
    }
}

/// Whether the current command is a line of `sluice run` (no progress bars then).
pub fn active() -> bool {
    SHARED_BUDGET.try_with(|_| ()).is_ok()
}

/// One line, parsed.
struct Line {
    number: usize,
    text: String,
    parsed: Result<(crate::args::Command, clap::ArgMatches), String>,
}

/// What `sluice run` adds to each line whose command takes it.
#[derive(Debug, Clone, Default)]
struct Added {
    store: crate::args::StoreArgs,
    dry_run: bool,
}

impl Added {
    /// The flags to add, by the id of the argument that takes each.
    fn flags(&self) -> Vec<(&'static str, &'static str, Option<String>)> {
        let mut flags = Vec::new();
        let valued = [
            ("endpoint", "--endpoint", &self.store.endpoint),
            ("region", "--region", &self.store.region),
            ("profile", "--profile", &self.store.profile),
        ];
        for (id, flag, value) in valued {
            if let Some(value) = value {
                flags.push((id, flag, Some(value.clone())));
            }
        }
        if self.store.no_sign_request {
            flags.push(("no_sign_request", "--no-sign-request", None));
        }
        if self.dry_run {
            flags.push(("dry_run", "--dry-run", None));
        }
        flags
    }
}

/// Splits and parses a line; `None` for blank lines and comments.
fn parse(number: usize, text: &str, added: &Added) -> Option<Line> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return None;
    }
    let parsed = (|| {
        let mut words = shlex::split(trimmed).ok_or("unbalanced quotes")?;
        if words.first().map(String::as_str) == Some("sluice") {
            words.remove(0);
        }
        let name = words.first().ok_or("no command")?.clone();
        // Standard input holds the commands (with `run -`), and several
        // commands writing to standard output at once would mix their bytes.
        if words.iter().any(|w| w == "-") {
            return Err(
                "`-` (standard input or output) cannot be used by a command run from a file".into(),
            );
        }
        if !ALLOWED.contains(&name.as_str()) {
            return Err(format!(
                "`{name}` cannot run from a file (it may: {})",
                ALLOWED.join(", ")
            ));
        }
        let takes = |id: &str| {
            Cli::command()
                .find_subcommand(&name)
                .is_some_and(|sub| sub.get_arguments().any(|arg| arg.get_id() == id))
        };
        let given = |words: &[String], flag: &str| words.iter().any(|w| w.starts_with(flag));
        for (id, flag, value) in added.flags() {
            if takes(id) && !given(&words, flag) {
                words.push(flag.to_string());
                words.extend(value);
            }
        }
        let argv = std::iter::once("sluice".to_string()).chain(words);
        let matches = Cli::command()
            .try_get_matches_from(argv)
            .map_err(|e| e.render().to_string().trim().to_string())?;
        let cli = Cli::from_arg_matches(&matches).map_err(|e| e.to_string())?;
        let sub = matches
            .subcommand()
            .map(|(_, m)| m.clone())
            .unwrap_or_default();
        Ok((cli.command, sub))
    })();
    Some(Line {
        number,
        text: trimmed.to_string(),
        parsed,
    })
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.jobs == 0 {
        return Err(UsageError("--jobs must be at least 1".into()).into());
    }
    let reader: Box<dyn BufRead + Send> = match args.file.as_os_str() == "-" {
        true => Box::new(std::io::BufReader::new(std::io::stdin())),
        false => Box::new(std::io::BufReader::new(
            std::fs::File::open(&args.file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.file.display()))?,
        )),
    };
    // Lines are read as the commands run: a file of millions of lines is
    // never held whole.
    let (sender, receiver) = tokio::sync::mpsc::channel::<std::io::Result<String>>(1024);
    let read = tokio::task::spawn_blocking(move || {
        for line in reader.lines() {
            let failed = line.is_err();
            if sender.blocking_send(line).is_err() || failed {
                return;
            }
        }
    });
    let added = Added {
        store: args.store.clone(),
        dry_run: args.dry_run,
    };
    let lines = tokio_stream_of(receiver)
        .enumerate()
        .filter_map(move |(index, line)| {
            let parsed = line.map(|text| parse(index + 1, &text, &added));
            async move { parsed.transpose() }
        });
    let budget = MemoryBudget::new(args.memory_limit);
    let json = args.json;
    let results = lines
        .map(|line| {
            let budget = budget.clone();
            async move {
                let line = line.map_err(|e| anyhow::anyhow!("cannot read the commands: {e}"))?;
                let outcome = match line.parsed {
                    Err(error) => Err(error),
                    Ok((command, matches)) => {
                        let ran = SHARED_BUDGET
                            .scope(budget, Box::pin(crate::dispatch(command, &matches)))
                            .await;
                        ran.map_err(|e| format!("{e:#}"))
                    }
                };
                report(json, line.number, &line.text, outcome.as_ref().err());
                Ok::<bool, anyhow::Error>(outcome.is_ok())
            }
        })
        .buffer_unordered(args.jobs);
    futures::pin_mut!(results);
    let (mut ran, mut failed) = (0u64, 0u64);
    // One Ctrl-C for the whole run: no new line starts, the commands in
    // flight are dropped (their multipart uploads aborted), exit 130.
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    loop {
        tokio::select! {
            next = results.next() => match next {
                Some(result) => {
                    ran += 1;
                    if !result? {
                        failed += 1;
                    }
                }
                None => break,
            },
            _ = &mut interrupt => {
                eprintln!("sluice: interrupted after {} ({failed} failed)", crate::output::count(ran, "command"));
                return Err(crate::Interrupted("interrupted: the commands not finished were stopped").into());
            }
        }
    }
    let _ = read.await;
    if !json {
        eprintln!(
            "sluice: ran {}: {} failed",
            crate::output::count(ran, "command"),
            failed
        );
    }
    match failed {
        0 => Ok(()),
        n => Err(anyhow::anyhow!(
            "{} of {} failed",
            crate::output::count(n, "command"),
            ran
        )),
    }
}

/// A command's result on standard error: a line for a failure (or, with
/// `--json`, a JSON line for every command).
fn report(json: bool, number: usize, text: &str, error: Option<&String>) {
    if json {
        let mut line =
            serde_json::json!({ "line": number, "command": text, "ok": error.is_none() });
        if let Some(error) = error {
            line["error"] = error.as_str().into();
        }
        eprintln!("{line}");
    } else if let Some(error) = error {
        eprintln!("sluice: line {number} ({text}): {error}");
    }
}

/// The receiver as a stream.
fn tokio_stream_of<T: Send + 'static>(
    mut receiver: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |context| receiver.poll_recv(context))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_as_commands() {
        // (line, parsed, error it says)
        let cases: [(&str, Option<bool>, &str); 8] = [
            ("", None, ""),
            ("# a comment", None, ""),
            ("cp s3://a/k ./k", Some(true), ""),
            ("sluice ls 's3://b/logs/2026-*/*.gz'", Some(true), ""),
            ("serve", Some(false), "cannot run from a file"),
            ("cp 'unbalanced", Some(false), "unbalanced quotes"),
            ("cp --frobnicate a b", Some(false), "unexpected argument"),
            ("run other.txt", Some(false), "cannot run from a file"),
        ];
        for (text, parsed, says) in cases {
            let line = parse(1, text, &Added::default());
            assert_eq!(line.as_ref().map(|l| l.parsed.is_ok()), parsed, "{text}");
            if let Some(Err(error)) = line.map(|l| l.parsed) {
                assert!(error.contains(says), "{text}: {error}");
            }
        }
        // The run's --endpoint is added where the line gives none.
        let added = Added {
            store: crate::args::StoreArgs {
                endpoint: Some("http://127.0.0.1:9".into()),
                region: Some("eu-west-3".into()),
                profile: None,
                no_sign_request: true,
            },
            dry_run: true,
        };
        let line = parse(1, "ls s3://b/", &added).unwrap();
        let (_, matches) = line.parsed.unwrap();
        assert_eq!(
            matches.get_one::<String>("endpoint").map(String::as_str),
            Some("http://127.0.0.1:9")
        );
        let line = parse(1, "ls s3://b/ --endpoint-url http://x", &added).unwrap();
        let (_, matches) = line.parsed.unwrap();
        assert_eq!(
            matches.get_one::<String>("endpoint").map(String::as_str),
            Some("http://x")
        );
        assert_eq!(
            matches.get_one::<String>("region").map(String::as_str),
            Some("eu-west-3")
        );
        assert_eq!(matches.get_one::<bool>("no_sign_request"), Some(&true));
        // --dry-run reaches the commands that change something.
        for (text, dry) in [
            ("rm s3://b/k", true),
            ("cp a s3://b/", true),
            ("stat s3://b/k", false),
        ] {
            let (_, matches) = parse(1, text, &added).unwrap().parsed.unwrap();
            let has = matches.try_get_one::<bool>("dry_run").ok().flatten() == Some(&true);
            assert_eq!(has, dry, "{text}");
        }
    }

    #[tokio::test]
    async fn the_engines_of_a_run_share_its_budget() {
        let store: Arc<dyn ObjectStore> = Arc::new(sluice_testkit::MemoryStore::new());
        let alone = engine(store.clone(), EngineConfig::default()).unwrap();
        let shared = MemoryBudget::new(1024 * 1024 * 1024);
        let (first, second) = SHARED_BUDGET
            .scope(shared.clone(), async {
                (
                    engine(store.clone(), EngineConfig::default()).unwrap(),
                    engine(store.clone(), EngineConfig::default()).unwrap(),
                )
            })
            .await;
        assert_eq!(first.budget().capacity(), 1024 * 1024 * 1024);
        assert_eq!(second.budget().capacity(), 1024 * 1024 * 1024);
        assert_ne!(alone.budget().capacity(), 1024 * 1024 * 1024);
        // One budget: what one holds, the other cannot take.
        let held = first
            .budget()
            .try_reserve(1024 * 1024 * 1024)
            .expect("all of it");
        assert!(second.budget().try_reserve(1024).is_none());
        drop(held);
    }
}
