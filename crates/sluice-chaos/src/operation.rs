//! Which S3 operation a request is, read from a path-style request line:
//! `/{bucket}/{key}?{query}` and the method (plus `x-amz-copy-source`).

use http::{HeaderMap, Method};
use serde::{Deserialize, Serialize};

/// The S3 operations the proxy tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    PutObject,
    CopyObject,
    GetObject,
    HeadObject,
    DeleteObject,
    CreateMultipartUpload,
    UploadPart,
    UploadPartCopy,
    CompleteMultipartUpload,
    AbortMultipartUpload,
    ListParts,
    ListObjects,
    ListMultipartUploads,
    /// Requests on the bucket itself (create, head, lifecycle, ...).
    Bucket,
}

impl Operation {
    pub const ALL: [Operation; 14] = [
        Operation::PutObject,
        Operation::CopyObject,
        Operation::GetObject,
        Operation::HeadObject,
        Operation::DeleteObject,
        Operation::CreateMultipartUpload,
        Operation::UploadPart,
        Operation::UploadPartCopy,
        Operation::CompleteMultipartUpload,
        Operation::AbortMultipartUpload,
        Operation::ListParts,
        Operation::ListObjects,
        Operation::ListMultipartUploads,
        Operation::Bucket,
    ];

    /// The kebab-case name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Operation::PutObject => "put-object",
            Operation::CopyObject => "copy-object",
            Operation::GetObject => "get-object",
            Operation::HeadObject => "head-object",
            Operation::DeleteObject => "delete-object",
            Operation::CreateMultipartUpload => "create-multipart-upload",
            Operation::UploadPart => "upload-part",
            Operation::UploadPartCopy => "upload-part-copy",
            Operation::CompleteMultipartUpload => "complete-multipart-upload",
            Operation::AbortMultipartUpload => "abort-multipart-upload",
            Operation::ListParts => "list-parts",
            Operation::ListObjects => "list-objects",
            Operation::ListMultipartUploads => "list-multipart-uploads",
            Operation::Bucket => "bucket",
        }
    }

    pub fn parse(name: &str) -> Option<Operation> {
        Operation::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Writes S3 rate-limits per prefix (PUT, COPY, POST, DELETE: 3,500/s).
    pub fn is_write(self) -> bool {
        !matches!(
            self,
            Operation::GetObject
                | Operation::HeadObject
                | Operation::ListParts
                | Operation::ListObjects
                | Operation::ListMultipartUploads
                | Operation::Bucket
        )
    }
}

/// A classified request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Request {
    pub operation: Operation,
    pub bucket: String,
    pub key: String,
}

impl S3Request {
    /// The rate-limit partition: the bucket and the key's first `depth` segments.
    pub fn prefix(&self, depth: usize) -> String {
        let mut prefix = self.bucket.clone();
        for segment in self.key.split('/').take(depth) {
            prefix.push('/');
            prefix.push_str(segment);
        }
        prefix
    }
}

/// Classifies a path-style S3 request.
pub fn classify(
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> S3Request {
    let path = path.trim_start_matches('/');
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    let params: Vec<&str> = query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').map_or(p, |(name, _)| name))
        .collect();
    let has = |name: &str| params.contains(&name);
    let copy = headers.contains_key("x-amz-copy-source");
    let operation = if key.is_empty() {
        if *method == Method::GET && has("uploads") {
            Operation::ListMultipartUploads
        } else if *method == Method::GET
            && params
                .iter()
                .all(|p| !matches!(*p, "lifecycle" | "location" | "versioning" | "policy"))
        {
            Operation::ListObjects
        } else {
            Operation::Bucket
        }
    } else {
        match *method {
            Method::PUT if has("uploadId") && copy => Operation::UploadPartCopy,
            Method::PUT if has("uploadId") => Operation::UploadPart,
            Method::PUT if copy => Operation::CopyObject,
            Method::PUT => Operation::PutObject,
            Method::POST if has("uploads") => Operation::CreateMultipartUpload,
            Method::POST if has("uploadId") => Operation::CompleteMultipartUpload,
            Method::DELETE if has("uploadId") => Operation::AbortMultipartUpload,
            Method::DELETE => Operation::DeleteObject,
            Method::GET if has("uploadId") => Operation::ListParts,
            Method::HEAD => Operation::HeadObject,
            _ => Operation::GetObject,
        }
    };
    S3Request {
        operation,
        bucket: bucket.to_string(),
        key: key.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_table() {
        let copy: HeaderMap = [(
            http::header::HeaderName::from_static("x-amz-copy-source"),
            http::HeaderValue::from_static("b/src"),
        )]
        .into_iter()
        .collect();
        let none = HeaderMap::new();
        let cases: Vec<(Method, &str, Option<&str>, &HeaderMap, Operation)> = vec![
            (Method::PUT, "/b/k", None, &none, Operation::PutObject),
            (
                Method::PUT,
                "/b/a/k",
                Some("x-id=PutObject"),
                &none,
                Operation::PutObject,
            ),
            (Method::PUT, "/b/k", None, &copy, Operation::CopyObject),
            (Method::GET, "/b/k", None, &none, Operation::GetObject),
            (Method::HEAD, "/b/k", None, &none, Operation::HeadObject),
            (Method::DELETE, "/b/k", None, &none, Operation::DeleteObject),
            (
                Method::POST,
                "/b/k",
                Some("uploads"),
                &none,
                Operation::CreateMultipartUpload,
            ),
            (
                Method::PUT,
                "/b/k",
                Some("partNumber=2&uploadId=x"),
                &none,
                Operation::UploadPart,
            ),
            (
                Method::PUT,
                "/b/k",
                Some("partNumber=2&uploadId=x"),
                &copy,
                Operation::UploadPartCopy,
            ),
            (
                Method::POST,
                "/b/k",
                Some("uploadId=x"),
                &none,
                Operation::CompleteMultipartUpload,
            ),
            (
                Method::DELETE,
                "/b/k",
                Some("uploadId=x"),
                &none,
                Operation::AbortMultipartUpload,
            ),
            (
                Method::GET,
                "/b/k",
                Some("uploadId=x"),
                &none,
                Operation::ListParts,
            ),
            (
                Method::GET,
                "/b",
                Some("list-type=2&prefix=a"),
                &none,
                Operation::ListObjects,
            ),
            (
                Method::GET,
                "/b",
                Some("uploads&prefix=a"),
                &none,
                Operation::ListMultipartUploads,
            ),
            (
                Method::GET,
                "/b",
                Some("lifecycle"),
                &none,
                Operation::Bucket,
            ),
            (Method::PUT, "/b", None, &none, Operation::Bucket),
            (Method::HEAD, "/b", None, &none, Operation::Bucket),
        ];
        for (method, path, query, headers, expected) in cases {
            let request = classify(&method, path, query, headers);
            assert_eq!(request.operation, expected, "{method} {path}?{query:?}");
        }
    }

    #[test]
    fn prefixes_by_depth() {
        let request = classify(&Method::PUT, "/b/shard-3/t/x", None, &HeaderMap::new());
        assert_eq!(request.prefix(0), "b");
        assert_eq!(request.prefix(1), "b/shard-3");
        assert_eq!(request.prefix(2), "b/shard-3/t");
    }

    #[test]
    fn names_round_trip() {
        for op in Operation::ALL {
            assert_eq!(Operation::parse(op.name()), Some(op));
        }
    }
}
