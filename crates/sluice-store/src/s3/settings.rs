//! [`ObjectSettings`] on the wire: the request fields that set them on
//! PutObject and CreateMultipartUpload, and the answer fields of GetObject and
//! HeadObject that report them (the ACL is never reported). Macros, because
//! the SDK's builders and outputs share these method names but no trait.

use aws_sdk_s3::types::ServerSideEncryption;

use crate::types::Encryption;

/// Sets `settings` on a PutObject or CreateMultipartUpload call.
macro_rules! with_settings {
    ($call:expr, $settings:expr) => {{
        let settings: $crate::types::ObjectSettings = $settings;
        let (encryption, kms_key) = $crate::s3::settings::encryption_fields(settings.encryption);
        $call
            .set_cache_control(settings.cache_control)
            .set_content_encoding(settings.content_encoding)
            .set_content_disposition(settings.content_disposition)
            .set_storage_class(
                settings
                    .storage_class
                    .map(|c| aws_sdk_s3::types::StorageClass::from(c.as_str())),
            )
            .set_acl(
                settings
                    .acl
                    .map(|a| aws_sdk_s3::types::ObjectCannedAcl::from(a.as_str())),
            )
            .set_server_side_encryption(encryption)
            .set_ssekms_key_id(kms_key)
    }};
}

/// The settings a GetObject or HeadObject answer reports.
macro_rules! settings_of {
    ($output:expr) => {{
        let output = &$output;
        $crate::types::ObjectSettings {
            cache_control: output.cache_control.clone(),
            content_encoding: output.content_encoding.clone(),
            content_disposition: output.content_disposition.clone(),
            storage_class: output
                .storage_class
                .as_ref()
                .map(|c| c.as_str().to_string()),
            acl: None,
            encryption: $crate::s3::settings::encryption_of(
                output.server_side_encryption.as_ref(),
                output.ssekms_key_id.as_deref(),
            ),
        }
    }};
}

pub(super) use {settings_of, with_settings};

/// The request's `x-amz-server-side-encryption` and KMS key id.
pub(crate) fn encryption_fields(
    encryption: Option<Encryption>,
) -> (Option<ServerSideEncryption>, Option<String>) {
    match encryption {
        None => (None, None),
        Some(Encryption::S3Managed) => (Some(ServerSideEncryption::Aes256), None),
        Some(Encryption::Kms { key_id }) => (Some(ServerSideEncryption::AwsKms), key_id),
    }
}

/// The encryption an answer reports.
pub(crate) fn encryption_of(
    sse: Option<&ServerSideEncryption>,
    key_id: Option<&str>,
) -> Option<Encryption> {
    match sse? {
        ServerSideEncryption::Aes256 => Some(Encryption::S3Managed),
        ServerSideEncryption::AwsKms | ServerSideEncryption::AwsKmsDsse => Some(Encryption::Kms {
            key_id: key_id.map(str::to_string),
        }),
        _ => None,
    }
}
