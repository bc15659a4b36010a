//! The commands that read without transferring to a file: `cat` (an object
//! to standard output), `stat` (what HEAD says of it), `du` (sizes under a
//! prefix) and `presign` (a URL that lets someone else read or write it).

use anyhow::Context;
use futures::StreamExt;
use serde_json::json;
use sluice_store::{error_chain, Encryption, PresignedMethod, Service, StoreError, StoreLocation};
use sluice_upload::format_size;

use crate::args::{CatArgs, DuArgs, PresignArgs, StatArgs};
use crate::many::{self, filter::Filter, Side};
use crate::target::{self, Intent};
use crate::UsageError;

/// `sluice cat`: the object's bytes, checked against its stored CRC, and nothing else.
pub async fn cat(args: CatArgs) -> anyhow::Result<()> {
    let target = target::for_get(&args.location, &args.transfer.reach()).await?;
    let engine = crate::batch::engine(target.store.clone(), crate::engine_config(&args.transfer)?)?;
    let transfer = engine.download_to_writer(&target.key, tokio::io::stdout(), None);
    crate::interruptible(&engine, transfer)
        .await?
        .map_err(|error| missing_or(error, &target.display))?;
    Ok(())
}

/// A missing object named as such; other failures with their cause.
fn missing_or(error: sluice_upload::TransferError, shown: &str) -> anyhow::Error {
    match &error {
        sluice_upload::TransferError::Store {
            source: StoreError::NoSuchKey { .. },
            ..
        } => anyhow::anyhow!("{shown}: no such object"),
        _ => anyhow::Error::new(error).context(format!("cannot read {shown}")),
    }
}

/// `sluice stat`.
pub async fn stat(args: StatArgs) -> anyhow::Result<()> {
    let target = target::for_get(&args.location, &args.store).await?;
    let meta = target
        .store
        .head_object(&target.key)
        .await
        .map_err(|e| match e {
            StoreError::NoSuchKey { .. } => anyhow::anyhow!("{}: no such object", target.display),
            e => anyhow::anyhow!("{}: {}", target.display, error_chain(&e)),
        })?;
    let modified = crate::output::rfc3339(meta.last_modified);
    let encryption = meta.settings.encryption.as_ref().map(|e| match e {
        Encryption::S3Managed => "AES256".to_string(),
        Encryption::Kms { key_id: None } => "aws:kms".to_string(),
        Encryption::Kms { key_id: Some(id) } => format!("aws:kms ({id})"),
    });
    let checksum = meta.checksum.map(|c| c.to_string());
    if args.json {
        let line = json!({
            "location": target.display,
            "size": meta.size,
            "etag": meta.etag,
            "last_modified": modified,
            "content_type": meta.content_type,
            "cache_control": meta.settings.cache_control,
            "content_encoding": meta.settings.content_encoding,
            "content_disposition": meta.settings.content_disposition,
            "storage_class": meta.settings.storage_class,
            "encryption": encryption,
            "checksum": checksum,
            "metadata": meta.metadata,
        });
        crate::output::out!("{line}");
        return Ok(());
    }
    let size = format!("{} ({} bytes)", format_size(meta.size), meta.size);
    let rows: [(&str, Option<&str>); 11] = [
        ("Name", Some(&target.display)),
        ("Size", Some(&size)),
        ("Last modified", Some(&modified)),
        ("ETag", Some(&meta.etag)),
        ("Content-Type", meta.content_type.as_deref()),
        ("Cache-Control", meta.settings.cache_control.as_deref()),
        (
            "Content-Encoding",
            meta.settings.content_encoding.as_deref(),
        ),
        (
            "Content-Disposition",
            meta.settings.content_disposition.as_deref(),
        ),
        ("Storage class", meta.settings.storage_class.as_deref()),
        ("Encryption", encryption.as_deref()),
        ("Checksum", checksum.as_deref()),
    ];
    for (name, value) in rows {
        if let Some(value) = value {
            crate::output::out!("{name:<20} {value}");
        }
    }
    for (key, value) in &meta.metadata {
        crate::output::out!("{:<20} {value}", format!("Metadata {key}"));
    }
    Ok(())
}

/// `sluice du`.
pub async fn du(args: DuArgs) -> anyhow::Result<()> {
    let wildcard = crate::wildcard::Wildcard::split(&args.location);
    let filter = Filter::new(&args.include, &args.exclude)?.matching(wildcard.as_ref())?;
    let location = wildcard.as_ref().map_or(&args.location, |w| &w.base);
    let prefix = Side::open_store(location, Intent::Read, &args.store).await?;
    let engine =
        crate::batch::engine(prefix.store.clone(), sluice_upload::EngineConfig::default())?;
    let mut listing = Box::pin(many::listing(&prefix, &engine, filter).await?);
    let (mut objects, mut bytes) = (0u64, 0u64);
    while let Some(object) = listing.next().await {
        let object = object?;
        objects += 1;
        bytes += object.size;
    }
    if args.json {
        crate::output::out!(
            "{}",
            json!({ "location": prefix.display, "objects": objects, "bytes": bytes })
        );
        return Ok(());
    }
    let size = match args.exact {
        true => format!("{bytes} B"),
        false => format_size(bytes),
    };
    crate::output::out!(
        "{size} in {}  {}",
        crate::output::count(objects, "object"),
        prefix.display
    );
    Ok(())
}

/// `sluice presign`.
pub async fn presign(args: PresignArgs) -> anyhow::Result<()> {
    let (service, bucket, key) = match StoreLocation::parse(&args.location)
        .map_err(|e| UsageError(e.to_string()))?
    {
        StoreLocation::Bucket {
            service,
            bucket,
            rest,
        } if !rest.is_empty() && !rest.ends_with('/') => (service, bucket, rest),
        StoreLocation::Bucket { .. } => {
            return Err(UsageError(format!(
                "{} names no object (expected s3://bucket/key, az://container/blob or gs://bucket/object)",
                args.location
            ))
            .into())
        }
        StoreLocation::Local(_) => return Err(UsageError(
            "presigned URLs are for buckets; for a gateway on a directory store, see `sluice sign`"
                .into(),
        )
        .into()),
    };
    if args.expires > sluice_store::presign::MAX_PRESIGN_EXPIRY || args.expires.is_zero() {
        return Err(UsageError(format!(
            "--expires {}: a presigned URL lasts from 1 second to 7 days (the limit of S3's and GCS's signatures, kept on Azure too)",
            humantime::format_duration(args.expires)
        ))
        .into());
    }
    let method = match args.method.to_ascii_uppercase().as_str() {
        "PUT" => PresignedMethod::Put,
        "DELETE" => PresignedMethod::Delete,
        _ => PresignedMethod::Get,
    };
    let location = format!("{}://{bucket}/{key}", service.scheme());
    // No key to sign with: what to set is the person's to fix.
    let refused = |e: StoreError, set: &str| match e {
        StoreError::Unsupported(what) => anyhow::Error::from(UsageError(format!(
            "cannot presign {location}: {what}; {set}"
        ))),
        other => anyhow::Error::from(other).context(format!("cannot presign {location}")),
    };
    let url = if service == Service::Azure {
        let store = crate::azure::connect(bucket.clone(), String::new(), &args.store, None)?;
        store.presign(method, &key, args.expires).map_err(|e| {
            refused(
                e,
                "set AZURE_STORAGE_KEY or an AccountKey in AZURE_STORAGE_CONNECTION_STRING",
            )
        })?
    } else if service == Service::Gcs {
        let store = crate::gcs::connect(bucket.clone(), String::new(), &args.store, None)?;
        store.presign(method, &key, args.expires).map_err(|e| {
            refused(
                e,
                "set GOOGLE_APPLICATION_CREDENTIALS to a service account's key file",
            )
        })?
    } else {
        let store = target::connect_s3(bucket.clone(), String::new(), &args.store, None).await;
        store
            .presign(method, &key, args.expires)
            .await
            .with_context(|| format!("cannot presign s3://{bucket}/{key}"))?
    };
    crate::output::out!("{url}");
    Ok(())
}
