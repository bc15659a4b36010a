//! What the command line stores with the objects it writes (`--content-type`,
//! `--cache-control`, `--metadata`, `--storage-class`, `--acl`, `--sse`, …),
//! validated once, and the content type of each object: the one given, else
//! one guessed from the file's or key's extension, as aws s3 and s5cmd do.

use sluice_store::{Encryption, Metadata, ObjectSettings};

use crate::args::ObjectArgs;
use crate::many::mtime;
use crate::UsageError;

/// The canned ACLs S3 knows.
const CANNED_ACLS: [&str; 7] = [
    "private",
    "public-read",
    "public-read-write",
    "authenticated-read",
    "aws-exec-read",
    "bucket-owner-read",
    "bucket-owner-full-control",
];

/// The storage classes S3 knows (others' stores take a subset).
const STORAGE_CLASSES: [&str; 11] = [
    "STANDARD",
    "REDUCED_REDUNDANCY",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "GLACIER",
    "DEEP_ARCHIVE",
    "OUTPOSTS",
    "GLACIER_IR",
    "SNOW",
    "EXPRESS_ONEZONE",
];

/// What every object an upload makes is stored with.
#[derive(Debug, Clone, Default)]
pub struct ObjectSpec {
    content_type: Option<String>,
    guess: bool,
    metadata: Metadata,
    settings: ObjectSettings,
}

impl ObjectSpec {
    /// The flags, checked: a metadata entry without `=` or naming sluice's
    /// own `mtime`, an unknown ACL or storage class are usage errors.
    pub fn from_args(args: &ObjectArgs) -> Result<ObjectSpec, UsageError> {
        let mut metadata = Metadata::new();
        for entry in &args.metadata {
            let (key, value) = entry
                .split_once('=')
                .ok_or_else(|| UsageError(format!("--metadata {entry:?}: expected KEY=VALUE")))?;
            let key = key.trim().to_ascii_lowercase();
            let valid = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !valid {
                return Err(UsageError(format!(
                    "--metadata {entry:?}: a key is letters, digits, '-' and '_'"
                )));
            }
            if key == mtime::KEY {
                return Err(UsageError(format!(
                    "--metadata {entry:?}: `{}` holds the file's modification time, which sluice sets itself",
                    mtime::KEY
                )));
            }
            metadata.insert(key, value.to_string());
        }
        let acl = match &args.acl {
            Some(acl) if !CANNED_ACLS.contains(&acl.as_str()) => {
                return Err(UsageError(format!(
                    "--acl {acl:?}: expected one of {}",
                    CANNED_ACLS.join(", ")
                )))
            }
            acl => acl.clone(),
        };
        let storage_class = match &args.storage_class {
            Some(class) => {
                let upper = class.to_ascii_uppercase();
                if !STORAGE_CLASSES.contains(&upper.as_str()) {
                    return Err(UsageError(format!(
                        "--storage-class {class:?}: expected one of {}",
                        STORAGE_CLASSES.join(", ")
                    )));
                }
                Some(upper)
            }
            None => None,
        };
        let encryption = match args.sse.as_deref() {
            None => None,
            Some("AES256") if args.sse_kms_key_id.is_some() => {
                return Err(UsageError(
                    "--sse-kms-key-id names a KMS key: it goes with --sse aws:kms".into(),
                ))
            }
            Some("AES256") => Some(Encryption::S3Managed),
            Some(_) => Some(Encryption::Kms {
                key_id: args.sse_kms_key_id.clone(),
            }),
        };
        Ok(ObjectSpec {
            content_type: args.content_type.clone(),
            guess: !args.no_guess_mime_type,
            metadata,
            settings: ObjectSettings {
                cache_control: args.cache_control.clone(),
                content_encoding: args.content_encoding.clone(),
                content_disposition: args.content_disposition.clone(),
                storage_class,
                acl,
                encryption,
            },
        })
    }

    /// Whether any flag was given.
    pub fn is_given(&self) -> bool {
        self.headers_given() || self.placement() != ObjectSettings::default()
    }

    /// Whether a flag a server-side copy cannot apply was given: the type,
    /// headers or metadata (a copy keeps the source's). SLUICE_CONTENT_TYPE
    /// in the environment is a default for uploads, not a request made of
    /// this command.
    pub fn headers_given(&self) -> bool {
        let from_environment = self.content_type.is_some()
            && std::env::var("SLUICE_CONTENT_TYPE").ok() == self.content_type;
        (self.content_type.is_some() && !from_environment)
            || !self.guess
            || !self.metadata.is_empty()
            || self.settings.cache_control.is_some()
            || self.settings.content_encoding.is_some()
            || self.settings.content_disposition.is_some()
    }

    /// What a copy inside the service can be asked for: storage class, ACL
    /// and encryption.
    pub fn placement(&self) -> ObjectSettings {
        ObjectSettings {
            storage_class: self.settings.storage_class.clone(),
            acl: self.settings.acl.clone(),
            encryption: self.settings.encryption.clone(),
            ..ObjectSettings::default()
        }
    }

    /// Refuses the flags a copy from a bucket cannot apply: to a bucket, the
    /// type, headers and metadata (the source's are kept); to local files, all.
    pub fn check_for_copy(&self, to_bucket: bool) -> Result<(), UsageError> {
        let refused = match to_bucket {
            true => self.headers_given(),
            false => self.is_given(),
        };
        match (refused, to_bucket) {
            (false, _) => Ok(()),
            (true, true) => Err(UsageError(
                "--content-type, --metadata and the header flags apply to uploads (a local source): \
a copy from a bucket keeps the source's (--storage-class, --acl and --sse apply to it)"
                    .into(),
            )),
            (true, false) => Err(UsageError(
                "--content-type, --metadata and the other object settings apply to what is stored in a bucket, \
not to downloaded files"
                    .into(),
            )),
        }
    }

    /// Refuses what a directory store cannot keep, before anything is sent.
    pub fn check_for_directory_store(&self) -> Result<(), UsageError> {
        match self.settings.bucket_only() {
            Some(what) => Err(UsageError(format!(
                "a directory store cannot keep {what}: --storage-class, --acl and --sse are for buckets"
            ))),
            None => Ok(()),
        }
    }

    /// The content type of an object named `name` (a file name or key).
    pub fn content_type_for(&self, name: &str) -> Option<String> {
        if let Some(given) = &self.content_type {
            return Some(given.clone());
        }
        if !self.guess {
            return None;
        }
        mime_guess::from_path(name).first_raw().map(str::to_string)
    }

    /// The user metadata, with `extra` (sluice's own, as `mtime`) added.
    pub fn metadata_with(&self, extra: Metadata) -> Metadata {
        let mut metadata = self.metadata.clone();
        metadata.extend(extra);
        metadata
    }

    pub fn settings(&self) -> &ObjectSettings {
        &self.settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(args: &[&str]) -> Result<ObjectSpec, String> {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            object: ObjectArgs,
        }
        let mut argv = vec!["x"];
        argv.extend_from_slice(args);
        let parsed = Wrapper::try_parse_from(argv).map_err(|e| e.to_string())?;
        ObjectSpec::from_args(&parsed.object).map_err(|e| e.0)
    }

    #[test]
    fn content_types_are_given_or_guessed() {
        // (flags, name, content type)
        let cases: [(&[&str], &str, Option<&str>); 7] = [
            (&[], "site/index.html", Some("text/html")),
            (&[], "a/b/photo.JPG", Some("image/jpeg")),
            (&[], "styles.css", Some("text/css")),
            (&[], "data.unknownext", None),
            (&[], "README", None),
            (
                &["--content-type", "text/plain"],
                "index.html",
                Some("text/plain"),
            ),
            (&["--no-guess-mime-type"], "index.html", None),
        ];
        for (flags, name, want) in cases {
            let spec = spec(flags).unwrap();
            assert_eq!(
                spec.content_type_for(name).as_deref(),
                want,
                "{flags:?} {name}"
            );
        }
    }

    #[test]
    fn flags_are_checked_once() {
        // (flags, error it must contain, or None)
        let cases: [(&[&str], Option<&str>); 9] = [
            (&["--metadata", "owner=ann", "--metadata", "Team=b=c"], None),
            (&["--metadata", "novalue"], Some("KEY=VALUE")),
            (&["--metadata", "bad key=x"], Some("letters, digits")),
            (&["--metadata", "mtime=1"], Some("modification time")),
            (&["--acl", "public-read"], None),
            (&["--acl", "everyone"], Some("expected one of private")),
            (&["--storage-class", "standard_ia"], None),
            (
                &["--storage-class", "COLD"],
                Some("expected one of STANDARD"),
            ),
            (
                &["--sse", "AES256", "--sse-kms-key-id", "k"],
                Some("aws:kms"),
            ),
        ];
        for (flags, error) in cases {
            match (spec(flags), error) {
                (Ok(_), None) => {}
                (Err(e), Some(want)) => assert!(e.contains(want), "{flags:?}: {e}"),
                (got, want) => panic!("{flags:?}: {got:?}, wanted {want:?}"),
            }
        }
        let spec = spec(&["--metadata", "Team=b=c", "--storage-class", "standard_ia"]).unwrap();
        assert_eq!(spec.metadata.get("team").map(String::as_str), Some("b=c"));
        assert_eq!(spec.settings.storage_class.as_deref(), Some("STANDARD_IA"));
    }
}
