//! What the stores that speak HTTP through `reqwest` share (Azure Blob and
//! Google Cloud Storage): request bodies with their CRCs ([`body`]), sending
//! a request watched for stalls ([`watch`]), and the pieces of S3's model
//! both build the same way ([`model`]), and how their URLs escape names and
//! values. The S3 store has the AWS SDK's own.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};

pub(crate) mod body;
pub(crate) mod model;
pub(crate) mod watch;

/// RFC 3986's unreserved characters stay, everything else is escaped: a
/// query value, a path segment (a GCS object in the JSON API), a signed
/// URL's parameters.
pub(crate) const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// [`UNRESERVED`] with `/` kept: a name that spans path segments (an Azure
/// blob, a GCS object in the XML API).
pub(crate) const UNRESERVED_AND_SLASH: &AsciiSet = &UNRESERVED.remove(b'/');
