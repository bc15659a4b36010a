//! What the stores that speak HTTP through `reqwest` share (Azure Blob and
//! Google Cloud Storage): request bodies with their CRCs ([`body`]), sending
//! a request watched for stalls ([`watch`]), and the pieces of S3's model
//! both build the same way ([`model`]). The S3 store has the AWS SDK's own.

pub(crate) mod body;
pub(crate) mod model;
pub(crate) mod watch;
