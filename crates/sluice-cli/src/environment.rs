//! The `SLUICE_*` environment variables, read off the clap definitions (the
//! one place each is defined, with its flag, parser and doc): the table in
//! docs/ENVIRONMENT.md and the man page's ENVIRONMENT section are rendered
//! from them (a test fails when the file and the definitions disagree), and the warnings about variables that no
//! command reads any more, or that a command reads under another name.

use std::collections::BTreeMap;

use clap::CommandFactory;

use crate::args::{Cli, Command};

/// Variables nothing reads any more, or that `serve` reads under another
/// name: (variable, the commands it is stale for (empty: all), what to say).
const STALE: &[(&str, &[&str], &str)] = &[
    (
        "SLUICE_CHECKSUM",
        &[],
        "SLUICE_CHECKSUM is no longer read; the part checksum is set by \
         --checksum-algorithm / SLUICE_CHECKSUM_ALGORITHM",
    ),
    (
        "SLUICE_CONCURRENCY",
        &["serve"],
        "SLUICE_CONCURRENCY (transfers in flight of put/get/cp/sync) is not read by \
         `serve`; its parts in flight per upload are --parts-in-flight / SLUICE_PARTS_IN_FLIGHT",
    ),
    (
        "SLUICE_NO_UPLOAD_PAGE",
        &["serve"],
        "SLUICE_NO_UPLOAD_PAGE is no longer read; the upload page is turned off with \
         --upload-page=false / SLUICE_UPLOAD_PAGE=false",
    ),
];

/// The warnings for `command`, given which variables are set.
pub fn stale_warnings(command: &Command, is_set: impl Fn(&str) -> bool) -> Vec<&'static str> {
    let name = subcommand_name(command);
    STALE
        .iter()
        .filter(|(variable, commands, _)| {
            is_set(variable) && (commands.is_empty() || commands.contains(&name.as_str()))
        })
        .map(|(_, _, warning)| *warning)
        .collect()
}

fn subcommand_name(command: &Command) -> String {
    let debug = format!("{command:?}");
    let variant = debug
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    names
        .into_iter()
        .find(|name| name.replace('-', "") == variant)
        .unwrap_or_default()
}

/// One variable: the commands that read it, with the flag each reads it for.
#[derive(Debug, Default)]
pub struct Variable {
    /// (command path, long flag, the flag's doc)
    pub readers: Vec<(String, String, String)>,
    /// The defaults the readers that have one give it.
    pub defaults: std::collections::BTreeSet<String>,
}

/// Every `SLUICE_*` variable of every (sub)command, by name.
pub fn variables() -> BTreeMap<String, Variable> {
    let mut out: BTreeMap<String, Variable> = BTreeMap::new();
    collect(&Cli::command(), "sluice", &mut out);
    out
}

fn collect(command: &clap::Command, path: &str, out: &mut BTreeMap<String, Variable>) {
    for arg in command.get_arguments() {
        let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
            continue;
        };
        let flag = arg
            .get_long()
            .map_or_else(|| arg.get_id().to_string(), |l| format!("--{l}"));
        let doc = arg
            .get_help()
            .map(|h| h.to_string())
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        let variable = out.entry(env.to_owned()).or_default();
        variable.readers.push((path.to_owned(), flag, doc));
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        if !default.is_empty() {
            variable.defaults.insert(default.join(","));
        }
    }
    for sub in command.get_subcommands() {
        collect(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

/// docs/ENVIRONMENT.md as the definitions make it (written by its test).
#[cfg(test)]
pub fn render() -> String {
    let mut text = String::from(
        "# Environment variables\n\n\
         Every `SLUICE_*` variable, the commands that read it and what for. A flag\n\
         given on the command line wins over its variable; `sluice serve` reads its\n\
         TOML file (`--config`) after both. This file is generated from the\n\
         command-line definitions (`SLUICE_UPDATE_DOCS=1 cargo test -p sluice-cli\n\
         environment`); a test fails when the two disagree.\n\n\
         | variable | read by | flag | meaning |\n| --- | --- | --- | --- |\n",
    );
    for (name, variable) in variables() {
        // Readers with the same flag and meaning share one row.
        let mut rows: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for (command, flag, doc) in &variable.readers {
            rows.entry((flag.clone(), doc.clone()))
                .or_default()
                .push(format!("`{}`", command.trim_start_matches("sluice ")));
        }
        for ((flag, doc), commands) in rows {
            let doc = doc.replace('|', "\\|");
            text.push_str(&format!(
                "| `{name}` | {} | `{flag}` | {doc} |\n",
                commands.join(", ")
            ));
        }
    }
    text.push_str(
        "\nFor `az://` locations (every command that takes a store), the Azure CLI's own\n\
         variables, `--endpoint` moving the blob endpoint:\n\n\
         | variable | meaning |\n| --- | --- |\n",
    );
    for (name, doc) in crate::azure::VARIABLES {
        text.push_str(&format!("| `{name}` | {doc} |\n"));
    }
    text.push_str(
        "\nFor `gs://` locations, the variables Google's libraries read, `--endpoint`\n\
         moving the JSON API's endpoint:\n\n\
         | variable | meaning |\n| --- | --- |\n",
    );
    for (name, doc) in crate::gcs::VARIABLES {
        text.push_str(&format!("| `{name}` | {doc} |\n"));
    }
    text.push_str(
        "\nFor `s3://` locations, the AWS SDK's chain (`AWS_ACCESS_KEY_ID`,\n\
         `AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE`, `AWS_REGION`, web identity, instance\n\
         metadata).\n",
    );
    text.push_str(
        "\nAlso read: `SLUICE_LOG` (log filter, as `RUST_LOG`: `info` by default,\n\
         `debug` shows each part) and, by the test suite only, `SLUICE_TEST_*`.\n",
    );
    for (variable, commands, warning) in STALE {
        let which = if commands.is_empty() {
            "any command".to_owned()
        } else {
            commands.join(", ")
        };
        text.push_str(&format!(
            "\nNot read by {which}: `{variable}` ({warning}).\n"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/ENVIRONMENT.md");

    /// clap's own checks of the definitions (unique flags and ids, ...), which
    /// run only when a command is built in a debug build.
    #[test]
    fn the_command_line_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_docs_table_is_what_the_definitions_say() {
        sluice_testkit::assert_generated_file(
            DOC,
            &render(),
            "cargo test -p sluice-cli environment",
        );
    }

    /// A value every reader of the variable must accept, and one all must refuse.
    fn samples(name: &str) -> Option<(&'static str, Option<&'static str>)> {
        Some(match name {
            "SLUICE_PART_SIZE" | "SLUICE_THRESHOLD" | "SLUICE_UPLOAD_MEMORY_SHARE" => {
                ("16MiB", Some("lots"))
            }
            "SLUICE_MEMORY_LIMIT" | "SLUICE_MAX_UPLOAD_SIZE" => ("512MiB", Some("lots")),
            name if name.ends_with("_BYTES") || name == "SLUICE_MIN_BODY_RATE" => {
                ("64KiB", Some("lots"))
            }
            "SLUICE_CONCURRENCY" => ("auto", Some("many")),
            "SLUICE_PARTS_IN_FLIGHT"
            | "SLUICE_JOBS"
            | "SLUICE_STORE_CONCURRENCY"
            | "SLUICE_QUEUE_LENGTH"
            | "SLUICE_MAX_CONCURRENT_UPLOADS"
            | "SLUICE_MAX_UPLOADS_PER_TENANT"
            | "SLUICE_MAX_UPLOADS_PER_PREFIX"
            | "SLUICE_MAX_CONNECTIONS"
            | "SLUICE_HTTP2_MAX_STREAMS"
            | "SLUICE_STORE_FAILURES_TO_OPEN"
            | "SLUICE_RETRY_AFTER_SECONDS"
            | "SLUICE_FORM_MAX_PARTS"
            | "SLUICE_TUS_MAX_PARTIALS"
            | "SLUICE_PENALTY_AFTER_OFFENSES"
            | "SLUICE_IMPORT_CONCURRENCY" => ("16", Some("x")),
            "SLUICE_TUS_SMALL_PATCHES_PER_SECOND" => ("2.5", Some("x")),
            "SLUICE_CHECKSUM_ALGORITHM" => ("crc64nvme", Some("md5")),
            "SLUICE_LOG_FORMAT" => ("json", Some("xml")),
            "SLUICE_LISTEN" | "SLUICE_ADMIN_LISTEN" => ("127.0.0.1:9090", Some("here")),
            "SLUICE_EVENT_URL" | "SLUICE_HOOK_URL" | "SLUICE_DIRECT_ENDPOINT" => {
                ("http://127.0.0.1:9000", Some("ftp://x"))
            }
            "SLUICE_ENDPOINT" | "SLUICE_URL" => ("http://127.0.0.1:9000", None),
            "SLUICE_PENALTY_EXEMPT" => ("10.0.0.0/8", Some("ten")),
            "SLUICE_IMPORT_ALLOW" => ("10.0.0.0/8", Some("not a host!")),
            "SLUICE_KEY_TEMPLATE" => ("{uuid}/{filename}", Some("{nope}")),
            "SLUICE_STORE" => ("./sluice-data", None),
            "SLUICE_UPLOAD_PAGE_PATH" => ("/upload", Some("upload")),
            "SLUICE_CORS_ORIGIN" => ("https://app.example", Some("app.example")),
            "SLUICE_DIRECT_ROLE_ARN" => (
                "arn:aws:iam::123456789012:role/uploads",
                Some("arn:aws:s3:::bucket"),
            ),
            "SLUICE_DIRECT"
            | "SLUICE_IMPORTS"
            | "SLUICE_SHARD_PREFIX"
            | "SLUICE_FIXED_PART_SIZE"
            | "SLUICE_ALLOW_ANONYMOUS"
            | "SLUICE_HOOK_FAIL_OPEN"
            | "SLUICE_UPLOAD_PAGE"
            | "SLUICE_DASHBOARD"
            | "SLUICE_QUIET"
            | "SLUICE_FSYNC" => ("true", Some("perhaps")),
            name if name.ends_with("_INTERVAL") => ("30s", Some("soon")),
            name if name.ends_with("_TIMEOUT")
                || name.ends_with("_GRACE")
                || name.ends_with("_EXPIRY")
                || name.ends_with("_EXPIRES")
                || name.ends_with("_KEEP")
                || name.ends_with("_OLDER_THAN")
                || name.ends_with("_LEEWAY")
                || name.ends_with("_RETRY_FOR")
                || name.ends_with("_WINDOW")
                || name.ends_with("_DURATION")
                || name.ends_with("_LIFETIME")
                || name.ends_with("_DEADLINE")
                || name.ends_with("_AFTER")
                || name.ends_with("_KEEP_ALIVE")
                || name.ends_with("_DELAY") =>
            {
                ("90s", Some("soon"))
            }
            name if name.ends_with("_FILE")
                || name.ends_with("_CONFIG")
                || name == "SLUICE_TLS_CERT"
                || name == "SLUICE_TLS_KEY" =>
            {
                ("/etc/sluice/x", None)
            }
            _ => return None,
        })
    }

    #[test]
    fn every_variable_parses_the_same_in_every_command_that_reads_it() {
        let cli = Cli::command();
        let mut checked = 0;
        for (name, variable) in variables() {
            // Switches (true/false) and free text are read as clap reads any env value.
            // Free text is taken as it is; every other variable has samples.
            let free_text = [
                "SLUICE_CONTENT_TYPE",
                "SLUICE_JWT_ALGORITHM",
                "SLUICE_JWT_AUDIENCE",
                "SLUICE_JWT_ISSUER",
                "SLUICE_REGION",
                "SLUICE_TOKEN_COOKIE",
            ];
            let Some((good, bad)) = samples(&name) else {
                assert!(
                    free_text.contains(&name.as_str()),
                    "{name} has no samples: add them to samples()"
                );
                continue;
            };
            for (path, flag, _) in &variable.readers {
                let mut command = cli.clone();
                for part in path.split(' ').skip(1) {
                    command = command
                        .find_subcommand(part)
                        .unwrap_or_else(|| panic!("{path}"))
                        .clone();
                }
                let arg = command
                    .get_arguments()
                    .find(|a| a.get_env().and_then(|e| e.to_str()) == Some(name.as_str()))
                    .unwrap();
                // The argument's own parser, alone (its relations to other
                // arguments are not what is checked here).
                let alone = clap::Command::new("check").no_binary_name(true).arg(
                    clap::Arg::new("value")
                        .long("value")
                        .value_parser(arg.get_value_parser().clone()),
                );
                let parse = |value: &str| {
                    alone
                        .clone()
                        .try_get_matches_from(["--value", value])
                        .map(|_| ())
                };
                assert!(
                    parse(good).is_ok(),
                    "{name}={good} is refused by `{path}` ({flag})"
                );
                if let Some(bad) = bad {
                    assert!(
                        parse(bad).is_err(),
                        "{name}={bad} is taken by `{path}` ({flag})"
                    );
                }
                checked += 1;
            }
        }
        assert!(checked > 90, "only {checked} readers checked");
    }

    #[test]
    fn a_variable_means_one_thing_flag_and_doc_alike_in_every_command() {
        for (name, variable) in variables() {
            let flags: std::collections::BTreeSet<&str> = variable
                .readers
                .iter()
                .map(|(_, f, _)| f.as_str())
                .collect();
            assert_eq!(
                flags.len(),
                1,
                "{name} is read for different flags: {flags:?}"
            );
            assert!(
                variable.defaults.len() <= 1,
                "{name} has different defaults: {:?}",
                variable.defaults
            );
        }
    }

    #[test]
    fn stale_variables_warn_only_where_they_are_stale() {
        use clap::Parser;
        // (command line, variables set, warnings expected)
        let cases: [(&[&str], &[&str], usize); 4] = [
            (&["sluice", "serve"], &["SLUICE_CHECKSUM"], 1),
            (&["sluice", "serve"], &["SLUICE_CONCURRENCY"], 1),
            (&["sluice", "put", "a", "b"], &["SLUICE_CONCURRENCY"], 0),
            (
                &["sluice", "put", "a", "b"],
                &["SLUICE_CHECKSUM", "SLUICE_CONCURRENCY"],
                1,
            ),
        ];
        for (argv, set, expected) in cases {
            let cli = Cli::try_parse_from(argv).unwrap();
            let warnings = stale_warnings(&cli.command, |name| set.contains(&name));
            assert_eq!(
                warnings.len(),
                expected,
                "{argv:?} with {set:?}: {warnings:?}"
            );
        }
    }
}
