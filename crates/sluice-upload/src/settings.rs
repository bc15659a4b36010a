//! The engine's settings as users write them, each defined once: a field whose
//! clap attributes give its flag, environment variable, default and doc, whose
//! `id` is its config-file key, and whose serde attributes read that key.
//! `sluice serve` (its `[engine]` table) and every transfer command flatten
//! [`EngineSettings`]; defaults, `--help`, the docs tables and the checks of a
//! config file's values are all read off these definitions ([`defaults`]).

use clap::{Args, FromArgMatches, ValueEnum};
use serde::{Deserialize, Deserializer, Serialize};
use sluice_store::limits::{MAX_PART_SIZE, MAX_PUT_SIZE, MIN_PART_SIZE};
use sluice_store::ChecksumAlgorithm;

use crate::error::ConfigError;
use crate::units::{format_size, parse_size};

/// How uploads are cut into parts and how much memory they may hold: the
/// settings every command that uploads shares (flags, `SLUICE_…` variables,
/// and `sluice serve`'s `[engine]` table).
#[derive(Debug, Clone, PartialEq, Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Parts and memory")]
pub struct EngineSettings {
    /// Size of each part, 5MiB to 5GiB; raised when needed to fit the object in
    /// 10,000 parts.
    #[arg(
        id = "engine.part_size",
        long = "part-size",
        env = "SLUICE_PART_SIZE",
        value_name = "SIZE",
        default_value = "16MiB",
        value_parser = size_in(MIN_PART_SIZE, MAX_PART_SIZE)
    )]
    #[serde(deserialize_with = "size")]
    pub part_size: u64,
    /// Keep every part the same size (Cloudflare R2 requires it); a stream of
    /// unknown length is then capped at 10,000 parts.
    #[arg(
        id = "engine.fixed_part_size",
        long = "fixed-part-size",
        env = "SLUICE_FIXED_PART_SIZE",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub fixed_part_size: bool,
    /// Objects up to this size go up in a single PUT; larger ones in parts.
    #[arg(
        id = "engine.threshold",
        long = "threshold",
        env = "SLUICE_THRESHOLD",
        value_name = "SIZE",
        default_value = "16MiB",
        value_parser = size_in(0, MAX_PUT_SIZE)
    )]
    #[serde(deserialize_with = "size")]
    pub threshold: u64,
    /// Most bytes buffered in memory at once; one upload holds at most a quarter
    /// of it, which bounds the part size (a stream of unknown length can reach
    /// about 545 GiB with the defaults).
    #[arg(
        id = "engine.memory_limit",
        long = "memory-limit",
        env = "SLUICE_MEMORY_LIMIT",
        value_name = "SIZE",
        default_value = "256MiB",
        value_parser = size_in(MIN_PART_SIZE, MAX_SETTING)
    )]
    #[serde(deserialize_with = "size")]
    pub memory_limit: u64,
    /// The most one upload holds in memory at once [default: a quarter of the
    /// memory limit, at least the threshold plus one part]. It also bounds the
    /// part size, so larger uploads than 10,000 times it are refused.
    #[arg(
        id = "engine.upload_memory_share",
        long = "upload-memory-share",
        env = "SLUICE_UPLOAD_MEMORY_SHARE",
        value_name = "SIZE",
        value_parser = size_in(MIN_PART_SIZE, MAX_SETTING)
    )]
    #[serde(
        deserialize_with = "optional_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub upload_memory_share: Option<u64>,
    /// Checksum each part carries and the store verifies (aws cli's name for it).
    #[arg(
        id = "engine.checksum",
        long = "checksum-algorithm",
        env = "SLUICE_CHECKSUM_ALGORITHM",
        value_enum,
        default_value = "crc32c"
    )]
    pub checksum: ChecksumSetting,
}

/// The checksum parts carry, as a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumSetting {
    Crc32c,
    Crc64nvme,
    None,
}

impl ChecksumSetting {
    pub fn algorithm(self) -> Option<ChecksumAlgorithm> {
        match self {
            ChecksumSetting::Crc32c => Some(ChecksumAlgorithm::Crc32c),
            ChecksumSetting::Crc64nvme => Some(ChecksumAlgorithm::Crc64nvme),
            ChecksumSetting::None => None,
        }
    }
}

impl Default for EngineSettings {
    fn default() -> Self {
        defaults()
    }
}

impl ConfigError {
    /// The setting (config key) this error is about, when it is one of
    /// [`EngineSettings`].
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            ConfigError::PartSize(_) => Some("engine.part_size"),
            ConfigError::Threshold(_) => Some("engine.threshold"),
            ConfigError::MemoryLimit { .. } => Some("engine.memory_limit"),
            ConfigError::MemoryShare { .. } => Some("engine.upload_memory_share"),
            _ => None,
        }
    }
}

/// The largest number a setting may hold: what a config file (TOML, signed
/// 64-bit integers) can say.
pub const MAX_SETTING: u64 = i64::MAX as u64;

/// The values a settings struct gets when nothing is given: its definitions'
/// defaults, with no environment variable read.
pub fn defaults<T: Args + FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults").no_binary_name(true))
        .mut_args(|arg| arg.env(None::<&'static str>));
    let matches = command
        .try_get_matches_from(std::iter::empty::<&str>())
        .unwrap_or_else(|e| panic!("a setting's default does not parse: {e}"));
    T::from_arg_matches(&matches).unwrap_or_else(|e| panic!("a setting's default: {e}"))
}

/// A size (`8MiB`, `512KiB`, `1048576`) within `min..=max`, as a value parser.
pub fn size_in(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text| {
        let size = parse_size(text)?;
        if size < min {
            return Err(format!("must be at least {}", format_size(min)));
        }
        if size > max {
            return Err(format!("must be at most {}", format_size(max)));
        }
        Ok(size)
    }
}

/// Accepts `8388608`, `"8MiB"` or `"8 M"` (serde `deserialize_with`).
pub fn size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(deserializer)? {
        Size::Bytes(n) => Ok(n),
        Size::Text(text) => parse_size(&text).map_err(serde::de::Error::custom),
    }
}

/// [`size`], for a setting that may be unset.
pub fn optional_size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    size(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MIB;

    #[test]
    fn the_defaults_are_the_definitions() {
        let settings = EngineSettings::default();
        assert_eq!(settings.part_size, 16 * MIB);
        assert_eq!(settings.threshold, 16 * MIB);
        assert_eq!(settings.memory_limit, 256 * MIB);
        assert_eq!(settings.checksum, ChecksumSetting::Crc32c);
    }

    #[test]
    fn sizes_outside_their_range_are_refused_with_the_range() {
        let part = size_in(MIN_PART_SIZE, MAX_PART_SIZE);
        // (text, accepted)
        let cases = [
            ("5MiB", Some(5 * MIB)),
            ("4MiB", None),
            ("5GiB", Some(5 << 30)),
            ("6GiB", None),
            ("lots", None),
        ];
        for (text, expected) in cases {
            assert_eq!(part(text).ok(), expected, "{text}");
        }
        assert_eq!(part("1MiB").unwrap_err(), "must be at least 5.00 MiB");
    }
}
