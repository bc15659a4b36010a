//! Where `sluice serve`'s settings come from, read off their one definition
//! each (the fields of [`ServerConfig`] and the structs it flattens):
//!
//! - [`definitions`]: every setting's key, flag, variable, default and doc, for
//!   `--help`, docs/CONFIG.md and error messages;
//! - [`resolve`]: defaults, then the TOML file, then `SLUICE_…` variables, then
//!   flags (clap reports where each value came from, so no setting is overlaid
//!   by hand);
//! - and, in [`ServerConfig::validate`], every value, whichever source gave
//!   it, through its own definition's parser (`crate::values`), so a file
//!   meets the rules a flag does.

use clap::parser::ValueSource;
use clap::{ArgMatches, FromArgMatches};

use crate::config::{ConfigError, ServerConfig};

/// One setting as its definition states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Its key in the TOML file (`limits.queue_timeout`).
    pub key: String,
    /// `--queue-timeout`.
    pub flag: String,
    /// `SLUICE_QUEUE_TIMEOUT`.
    pub variable: Option<String>,
    pub default: Option<String>,
    /// What it means (the definition's doc, one line).
    pub doc: String,
    /// The group it is listed under in `--help`.
    pub heading: String,
}

impl Setting {
    /// `limits.queue_timeout (--queue-timeout, SLUICE_QUEUE_TIMEOUT)`.
    pub fn names(&self) -> String {
        match &self.variable {
            Some(variable) => format!("{} ({}, {variable})", self.key, self.flag),
            None => format!("{} ({})", self.key, self.flag),
        }
    }
}

fn command() -> clap::Command {
    ServerConfig::command()
}

/// The matches of `argv` (flags only: no variable is read), for callers that
/// resolve settings without a process command line (tests, embedders).
pub fn parse_flags<I, T>(argv: I) -> Result<ArgMatches, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    command()
        .mut_args(|arg| arg.env(None::<&'static str>))
        .try_get_matches_from(argv)
}

/// Every setting, in `--help` order.
pub fn definitions() -> Vec<Setting> {
    command()
        .get_arguments()
        .filter_map(|arg| {
            let flag = format!("--{}", arg.get_long()?);
            let default = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect::<Vec<_>>();
            let doc = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string().replace('\n', " "))
                .unwrap_or_default();
            Some(Setting {
                key: arg.get_id().to_string(),
                flag,
                variable: arg.get_env().map(|v| v.to_string_lossy().into_owned()),
                default: (!default.is_empty()).then(|| default.join(",")),
                doc,
                heading: arg.get_help_heading().unwrap_or("Gateway").to_owned(),
            })
        })
        .collect()
}

/// The setting with this key.
pub fn definition(key: &str) -> Option<Setting> {
    definitions().into_iter().find(|s| s.key == key)
}

/// Why the settings could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("config file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("invalid configuration: {names}: {reason}")]
    Invalid { names: String, reason: String },
}

impl From<ConfigError> for SettingsError {
    fn from(error: ConfigError) -> SettingsError {
        let names = definition(&error.key).map_or(error.key.clone(), |s| s.names());
        SettingsError::Invalid {
            names,
            reason: error.reason,
        }
    }
}

/// Keys a file may still use from an earlier release: (old key, its key now).
const MOVED: &[(&str, &str)] = &[("engine.concurrency", "limits.parts_in_flight")];

/// The settings: the file's (`(name, text)`, if any) over the defaults, and
/// over both the values `matches` got from a variable or a flag; validated.
pub fn resolve(
    file: Option<(&str, &str)>,
    matches: &ArgMatches,
) -> Result<ServerConfig, SettingsError> {
    let file_error = |path: &str, reason: String| SettingsError::File {
        path: path.to_owned(),
        reason,
    };
    let mut table = match file {
        Some((path, text)) => {
            let table =
                toml::from_str::<toml::Table>(text).map_err(|e| file_error(path, e.to_string()))?;
            for (old, new) in MOVED {
                if crate::config::value_at(&table, old).is_some() {
                    let reason = format!("{old} is now {new} (see docs/CONFIG.md)");
                    return Err(file_error(path, reason));
                }
            }
            // The file alone first: its mistakes are reported with their line.
            toml::from_str::<ServerConfig>(text).map_err(|e| file_error(path, e.to_string()))?;
            table
        }
        None => toml::Table::new(),
    };
    // What the command line and the environment said, over the defaults.
    let given = ServerConfig::from_arg_matches(matches)
        .map_err(|e| ConfigError::new("serve", e.to_string()))?;
    let given =
        toml::Table::try_from(&given).map_err(|e| ConfigError::new("serve", e.to_string()))?;
    for id in matches.ids() {
        let key = id.as_str();
        if !matches!(
            matches.value_source(key),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        if let Some(value) = crate::config::value_at(&given, key) {
            insert(&mut table, key, value.clone());
        }
    }
    let name = file.map_or("(flags and variables)", |(path, _)| path);
    let config: ServerConfig = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| file_error(name, e.to_string()))?;
    config.validate()?;
    Ok(config)
}

/// Sets the value at a dotted key, making the tables on the way.
fn insert(table: &mut toml::Table, key: &str, value: toml::Value) {
    match key.split_once('.') {
        None => {
            table.insert(key.to_owned(), value);
        }
        Some((head, rest)) => {
            let inner = table
                .entry(head.to_owned())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !inner.is_table() {
                *inner = toml::Value::Table(toml::Table::new());
            }
            if let toml::Value::Table(inner) = inner {
                insert(inner, rest, value);
            }
        }
    }
}

/// docs/CONFIG.md as the definitions make it (written by its test).
#[cfg(test)]
pub fn render() -> String {
    let mut text = String::from(
        "# Settings of `sluice serve`\n\n\
         Every setting, with its key in the TOML file (`--config`), its flag, its\n\
         environment variable and its default. A flag wins over its variable, a\n\
         variable over the file, the file over the default; every value, whichever\n\
         gave it, is checked by the same rule. Record streams are `[streams.NAME]`\n\
         tables of the file (docs/STREAMS.md). This file is generated from the\n\
         definitions (`SLUICE_UPDATE_DOCS=1 cargo test -p sluice-server settings`);\n\
         a test fails when the two disagree.\n",
    );
    let mut heading = String::new();
    for setting in definitions() {
        if setting.heading != heading {
            heading = setting.heading.clone();
            text.push_str(&format!(
                "\n## {heading}\n\n| key | flag | variable | default | meaning |\n| --- | --- | --- | --- | --- |\n"
            ));
        }
        let code = |v: &Option<String>| v.as_ref().map_or(String::new(), |v| format!("`{v}`"));
        text.push_str(&format!(
            "| `{}` | `{}` | {} | {} | {} |\n",
            setting.key,
            setting.flag,
            code(&setting.variable),
            code(&setting.default),
            setting.doc.replace('|', "\\|")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::SECOND;

    const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/CONFIG.md");

    fn matches(argv: &[&str]) -> ArgMatches {
        parse_flags(argv).unwrap()
    }

    #[test]
    fn the_docs_table_is_what_the_definitions_say() {
        sluice_testkit::assert_generated_file(
            DOC,
            &render(),
            "cargo test -p sluice-server settings",
        );
    }

    /// The TOML schema and the definitions are the same: every key of a
    /// configuration with every setting set is a definition's, and back.
    #[test]
    fn every_file_key_is_a_definition_and_back() {
        let mut config = ServerConfig {
            admin_listen: Some("127.0.0.1:9".parse().unwrap()),
            endpoint: Some("http://x".into()),
            region: Some("r".into()),
            max_upload_size: Some(1),
            cors_origins: vec!["*".into()],
            ..ServerConfig::default()
        };
        config.limits.max_uploads_per_tenant = Some(1);
        config.limits.max_uploads_per_prefix = Some(1);
        config.limits.download_deadline = Some(SECOND);
        config.engine.upload_memory_share = Some(1);
        let table = toml::Table::try_from(&config).unwrap();
        let mut keys = Vec::new();
        fn walk(table: &toml::Table, prefix: &str, keys: &mut Vec<String>) {
            for (key, value) in table {
                let full = format!("{prefix}{key}");
                match value {
                    toml::Value::Table(inner) => walk(inner, &format!("{full}."), keys),
                    _ => keys.push(full),
                }
            }
        }
        walk(&table, "", &mut keys);
        let mut defined: Vec<String> = definitions().into_iter().map(|s| s.key).collect();
        // Optional settings left unset are not in the file.
        let unset = [
            "auth.jwt_secret_file",
            "auth.jwt_public_key_file",
            "auth.jwks_file",
            "auth.url_secret_file",
            "auth.issuer",
            "auth.audience",
            "auth.admin_token_file",
            "auth.token_cookie",
            "events.secret_file",
            "hooks.pre_create_url",
            "hooks.secret_file",
            "direct.public_endpoint",
            "tls.cert_file",
            "tls.key_file",
        ];
        defined.retain(|k| !unset.contains(&k.as_str()));
        keys.sort();
        defined.sort();
        assert_eq!(keys, defined);
    }

    #[test]
    fn each_variable_is_its_flag_in_capitals() {
        for setting in definitions() {
            let expected = format!(
                "SLUICE_{}",
                setting
                    .flag
                    .trim_start_matches("--")
                    .replace('-', "_")
                    .to_uppercase()
            );
            assert_eq!(
                setting.variable.as_deref(),
                Some(expected.as_str()),
                "{}",
                setting.key
            );
            assert!(!setting.doc.is_empty(), "{} has no doc", setting.key);
        }
    }

    #[test]
    fn sources_stack_default_file_variable_flag() {
        let file = "[limits]\nqueue_length = 7\nmax_concurrent_uploads = 9\n[engine]\npart_size = \"32MiB\"\n";
        // (command line, what queue_length, max_concurrent_uploads, part size end up as)
        type Case<'a> = (&'a [&'a str], (usize, usize, u64));
        let cases: [Case; 3] = [
            (&[], (7, 9, 32 << 20)),
            (&["--queue-length", "3"], (3, 9, 32 << 20)),
            (
                &["--part-size", "8MiB", "--max-concurrent-uploads", "2"],
                (7, 2, 8 << 20),
            ),
        ];
        for (argv, (queue, max, part)) in cases {
            let config = resolve(Some(("test.toml", file)), &matches(argv)).unwrap();
            assert_eq!(
                (
                    config.limits.queue_length,
                    config.limits.max_concurrent_uploads,
                    config.engine.part_size
                ),
                (queue, max, part),
                "{argv:?}"
            );
            // What no source set keeps its default.
            assert_eq!(config.limits.store_concurrency, 128);
        }
        // A variable: over the file, under a flag. (A name of this test's own,
        // so no other test sees it.)
        let with_variable = |argv: &[&str]| {
            ServerConfig::command()
                .mut_args(|arg| arg.env(None::<&'static str>))
                .mut_arg("limits.queue_length", |arg| {
                    arg.env("SLUICE_TEST_SETTINGS_QUEUE_LENGTH")
                })
                .try_get_matches_from(argv)
                .unwrap()
        };
        std::env::set_var("SLUICE_TEST_SETTINGS_QUEUE_LENGTH", "5");
        let from_variable = resolve(Some(("test.toml", file)), &with_variable(&[])).unwrap();
        let from_flag = resolve(
            Some(("test.toml", file)),
            &with_variable(&["--queue-length", "3"]),
        )
        .unwrap();
        std::env::remove_var("SLUICE_TEST_SETTINGS_QUEUE_LENGTH");
        assert_eq!(from_variable.limits.queue_length, 5);
        assert_eq!(from_flag.limits.queue_length, 3);
        // The file's other values stay.
        assert_eq!(from_variable.limits.max_concurrent_uploads, 9);
        let defaults = resolve(None, &matches(&[])).unwrap();
        assert_eq!(defaults, ServerConfig::default());
    }

    #[test]
    fn a_file_value_meets_the_rule_its_flag_does_and_the_error_names_it() {
        // (file, what the error must say)
        let cases = [
            ("[limits]\nmax_concurrent_uploads = 0\n", "limits.max_concurrent_uploads (--max-concurrent-uploads, SLUICE_MAX_CONCURRENT_UPLOADS)"),
            ("[tus]\nlock_timeout = \"2h\"\n", "tus.lock_timeout"),
            ("[engine]\npart_size = \"1MiB\"\n", "engine.part_size"),
            ("store = \"wasb://bucket\"\n", "store (--store, SLUICE_STORE)"),
            ("cors_origins = [\"ftp://x\"]\n", "cors_origins"),
            ("[limits]\nnope = 1\n", "unknown field `nope`"),
            ("[engine]\nconcurrency = 8\n", "engine.concurrency is now limits.parts_in_flight"),
            ("[form]\nmax_parts = -1\n", "expected usize"),
            ("[form]\nmax_parts = 0\n", "form.max_parts (--form-max-parts, SLUICE_FORM_MAX_PARTS): \"0\": must be at least 1"),
        ];
        for (file, expected) in cases {
            let error = resolve(Some(("test.toml", file)), &matches(&[]))
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{file}: {error}");
        }
        // The same rule for the flag, said by clap.
        assert!(command()
            .try_get_matches_from(["--max-concurrent-uploads", "0"])
            .is_err());
    }
}
