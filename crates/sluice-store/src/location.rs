//! Where objects live, as written by a person: `s3://bucket[/prefix]`,
//! `az://container[/prefix]`, `gs://bucket[/prefix]` or a local directory
//! path. Parsing only; opening
//! a store from a location is the caller's job.

use std::fmt;
use std::path::PathBuf;

/// The object service a bucket location names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// `s3://`: AWS S3 and every S3-compatible server.
    S3,
    /// `az://`: an Azure Blob Storage container (the account from the
    /// environment or a connection string).
    Azure,
    /// `gs://`: a Google Cloud Storage bucket (its JSON API).
    Gcs,
}

impl Service {
    /// The URL scheme, without `://`.
    pub fn scheme(self) -> &'static str {
        match self {
            Service::S3 => "s3",
            Service::Azure => "az",
            Service::Gcs => "gs",
        }
    }

    /// What the service calls a bucket, for messages.
    pub fn bucket_word(self) -> &'static str {
        match self {
            Service::S3 | Service::Gcs => "bucket",
            Service::Azure => "container",
        }
    }
}

/// A parsed store location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// `s3://bucket/rest`, `az://container/rest` or `gs://bucket/rest`:
    /// `rest` is a key or a key prefix, without a leading `/`.
    Bucket {
        service: Service,
        bucket: String,
        rest: String,
    },
    /// A local path (also accepted as `file://path`).
    Local(PathBuf),
}

/// Why a location string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    #[error("{0:?} has no bucket name (expected s3://bucket/key, az://container/key or gs://bucket/key)")]
    MissingBucket(String),
    #[error("bucket name {0:?} is not valid (3-63 characters: a-z, 0-9, '.', '-')")]
    InvalidBucket(String),
    #[error(
        "container name {0:?} is not valid (3-63 characters: a-z, 0-9 and single '-' between them)"
    )]
    InvalidContainer(String),
    #[error("bucket name {0:?} is not valid on Google Cloud Storage (3-63 characters: a-z, 0-9, '-', '_', '.', a letter or digit at each end)")]
    InvalidGcsBucket(String),
    #[error("unsupported scheme in {0:?} (expected s3://bucket/key, az://container/key, gs://bucket/key or a local path)")]
    UnsupportedScheme(String),
    /// `s3:/b/k`, `s3//b/k`, `S3://b/k`: an S3 URL mistyped, never a path.
    #[error(
        "{given:?} looks like a mistyped S3 URL: write {meant:?} (or ./{given} for a local path)"
    )]
    MistypedS3 { given: String, meant: String },
    #[error("empty location")]
    Empty,
}

impl StoreLocation {
    pub fn parse(text: &str) -> Result<StoreLocation, LocationError> {
        if text.is_empty() {
            return Err(LocationError::Empty);
        }
        for service in [Service::S3, Service::Azure, Service::Gcs] {
            let Some(rest) = text
                .strip_prefix(service.scheme())
                .and_then(|r| r.strip_prefix("://"))
            else {
                continue;
            };
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(LocationError::MissingBucket(text.to_string()));
            }
            match service {
                Service::S3 if !valid_bucket(bucket) => {
                    return Err(LocationError::InvalidBucket(bucket.to_string()))
                }
                Service::Azure if !valid_container(bucket) => {
                    return Err(LocationError::InvalidContainer(bucket.to_string()))
                }
                Service::Gcs if !valid_gcs_bucket(bucket) => {
                    return Err(LocationError::InvalidGcsBucket(bucket.to_string()))
                }
                _ => {}
            }
            return Ok(StoreLocation::Bucket {
                service,
                bucket: bucket.to_string(),
                rest: key.to_string(),
            });
        }
        if let Some(path) = text.strip_prefix("file://") {
            return Ok(StoreLocation::Local(PathBuf::from(path)));
        }
        if let Some(meant) = mistyped_s3(text) {
            return Err(LocationError::MistypedS3 {
                given: text.to_string(),
                meant,
            });
        }
        // `wasb://b/k`, `http:/x`: a URL scheme (letters first, then letters,
        // digits, `+ - .`) before the first `/`.
        if let Some((scheme, _)) = text.split_once(':') {
            let scheme_like = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            if scheme_like {
                return Err(LocationError::UnsupportedScheme(text.to_string()));
            }
        }
        Ok(StoreLocation::Local(PathBuf::from(text)))
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Bucket {
                service,
                bucket,
                rest,
            } => write!(f, "{}://{bucket}/{rest}", service.scheme()),
            StoreLocation::Local(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The S3 URL a mistyped one meant (`s3:/b/k`, `s3:b/k`, `s3//b/k`,
/// `S3://b/k`), if `text` is one.
fn mistyped_s3(text: &str) -> Option<String> {
    let rest = match text.get(..3) {
        Some(head) if head.eq_ignore_ascii_case("s3:") => &text[3..],
        Some(head) if head.eq_ignore_ascii_case("s3/") && text[3..].starts_with('/') => &text[3..],
        _ => return None,
    };
    let rest = rest.trim_start_matches('/');
    Some(match rest {
        "" => "s3://BUCKET/KEY".to_string(),
        rest => format!("s3://{rest}"),
    })
}

/// Bucket naming rules that hold on AWS and everywhere else (lower case, no `_`).
fn valid_bucket(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

/// Azure's container names: lower-case letters, digits and single hyphens
/// between them.
fn valid_container(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
        && !name.contains("--")
}

/// GCS's bucket names: lower-case letters, digits, `-`, `_` and `.`, a
/// letter or digit at each end (names with dots may be longer, up to 222).
fn valid_gcs_bucket(name: &str) -> bool {
    let longest = if name.contains('.') { 222 } else { 63 };
    (3..=longest).contains(&name.len())
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_' || b == b'.'
        })
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mistyped(given: &str, meant: &str) -> Result<StoreLocation, LocationError> {
        Err(LocationError::MistypedS3 {
            given: given.into(),
            meant: meant.into(),
        })
    }

    #[test]
    fn parse_table() {
        let bucket = |service, b: &str, r: &str| {
            Ok(StoreLocation::Bucket {
                service,
                bucket: b.into(),
                rest: r.into(),
            })
        };
        let s3 = |b: &str, r: &str| bucket(Service::S3, b, r);
        let az = |b: &str, r: &str| bucket(Service::Azure, b, r);
        let gs = |b: &str, r: &str| bucket(Service::Gcs, b, r);
        let cases: Vec<(&str, Result<StoreLocation, LocationError>)> = vec![
            ("s3://bucket/key", s3("bucket", "key")),
            ("s3://bucket/a/b/c.bin", s3("bucket", "a/b/c.bin")),
            ("s3://bucket", s3("bucket", "")),
            ("s3://bucket/", s3("bucket", "")),
            (
                "s3:///key",
                Err(LocationError::MissingBucket("s3:///key".into())),
            ),
            (
                "s3://Bad_Bucket/k",
                Err(LocationError::InvalidBucket("Bad_Bucket".into())),
            ),
            (
                "wasb://b/k",
                Err(LocationError::UnsupportedScheme("wasb://b/k".into())),
            ),
            ("gs://my_bucket/a/b.bin", gs("my_bucket", "a/b.bin")),
            ("gs://bucket", gs("bucket", "")),
            (
                "gs://Bucket/k",
                Err(LocationError::InvalidGcsBucket("Bucket".into())),
            ),
            (
                "gs://_b_/k",
                Err(LocationError::InvalidGcsBucket("_b_".into())),
            ),
            ("az://uploads/in/a.bin", az("uploads", "in/a.bin")),
            ("az://uploads", az("uploads", "")),
            (
                "az://Up_Loads/k",
                Err(LocationError::InvalidContainer("Up_Loads".into())),
            ),
            (
                "az://a--b/k",
                Err(LocationError::InvalidContainer("a--b".into())),
            ),
            (
                "az://my.bucket/k",
                Err(LocationError::InvalidContainer("my.bucket".into())),
            ),
            (
                "az:///k",
                Err(LocationError::MissingBucket("az:///k".into())),
            ),
            (
                "./data/file.bin",
                Ok(StoreLocation::Local("./data/file.bin".into())),
            ),
            ("file:///srv/x", Ok(StoreLocation::Local("/srv/x".into()))),
            ("", Err(LocationError::Empty)),
            // Mistyped S3 URLs are not local paths (issue 36, point 2).
            (
                "s3:/media/x.html",
                mistyped("s3:/media/x.html", "s3://media/x.html"),
            ),
            (
                "s3//media/x.html",
                mistyped("s3//media/x.html", "s3://media/x.html"),
            ),
            (
                "s3:media/x.html",
                mistyped("s3:media/x.html", "s3://media/x.html"),
            ),
            (
                "S3://media/x.html",
                mistyped("S3://media/x.html", "s3://media/x.html"),
            ),
            ("s3:/uploads", mistyped("s3:/uploads", "s3://uploads")),
            ("s3:", mistyped("s3:", "s3://BUCKET/KEY")),
            (
                "http:/host/x",
                Err(LocationError::UnsupportedScheme("http:/host/x".into())),
            ),
            // What clearly is a path stays one.
            (
                "./s3:/media/x",
                Ok(StoreLocation::Local("./s3:/media/x".into())),
            ),
            ("s3-data/x", Ok(StoreLocation::Local("s3-data/x".into()))),
            ("s3/x", Ok(StoreLocation::Local("s3/x".into()))),
            ("/tmp/a:b", Ok(StoreLocation::Local("/tmp/a:b".into()))),
        ];
        for (text, expected) in cases {
            assert_eq!(StoreLocation::parse(text), expected, "{text}");
        }
    }
}
