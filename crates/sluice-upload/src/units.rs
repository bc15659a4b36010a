//! Byte sizes as people write them on a command line or in a config file: `8MiB`, `8M`, `1.5GiB`,
//! `5000000`, `10MB` (SI units are powers of 1000, binary ones of 1024).

/// Parses a size; used as a clap value parser.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (examples: 8MiB, 512KiB, 1GiB, 1048576)"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(format!(
            "unknown size unit {other:?} in {text:?} (use KiB, MiB, GiB, TiB, KB, MB, GB or TB)"
        ))
        }
    };
    let bytes = number * multiplier as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// `1.50 GiB`, `12.0 MiB`, `512 B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let cases: Vec<(&str, Option<u64>)> = vec![
            ("0", Some(0)),
            ("1048576", Some(1 << 20)),
            ("8MiB", Some(8 << 20)),
            ("8M", Some(8 << 20)),
            ("8 mib", Some(8 << 20)),
            ("1.5GiB", Some(3 << 29)),
            ("10MB", Some(10_000_000)),
            ("5GiB", Some(5 << 30)),
            ("", None),
            ("MiB", None),
            ("8XB", None),
            ("-1", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_size(text).ok(), expected, "{text:?}");
        }
    }

    #[test]
    fn format_table() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(1 << 30), "1.00 GiB");
    }
}
