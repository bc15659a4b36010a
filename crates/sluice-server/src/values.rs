//! The value parsers settings name in their definitions (`value_parser = …`):
//! each states one rule, with the message a user sees, and applies to a flag,
//! a variable and a config-file value alike (`ServerConfig::validate`).

use std::time::Duration;

pub const SECOND: Duration = Duration::from_secs(1);
pub const HOUR: Duration = Duration::from_secs(3600);

/// A duration (`30s`, `5m`, `1h 30m`) within `min..=max`, as a value parser.
pub fn duration_in(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text| {
        let duration = humantime::parse_duration(text)
            .map_err(|e| format!("not a duration such as 30s, 5m or 1h ({e})"))?;
        if duration < min {
            return Err(match min {
                m if m == Duration::from_millis(1) => "must be above 0".to_owned(),
                m => format!("must be at least {}", human(m)),
            });
        }
        if duration > max {
            return Err(format!("must be at most {}", human(max)));
        }
        Ok(duration)
    }
}

/// `7 days`, `1h`, `100ms`: a bound as a message says it.
fn human(duration: Duration) -> String {
    const DAY: u64 = 24 * 3600;
    let seconds = duration.as_secs();
    match seconds {
        s if s >= DAY && s % DAY == 0 && duration.subsec_nanos() == 0 => {
            format!("{} days", s / DAY)
        }
        _ => humantime::format_duration(duration).to_string(),
    }
}

/// A whole number of at least `min`, as a value parser.
pub fn at_least<T>(min: u64) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<u64>,
{
    move |text| {
        let value: u64 = text
            .trim()
            .parse()
            .map_err(|_| "not a whole number".to_owned())?;
        if value < min {
            return Err(format!("must be at least {min}"));
        }
        if value > sluice_upload::MAX_SETTING {
            return Err(format!("must be at most {}", sluice_upload::MAX_SETTING));
        }
        T::try_from(value).map_err(|_| "too large".to_owned())
    }
}

/// A whole number within `min..=max`, as a value parser.
pub fn count_in<T>(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<u64>,
{
    let at_least = at_least::<T>(min);
    move |text| {
        let value = at_least(text)?;
        match text.trim().parse::<u64>() {
            Ok(n) if n > max => Err(format!("must be at most {max}")),
            _ => Ok(value),
        }
    }
}

/// A switch's value: true/false, yes/no, on/off, 1/0.
pub fn flag_bool() -> clap::builder::BoolishValueParser {
    clap::builder::BoolishValueParser::new()
}

/// A number that is 0 or more.
pub fn non_negative(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value),
        _ => Err("must be 0 (off) or a positive number".into()),
    }
}

/// `s3://bucket[/prefix]` or a directory.
pub fn store_location(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("must name a directory or s3://bucket[/prefix]".into());
    }
    sluice_store::StoreLocation::parse(text).map_err(|e| e.to_string())?;
    Ok(text.to_owned())
}

/// A key template (`{yyyy}/{uuid}/{filename}`).
pub fn key_template(text: &str) -> Result<String, String> {
    crate::keys::KeyTemplate::parse(text)?;
    Ok(text.to_owned())
}

/// A CORS origin: `*` or `http(s)://host[:port]`.
pub fn cors_origin(text: &str) -> Result<String, String> {
    if text != "*" && !(text.starts_with("http://") || text.starts_with("https://")) {
        return Err("each origin must be \"*\" or start with http:// or https://".into());
    }
    if axum::http::HeaderValue::from_str(text).is_err() {
        return Err("an origin must be a valid header value".into());
    }
    Ok(text.to_owned())
}

/// An `http://` or `https://` URL with a host.
pub fn http_url(text: &str) -> Result<String, String> {
    match text.parse::<axum::http::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {
            Ok(text.to_owned())
        }
        _ => Err("must be an http:// or https:// URL".into()),
    }
}

/// An IAM role's ARN: `arn:PARTITION:iam::ACCOUNT:role/NAME` (the account
/// may be empty, as Ceph RGW's roles have it).
pub fn role_arn(text: &str) -> Result<String, String> {
    let parts: Vec<&str> = text.splitn(6, ':').collect();
    match parts.as_slice() {
        ["arn", partition, "iam", "", _account, resource]
            if !partition.is_empty()
                && resource
                    .strip_prefix("role/")
                    .is_some_and(|n| !n.is_empty()) =>
        {
            Ok(text.to_owned())
        }
        _ => Err("must be a role's ARN, arn:aws:iam::ACCOUNT:role/NAME".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_outside_their_range_say_the_range() {
        let lease = duration_in(SECOND, HOUR);
        let week = duration_in(SECOND, 7 * 24 * HOUR);
        // (parser's answer, expected)
        let cases = [
            (lease("30s"), Ok(30 * SECOND)),
            (lease("0s"), Err("must be at least 1s")),
            (lease("2h"), Err("must be at most 1h")),
            (week("8d"), Err("must be at most 7 days")),
            (lease("soon"), Err("not a duration")),
        ];
        for (answer, expected) in cases {
            match (answer, expected) {
                (Ok(got), Ok(want)) => assert_eq!(got, want),
                (Err(got), Err(want)) => assert!(got.starts_with(want), "{got}"),
                (got, want) => panic!("{got:?} instead of {want:?}"),
            }
        }
        assert_eq!(at_least::<usize>(1)("0"), Err("must be at least 1".into()));
        assert_eq!(
            count_in::<usize>(1, 1024)("2000"),
            Err("must be at most 1024".into())
        );
        assert_eq!(count_in::<usize>(1, 1024)("8"), Ok(8));
    }

    #[test]
    fn role_arns_are_iam_roles() {
        // (text, accepted)
        let cases = [
            ("arn:aws:iam::123456789012:role/uploads", true),
            ("arn:aws-cn:iam::123456789012:role/path/uploads", true),
            ("arn:aws:iam:::role/uploads", true),
            ("arn:aws:iam::123456789012:user/someone", false),
            ("arn:aws:s3:::bucket", false),
            ("arn:aws:iam::123456789012:role/", false),
            ("uploads", false),
        ];
        for (text, accepted) in cases {
            assert_eq!(role_arn(text).is_ok(), accepted, "{text}");
        }
    }
}
