//! The upload record and the rules of the protocol over it: what a PATCH may carry
//! at the current offset, when an upload is complete or expired, and the headers a
//! HEAD answers with.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use crate::headers::{self, PatchRequest};
use crate::metadata::Metadata;
use crate::TusError;

/// The upload's role in a concatenation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "parts")]
pub enum Concat {
    #[default]
    None,
    Partial,
    /// The ids of the partial uploads, in order.
    Final(Vec<String>),
}

/// One upload as the protocol sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upload {
    pub id: String,
    /// None until a deferred length is set.
    pub length: Option<u64>,
    pub offset: u64,
    #[serde(default)]
    pub metadata: Metadata,
    #[serde(default)]
    pub concat: Concat,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// Seconds since the Unix epoch after which an unfinished upload is gone.
    pub expires: u64,
}

fn unix(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// What a PATCH that passed the checks may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchPlan {
    /// The upload's length after this request (None while still deferred).
    pub length: Option<u64>,
    /// The most body bytes the request may carry; more is 413.
    pub max_body: u64,
}

impl Upload {
    pub fn new(
        id: String,
        length: Option<u64>,
        metadata: Metadata,
        concat: Concat,
        now: SystemTime,
        lifetime: Duration,
    ) -> Upload {
        Upload {
            id,
            length,
            offset: 0,
            metadata,
            concat,
            created: unix(now),
            expires: unix(now + lifetime),
        }
    }

    pub fn is_complete(&self) -> bool {
        self.length == Some(self.offset)
    }

    /// Unfinished and past its expiry.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        !self.is_complete() && unix(now) >= self.expires
    }

    /// Pushes the expiry to `lifetime` from now (after each successful PATCH).
    pub fn extend(&mut self, now: SystemTime, lifetime: Duration) {
        self.expires = unix(now + lifetime);
    }

    /// Checks a PATCH against the record; `max_size` is the largest upload accepted.
    pub fn check_patch(
        &self,
        patch: &PatchRequest,
        now: SystemTime,
        max_size: u64,
    ) -> Result<PatchPlan, TusError> {
        if matches!(self.concat, Concat::Final(_)) {
            return Err(TusError::FinalUploadPatched);
        }
        if self.is_expired(now) {
            return Err(TusError::Gone);
        }
        if patch.offset != self.offset {
            return Err(TusError::OffsetMismatch {
                expected: self.offset,
                given: patch.offset,
            });
        }
        let length = match (self.length, patch.length) {
            (Some(current), Some(new)) if current != new => return Err(TusError::LengthAlreadySet),
            (Some(current), _) => Some(current),
            (None, Some(new)) if new > max_size => {
                return Err(TusError::TooLarge { max: max_size })
            }
            (None, Some(new)) if new < self.offset => {
                return Err(TusError::InvalidHeader {
                    header: "Upload-Length",
                    reason: format!("{new} is below the upload's offset {}", self.offset),
                })
            }
            (None, new) => new,
        };
        let max_body = length.unwrap_or(max_size).saturating_sub(self.offset);
        Ok(PatchPlan { length, max_body })
    }

    /// The headers of a PATCH answer: the new offset and, while unfinished, the expiry.
    pub fn patch_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        let mut out = vec![
            headers::resumable(),
            (headers::UPLOAD_OFFSET, HeaderValue::from(self.offset)),
        ];
        if !self.is_complete() {
            out.push((headers::UPLOAD_EXPIRES, self.expires_header()));
        }
        out
    }

    /// The headers of a HEAD answer (and of the creation answer); a final
    /// upload names its partial uploads as URLs under `base` (such as `/v1/tus/`).
    pub fn head_headers(&self, base: &str) -> Vec<(HeaderName, HeaderValue)> {
        let mut out = vec![headers::resumable()];
        let final_unfinished = matches!(self.concat, Concat::Final(_)) && !self.is_complete();
        if !final_unfinished {
            out.push((headers::UPLOAD_OFFSET, HeaderValue::from(self.offset)));
        }
        match self.length {
            Some(length) => out.push((headers::UPLOAD_LENGTH, HeaderValue::from(length))),
            None => out.push((headers::UPLOAD_DEFER_LENGTH, HeaderValue::from_static("1"))),
        }
        if !self.metadata.0.is_empty() {
            if let Ok(value) = HeaderValue::from_str(&self.metadata.encode()) {
                out.push((headers::UPLOAD_METADATA, value));
            }
        }
        if !self.is_complete() {
            out.push((headers::UPLOAD_EXPIRES, self.expires_header()));
        }
        match &self.concat {
            Concat::None => {}
            Concat::Partial => {
                out.push((headers::UPLOAD_CONCAT, HeaderValue::from_static("partial")))
            }
            Concat::Final(ids) => {
                let urls: Vec<String> = ids.iter().map(|id| format!("{base}{id}")).collect();
                if let Ok(value) = HeaderValue::from_str(&format!("final;{}", urls.join(" "))) {
                    out.push((headers::UPLOAD_CONCAT, value));
                }
            }
        }
        out.push((
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ));
        out
    }

    /// `Upload-Expires` as an HTTP date.
    pub fn expires_header(&self) -> HeaderValue {
        let at = UNIX_EPOCH + Duration::from_secs(self.expires);
        HeaderValue::from_str(&httpdate::fmt_http_date(at))
            .expect("an HTTP date is a valid header value")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upload(length: Option<u64>, offset: u64) -> Upload {
        let mut u = Upload::new(
            "id".into(),
            length,
            Metadata::default(),
            Concat::None,
            UNIX_EPOCH + Duration::from_secs(1000),
            Duration::from_secs(100),
        );
        u.offset = offset;
        u
    }

    fn patch(offset: u64, length: Option<u64>) -> PatchRequest {
        PatchRequest {
            offset,
            body_length: None,
            length,
            checksum: None,
        }
    }

    #[test]
    fn patch_rules_table() {
        let now = UNIX_EPOCH + Duration::from_secs(1050);
        let later = UNIX_EPOCH + Duration::from_secs(1100);
        // (upload, request, when, Ok((length, max_body)) or Err(code))
        type Case = (
            Upload,
            PatchRequest,
            SystemTime,
            Result<(Option<u64>, u64), &'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                upload(Some(100), 0),
                patch(0, None),
                now,
                Ok((Some(100), 100)),
            ),
            // A deferred length at an offset past the largest upload (found by
            // fuzzing: the room left overflowed): no room, no panic.
            (upload(None, 1500), patch(1500, None), now, Ok((None, 0))),
            (
                upload(Some(100), 40),
                patch(40, None),
                now,
                Ok((Some(100), 60)),
            ),
            (
                upload(Some(100), 40),
                patch(40, Some(100)),
                now,
                Ok((Some(100), 60)),
            ),
            (
                upload(Some(100), 40),
                patch(0, None),
                now,
                Err("offset_mismatch"),
            ),
            (
                upload(Some(100), 40),
                patch(50, None),
                now,
                Err("offset_mismatch"),
            ),
            (
                upload(Some(100), 40),
                patch(40, Some(90)),
                now,
                Err("length_already_set"),
            ),
            (upload(None, 40), patch(40, None), now, Ok((None, 960))),
            (
                upload(None, 40),
                patch(40, Some(70)),
                now,
                Ok((Some(70), 30)),
            ),
            (
                upload(None, 40),
                patch(40, Some(30)),
                now,
                Err("invalid_header"),
            ),
            (
                upload(None, 40),
                patch(40, Some(5000)),
                now,
                Err("too_large"),
            ),
            (
                upload(Some(100), 40),
                patch(40, None),
                later,
                Err("upload_gone"),
            ),
            (
                upload(Some(100), 100),
                patch(100, None),
                later,
                Ok((Some(100), 0)),
            ),
        ];
        for (u, p, when, expected) in cases {
            let got = u.check_patch(&p, when, 1000);
            match (got, expected) {
                (Ok(plan), Ok((length, max_body))) => assert_eq!(
                    (plan.length, plan.max_body),
                    (length, max_body),
                    "{u:?} {p:?}"
                ),
                (Err(e), Err(code)) => assert_eq!(e.code(), code, "{u:?} {p:?}"),
                (got, expected) => panic!("{u:?} {p:?}: {got:?} vs {expected:?}"),
            }
        }
        let mut final_upload = upload(None, 0);
        final_upload.concat = Concat::Final(vec!["a".into()]);
        assert_eq!(
            final_upload
                .check_patch(&patch(0, None), now, 1000)
                .unwrap_err()
                .code(),
            "final_upload_patched"
        );
    }

    #[test]
    fn head_headers_show_offset_length_and_expiry() {
        let names = |u: &Upload| {
            u.head_headers("/files/")
                .into_iter()
                .map(|(n, v)| format!("{n}: {}", v.to_str().unwrap()))
                .collect::<Vec<_>>()
        };
        let u = upload(Some(100), 40);
        assert_eq!(
            names(&u),
            [
                "tus-resumable: 1.0.0",
                "upload-offset: 40",
                "upload-length: 100",
                "upload-expires: Thu, 01 Jan 1970 00:18:20 GMT",
                "cache-control: no-store"
            ]
        );
        let done = upload(Some(100), 100);
        assert!(!names(&done).iter().any(|h| h.starts_with("upload-expires")));
        let deferred = upload(None, 0);
        assert!(names(&deferred).contains(&"upload-defer-length: 1".to_string()));
        let mut joined = upload(Some(100), 100);
        joined.concat = Concat::Final(vec!["a".into(), "b".into()]);
        assert!(names(&joined).contains(&"upload-concat: final;/files/a /files/b".to_string()));
    }

    #[test]
    fn record_round_trips_through_json() {
        let mut u = upload(Some(7), 3);
        u.metadata = Metadata::parse("filename aGkudHh0").unwrap();
        u.concat = Concat::Final(vec!["a".into(), "b".into()]);
        let json = serde_json::to_string(&u).unwrap();
        assert_eq!(serde_json::from_str::<Upload>(&json).unwrap(), u);
    }
}
