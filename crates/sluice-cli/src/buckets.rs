//! `sluice mb`, `sluice rb` and `sluice ls` of buckets: making and removing a
//! bucket or a directory store, and listing the account's buckets; `mb` also
//! makes Azure containers.

use std::path::Path;

use anyhow::Context;
use sluice_store::fs::{FsConfig, FsStore, INTERNAL_DIR};
use sluice_store::s3::S3Store;
use sluice_store::{error_chain, ObjectStore, StoreError, StoreLocation};

use crate::args::{MbArgs, RbArgs, StoreArgs};
use crate::UsageError;

/// A bucket named on the command line, an Azure container, or a local directory.
enum Place {
    Bucket(String),
    Container(String),
    /// A Google Cloud Storage bucket.
    GcsBucket(String),
    Directory(std::path::PathBuf),
}

fn place(location: &str) -> Result<Place, UsageError> {
    match StoreLocation::parse(location).map_err(|e| UsageError(e.to_string()))? {
        StoreLocation::Bucket {
            service: sluice_store::Service::S3,
            bucket,
            rest,
        } if rest.is_empty() || rest == "/" => Ok(Place::Bucket(bucket)),
        StoreLocation::Bucket {
            service: sluice_store::Service::S3,
            bucket,
            ..
        } => Err(UsageError(format!(
            "{location} names a key or prefix: a bucket is s3://{bucket}"
        ))),
        StoreLocation::Bucket {
            service: sluice_store::Service::Azure,
            bucket,
            rest,
        } if rest.is_empty() || rest == "/" => Ok(Place::Container(bucket)),
        StoreLocation::Bucket {
            service: sluice_store::Service::Azure,
            bucket,
            ..
        } => Err(UsageError(format!(
            "{location} names a key or prefix: a container is az://{bucket}"
        ))),
        StoreLocation::Bucket {
            service: sluice_store::Service::Gcs,
            bucket,
            rest,
        } if rest.is_empty() || rest == "/" => Ok(Place::GcsBucket(bucket)),
        StoreLocation::Bucket { bucket, .. } => Err(UsageError(format!(
            "{location} names a key or prefix: a bucket is gs://{bucket}"
        ))),
        StoreLocation::Local(path) => Ok(Place::Directory(path)),
    }
}

async fn bucket(name: &str, store: &StoreArgs) -> S3Store {
    crate::target::connect_s3(
        name.to_string(),
        String::new(),
        store,
        Some(sluice_store::s3::S3Config::DEFAULT_STALL_TIMEOUT),
    )
    .await
}

/// An S3 error code as a sentence about `bucket`, where one is known.
fn explained(bucket: &str, error: &StoreError) -> Option<String> {
    let StoreError::Service { code, .. } = error else {
        return match error {
            StoreError::NoSuchBucket { .. } => Some(format!("s3://{bucket} does not exist")),
            _ => None,
        };
    };
    Some(match code.as_str() {
        "BucketAlreadyOwnedByYou" => format!("s3://{bucket} already exists (it is yours)"),
        "BucketAlreadyExists" => {
            format!("s3://{bucket} already exists and belongs to someone else: bucket names are global")
        }
        "BucketNotEmpty" => format!(
            "s3://{bucket} is not empty: remove its objects first (sluice rm s3://{bucket}/), or use --force"
        ),
        "InvalidBucketName" => format!(
            "{bucket:?} is not a valid bucket name (3-63 characters: lowercase letters, digits, '.' and '-')"
        ),
        _ => return None,
    })
}

fn failed(bucket: &str, doing: &str, error: StoreError) -> anyhow::Error {
    match explained(bucket, &error) {
        Some(sentence) => anyhow::anyhow!("{sentence}"),
        None => anyhow::anyhow!("cannot {doing} s3://{bucket}: {}", error_chain(&error)),
    }
}

pub async fn make(args: MbArgs) -> anyhow::Result<()> {
    let place = place(&args.location)?;
    if args.dry_run {
        let what = match &place {
            Place::Bucket(name) => format!("bucket s3://{name}"),
            Place::Container(name) => format!("container az://{name}"),
            Place::GcsBucket(name) => format!("bucket gs://{name}"),
            Place::Directory(path) => format!("directory store {}", path.display()),
        };
        crate::output::out!("dry run: would make {what}; nothing changed");
        return Ok(());
    }
    match place {
        Place::Bucket(name) => {
            bucket(&name, &args.store)
                .await
                .create_bucket()
                .await
                .map_err(|e| failed(&name, "make", e))?;
            crate::output::out!("made bucket s3://{name}");
        }
        Place::Container(name) => {
            let container = crate::azure::connect(name.clone(), String::new(), &args.store, None)?;
            container.create_container().await.map_err(|e| match e {
                StoreError::Service { status: 409, .. } => {
                    anyhow::anyhow!("az://{name} already exists")
                }
                e => anyhow::anyhow!("cannot make az://{name}: {}", error_chain(&e)),
            })?;
            crate::output::out!("made container az://{name}");
        }
        Place::GcsBucket(name) => {
            let credential = crate::gcs::credential(&args.store)?;
            let project = crate::gcs::project(&credential);
            // Google makes a bucket in a project; an emulator needs none.
            if project.is_none()
                && crate::gcs::endpoint(&args.store) == sluice_store::gcs::DEFAULT_ENDPOINT
            {
                return Err(UsageError(format!(
                    "mb gs://{name}: which project? Set GOOGLE_CLOUD_PROJECT (the key file names none)"
                ))
                .into());
            }
            let bucket = crate::gcs::connect(name.clone(), String::new(), &args.store, None)?;
            bucket
                .create_bucket(project.as_deref())
                .await
                .map_err(|e| match e {
                    StoreError::Service { status: 409, .. } => {
                        anyhow::anyhow!("gs://{name} already exists (bucket names are global)")
                    }
                    e => anyhow::anyhow!("cannot make gs://{name}: {}", error_chain(&e)),
                })?;
            crate::output::out!("made bucket gs://{name}");
        }
        Place::Directory(path) => {
            if path.join(INTERNAL_DIR).is_dir() {
                return Err(anyhow::anyhow!(
                    "{} is already a directory store",
                    path.display()
                ));
            }
            // A store inside another splits their bookkeeping: an object
            // written through one loses its metadata read through the other.
            if let Some((outer, _)) = crate::target::enclosing_store(&path)? {
                return Err(UsageError(format!(
                    "{} lies in the directory store {}: use a prefix of it",
                    path.display(),
                    outer.display()
                ))
                .into());
            }
            FsStore::create(FsConfig::new(&path))
                .with_context(|| format!("cannot make a directory store at {}", path.display()))?;
            crate::output::out!("made directory store {}", path.display());
        }
    }
    Ok(())
}

pub async fn remove(args: RbArgs) -> anyhow::Result<()> {
    match place(&args.location)? {
        Place::Bucket(name) => remove_bucket(&name, &args).await,
        Place::Container(name) => Err(UsageError(format!(
            "rb of az://{name}: delete containers with the Azure CLI or portal (Azure keeps a deleted container's name for a while)"
        ))
        .into()),
        Place::GcsBucket(name) => Err(UsageError(format!(
            "rb of gs://{name}: delete buckets with gcloud or the console (sluice does not delete GCS buckets)"
        ))
        .into()),
        Place::Directory(path) => remove_directory_store(&path, &args),
    }
}

async fn remove_bucket(name: &str, args: &RbArgs) -> anyhow::Result<()> {
    let store = bucket(name, &args.store).await;
    if args.force {
        let uploads = store
            .list_multipart_uploads("")
            .await
            .map_err(|e| failed(name, "list the unfinished uploads of", e))?;
        if args.dry_run {
            let objects = count_objects(&store)
                .await
                .map_err(|e| failed(name, "list", e))?;
            crate::output::out!(
                "dry run: s3://{name} would be removed with {} and {}; nothing changed",
                crate::output::count(objects, "object"),
                crate::output::count(uploads.len() as u64, "unfinished upload")
            );
            return Ok(());
        }
        let removed = remove_every_object(&store)
            .await
            .map_err(|e| failed(name, "empty", e))?;
        crate::output::out!("deleted {}", crate::output::count(removed, "object"));
        for upload in uploads {
            store
                .abort_multipart_upload(&upload.key, &upload.upload_id)
                .await
                .or_else(|e| match e {
                    StoreError::NoSuchUpload { .. } => Ok(()),
                    e => Err(e),
                })
                .map_err(|e| failed(name, "abort an unfinished upload of", e))?;
        }
    } else if args.dry_run {
        let objects = count_objects(&store)
            .await
            .map_err(|e| failed(name, "list", e))?;
        match objects {
            0 => crate::output::out!("dry run: s3://{name} would be removed; nothing changed"),
            n => crate::output::out!(
                "dry run: s3://{name} holds {}: it would not be removed without --force",
                crate::output::count(n, "object")
            ),
        };
        return Ok(());
    }
    store
        .delete_bucket()
        .await
        .map_err(|e| failed(name, "remove", e))?;
    crate::output::out!("removed bucket s3://{name}");
    Ok(())
}

/// Every key of the bucket removed, 1,000 per request, whatever it is
/// (folder markers ending in `/` and `_sluice/` state included, which
/// transfers leave alone): what `rb --force` needs before DeleteBucket.
async fn remove_every_object(store: &S3Store) -> Result<u64, StoreError> {
    let mut removed = 0;
    loop {
        // Each page is listed from the start: what was removed is gone.
        let page = store.list_objects("", None, 1000).await?;
        if page.objects.is_empty() {
            return Ok(removed);
        }
        let keys: Vec<String> = page.objects.into_iter().map(|o| o.key).collect();
        let failures = store.delete_objects(&keys).await?;
        if let Some(failure) = failures.first() {
            return Err(StoreError::Service {
                status: 0,
                code: "DeleteFailed".into(),
                message: format!("{}: {}", failure.key, failure.reason),
            });
        }
        removed += keys.len() as u64;
    }
}

/// Objects in the bucket (whole pages; for a dry run).
async fn count_objects(store: &S3Store) -> Result<u64, StoreError> {
    let mut cursor = None;
    let mut count = 0;
    loop {
        let page = store.list_objects("", cursor.as_deref(), 1000).await?;
        count += page.objects.len() as u64;
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(count),
        }
    }
}

/// A directory store is removed only when it is one (it holds `.sluice/`);
/// without --force only when it holds nothing but its bookkeeping.
fn remove_directory_store(path: &Path, args: &RbArgs) -> anyhow::Result<()> {
    refuse_where_you_stand(path)?;
    if !crate::target::is_store_root(path) {
        return Err(UsageError(format!(
            "{} is not a directory store (no {INTERNAL_DIR}/ in it): rb removes only stores",
            path.display()
        ))
        .into());
    }
    let files = files_outside_bookkeeping(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if args.dry_run {
        crate::output::out!(
            "dry run: {} ({}) would {}; nothing changed",
            path.display(),
            crate::output::count(files, "file"),
            match files == 0 || args.force {
                true => "be removed",
                false => "not be removed without --force",
            }
        );
        return Ok(());
    }
    if files > 0 && !args.force {
        return Err(anyhow::anyhow!(
            "{} is not empty ({}): remove its objects first, or use --force",
            path.display(),
            crate::output::count(files, "file")
        ));
    }
    std::fs::remove_dir_all(path).with_context(|| format!("cannot remove {}", path.display()))?;
    crate::output::out!("removed directory store {}", path.display());
    Ok(())
}

/// Refuses to remove the working directory, a directory above it, or the
/// home directory (or one above it): a stray `.sluice/` there, left by an
/// older release, must not make `rb --force .` remove a user's files.
fn refuse_where_you_stand(path: &Path) -> Result<(), UsageError> {
    let full =
        std::fs::canonicalize(path).map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    let places = [
        std::env::current_dir().ok(),
        std::env::var_os("HOME").map(std::path::PathBuf::from),
    ];
    for place in places.into_iter().flatten() {
        let place = std::fs::canonicalize(&place).unwrap_or(place);
        if place.starts_with(&full) {
            return Err(UsageError(format!(
                "{} holds {}: rb does not remove the working or home directory, or one above them",
                path.display(),
                place.display()
            )));
        }
    }
    Ok(())
}

/// Files under `root`, not counting `.sluice/` directories.
fn files_outside_bookkeeping(root: &Path) -> std::io::Result<u64> {
    let mut count = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if entry.file_name() != INTERNAL_DIR {
                    stack.push(entry.path());
                }
            } else {
                count += 1;
            }
        }
    }
    Ok(count)
}

/// `sluice ls` with no location, or `s3://`: the account's buckets.
pub async fn list(store: &StoreArgs, json: bool) -> anyhow::Result<()> {
    // The bucket name is unused by ListBuckets.
    let account = bucket("-", store).await;
    let buckets = account
        .list_buckets()
        .await
        .map_err(|e| anyhow::anyhow!("cannot list the buckets: {}", error_chain(&e)))?;
    for bucket in &buckets {
        let created = crate::output::rfc3339(bucket.created);
        let shown = crate::output::listing_time(bucket.created);
        let written = match json {
            true => crate::output::out!(
                "{}",
                serde_json::json!({ "bucket": bucket.name, "created": created })
            ),
            false => crate::output::out!("{shown}  s3://{}", bucket.name),
        };
        if !written {
            return Ok(()); // the reader went away
        }
    }
    if buckets.is_empty() && !json {
        eprintln!("sluice: no buckets");
    }
    Ok(())
}
