//! What a load run does, checked before anything is sent: the target (a URL and the
//! API spoken there), the load model, the object size and the bounds of the run.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use serde::Serialize;

use crate::BenchError;

/// The largest object a run uploads: the payload is generated once and held in memory.
pub const MAX_OBJECT_SIZE: u64 = 1 << 30;
/// The most simultaneous users or in-flight uploads (each is an open socket).
const MAX_CONCURRENCY: usize = 100_000;
/// The longest run.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// The upload API the target speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// sluice's `PUT {url}/{key}` with the raw body.
    Put,
    /// A browser form: `POST {url}` with one file in multipart/form-data.
    Form,
    /// tus 1.0 creation-with-upload: `POST {url}` carrying the whole body, then
    /// `PATCH` for whatever the server did not take in the creation request.
    Tus,
    /// The IETF resumable-upload draft (interop 6, the newest tusd serves):
    /// an optimistic creation `POST {url}` with the whole body
    /// (`Upload-Complete: ?1`), or with a chunk size a careful one (`?0`, no
    /// body) and `PATCH`es of `application/partial-upload`, the last `?1`.
    Draft,
    /// A record stream: `POST {url}` with NDJSON records of about 1 KiB each,
    /// the object size's worth of them (distinct records; the same body for a
    /// given upload number).
    Records,
    /// Straight to an S3 endpoint, one PutObject per object (no retries).
    S3Put,
    /// Straight to an S3 endpoint, a multipart upload per object (engine defaults:
    /// 16 MiB parts, 8 in flight; no retries).
    S3Multipart,
}

impl Api {
    pub fn is_s3(self) -> bool {
        matches!(self, Api::S3Put | Api::S3Multipart)
    }
}

/// An S3 bucket (and key prefix) to load directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Target {
    pub bucket: String,
    pub prefix: String,
    pub endpoint: Option<String>,
    pub region: Option<String>,
}

/// Where the load goes.
#[derive(Debug, Clone)]
pub struct Target {
    pub api: Api,
    /// The URL as given.
    pub url: String,
    /// The address connected to.
    pub addr: SocketAddr,
    /// The `Host` header.
    pub authority: String,
    /// The path requests go to (without a trailing `/` for [`Api::Put`]).
    pub path: String,
    /// For the S3 APIs: where the objects go.
    pub s3: Option<S3Target>,
}

impl Target {
    /// Parses an `http://host[:port]/path` URL and resolves it; refuses addresses
    /// outside loopback unless `allow_remote`.
    pub fn parse(url: &str, api: Api, allow_remote: bool) -> Result<Target, BenchError> {
        let invalid = |reason: &str| BenchError::InvalidTarget {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: http::Uri = url.parse().map_err(|_| invalid("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(invalid("https is not supported yet; use http")),
            _ => return Err(invalid("expected http://host[:port]/path")),
        }
        let authority = uri
            .authority()
            .ok_or_else(|| invalid("no host"))?
            .as_str()
            .to_owned();
        if authority.contains('@') {
            return Err(invalid("credentials in the URL are not supported"));
        }
        let host = uri.host().ok_or_else(|| invalid("no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(80);
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| invalid(&format!("cannot resolve the host: {e}")))?
            .collect();
        let addr = *addrs
            .first()
            .ok_or_else(|| invalid("the host resolves to no address"))?;
        if !allow_remote {
            if let Some(remote) = addrs.iter().find(|a| !a.ip().is_loopback()) {
                return Err(BenchError::RemoteTarget {
                    url: url.to_owned(),
                    addr: *remote,
                });
            }
        }
        let mut path = uri.path().to_owned();
        if uri.query().is_some() {
            return Err(invalid("a query string is not supported"));
        }
        if api == Api::Put {
            while path.ends_with('/') {
                path.pop();
            }
        }
        if path.is_empty() {
            path.push('/');
        }
        Ok(Target {
            api,
            url: url.to_owned(),
            addr,
            authority,
            path,
            s3: None,
        })
    }

    /// An `s3://bucket[/prefix]` target for the S3 APIs. Without an endpoint it is
    /// AWS, which is remote; an endpoint must resolve to loopback unless `allow_remote`.
    pub fn s3(
        url: &str,
        api: Api,
        endpoint: Option<&str>,
        region: Option<&str>,
        allow_remote: bool,
    ) -> Result<Target, BenchError> {
        let invalid = |reason: &str| BenchError::InvalidTarget {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        if !api.is_s3() {
            return Err(invalid(
                "an s3:// target needs --api s3-put or s3-multipart",
            ));
        }
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| invalid("expected s3://bucket[/prefix]"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(invalid("no bucket"));
        }
        let mut target = match endpoint {
            Some(endpoint) => Target::parse(endpoint, Api::Put, allow_remote).map_err(|e| match e {
                BenchError::InvalidTarget { reason, .. } => invalid(&format!("the endpoint: {reason}")),
                other => other,
            })?,
            None if allow_remote => Target {
                api,
                url: url.to_owned(),
                addr: std::net::SocketAddr::from(([0, 0, 0, 0], 443)),
                authority: String::new(),
                path: String::new(),
                s3: None,
            },
            None => {
                return Err(invalid(
                    "without --endpoint this is AWS S3, outside loopback; pass --allow-remote to load it",
                ))
            }
        };
        target.api = api;
        target.url = url.to_owned();
        target.s3 = Some(S3Target {
            bucket: bucket.to_owned(),
            prefix: prefix.trim_end_matches('/').to_owned(),
            endpoint: endpoint.map(str::to_owned),
            region: region.map(str::to_owned),
        });
        Ok(target)
    }
}

/// How upload keys (put) or tenants (form, tus) are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "count")]
pub enum KeyScheme {
    /// `PREFIX/RUN/NUMBER`: every key under one prefix.
    Common,
    /// `PREFIX/tenant-T/RUN/NUMBER` for T in 0..n (form and tus: `x-sluice-tenant: tenant-T`).
    Tenants(u32),
    /// `HHHH/PREFIX/RUN/NUMBER`: a hashed shard out of n as the first segment, where
    /// stores partition and the gateway's `shard_prefix` puts it (put and the S3 APIs).
    Shards(u32),
}

impl KeyScheme {
    /// Parses `common`, `tenants:N` or `shards:N`.
    pub fn parse(text: &str) -> Result<KeyScheme, String> {
        let (kind, given) = match text.split_once(':') {
            Some((kind, count)) => (kind, Some(count)),
            None => (text, None),
        };
        let count = || -> Result<u32, String> {
            let n: u32 = given
                .ok_or_else(|| format!("{kind} needs a count, like {kind}:16"))?
                .parse()
                .map_err(|_| format!("{text:?}: the count is not a number"))?;
            if n == 0 || n > 65_536 {
                return Err(format!("{text:?}: the count must be 1 to 65536"));
            }
            Ok(n)
        };
        match kind {
            "common" if given.is_none() => Ok(KeyScheme::Common),
            "tenants" => Ok(KeyScheme::Tenants(count()?)),
            "shards" => Ok(KeyScheme::Shards(count()?)),
            _ => Err(format!(
                "unknown key scheme {text:?} (common, tenants:N or shards:N)"
            )),
        }
    }
}

/// When a closed-model user stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this many uploads each.
    Iterations(u64),
    /// Starting no new upload after this long.
    Duration(Duration),
}

/// How load is offered.
#[derive(Debug, Clone, PartialEq)]
pub enum Model {
    /// `users` simultaneous users, each uploading one object after another; user `i`
    /// starts at `ramp * i / users` (all at once with a zero ramp).
    Closed {
        users: usize,
        ramp: Duration,
        stop: Stop,
    },
    /// Uploads start at `rate` per second for `duration`, whatever the response times.
    /// An arrival that finds `max_in_flight` uploads running is not started and is
    /// counted as such.
    Open {
        rate: f64,
        max_in_flight: usize,
        duration: Duration,
    },
}

/// One load run.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    pub target: Target,
    pub model: Model,
    /// Bytes per object (the largest, when sizes are drawn from a range).
    pub object_size: u64,
    /// Draw each object's size log-uniformly from this to `object_size`.
    pub min_object_size: Option<u64>,
    /// Keys (for [`Api::Put`]) start with this; see [`KeyScheme`].
    pub key_prefix: String,
    pub key_scheme: KeyScheme,
    /// How often one upload is retried after a 503 with Retry-After.
    pub retries_after_503: u32,
    /// Longest time one HTTP exchange may take.
    pub request_timeout: Duration,
    /// tus: create without a body, then PATCH chunks of this many bytes (None: the
    /// whole object in the creation request).
    pub chunk_size: Option<u64>,
}

impl LoadPlan {
    /// Checks that the run is bounded and its numbers make sense.
    pub fn validate(&self) -> Result<(), BenchError> {
        let invalid = |m: String| Err(BenchError::InvalidPlan(m));
        if let Some(min) = self.min_object_size {
            if min == 0 || min > self.object_size {
                return invalid(format!(
                    "a size range needs 1 <= min <= max, not {min}..{}",
                    self.object_size
                ));
            }
        }
        if self.object_size > MAX_OBJECT_SIZE {
            return invalid(format!(
                "object size {} is over the limit of 1 GiB (the payload is held in memory)",
                self.object_size
            ));
        }
        if self.request_timeout.is_zero() {
            return invalid("the request timeout must be above zero".into());
        }
        if self.key_prefix.is_empty()
            || self.key_prefix.starts_with('/')
            || self.key_prefix.ends_with('/')
        {
            return invalid(format!(
                "key prefix {:?} must be non-empty without a leading or trailing '/'",
                self.key_prefix
            ));
        }
        if matches!(self.key_scheme, KeyScheme::Shards(_))
            && !matches!(self.target.api, Api::Put | Api::S3Put | Api::S3Multipart)
        {
            return invalid(
                "hashed shard prefixes apply to put keys; form and tus keys come from the server's template".into(),
            );
        }
        match self.chunk_size {
            Some(_) if !matches!(self.target.api, Api::Tus | Api::Draft) => {
                return invalid("a chunk size applies only to the tus and draft APIs".into())
            }
            Some(0) => return invalid("the chunk size must be at least 1 byte".into()),
            _ => {}
        }
        match &self.model {
            Model::Closed { users, ramp, stop } => {
                if *users == 0 || *users > MAX_CONCURRENCY {
                    return invalid(format!("users must be 1 to {MAX_CONCURRENCY}, not {users}"));
                }
                if *ramp > MAX_DURATION {
                    return invalid("the ramp is longer than 24 h".into());
                }
                match stop {
                    Stop::Iterations(0) => return invalid("iterations must be at least 1".into()),
                    Stop::Duration(d) if d.is_zero() || *d > MAX_DURATION => {
                        return invalid("the duration must be above zero and at most 24 h".into())
                    }
                    _ => {}
                }
            }
            Model::Open {
                rate,
                max_in_flight,
                duration,
            } => {
                if !(rate.is_finite() && *rate > 0.0 && *rate <= 1_000_000.0) {
                    return invalid(format!(
                        "the rate must be above 0 and at most 1,000,000/s, not {rate}"
                    ));
                }
                if *max_in_flight == 0 || *max_in_flight > MAX_CONCURRENCY {
                    return invalid(format!(
                        "max in flight must be 1 to {MAX_CONCURRENCY}, not {max_in_flight}"
                    ));
                }
                if duration.is_zero() || *duration > MAX_DURATION {
                    return invalid("the duration must be above zero and at most 24 h".into());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_table() {
        // (url, api, allow_remote, Ok(path) or the start of the error)
        let cases: Vec<(&str, Api, bool, Result<&str, &str>)> = vec![
            (
                "http://127.0.0.1:8080/v1/objects",
                Api::Put,
                false,
                Ok("/v1/objects"),
            ),
            (
                "http://127.0.0.1:8080/v1/objects/",
                Api::Put,
                false,
                Ok("/v1/objects"),
            ),
            (
                "http://localhost:1080/files/",
                Api::Tus,
                false,
                Ok("/files/"),
            ),
            (
                "http://[::1]:8080/v1/objects",
                Api::Form,
                false,
                Ok("/v1/objects"),
            ),
            ("http://127.0.0.1:8080", Api::Form, false, Ok("/")),
            (
                "https://127.0.0.1/v1/objects",
                Api::Put,
                false,
                Err("invalid target URL"),
            ),
            (
                "ftp://127.0.0.1/x",
                Api::Put,
                false,
                Err("invalid target URL"),
            ),
            (
                "127.0.0.1:8080/v1",
                Api::Put,
                false,
                Err("invalid target URL"),
            ),
            (
                "http://u:p@127.0.0.1/v1",
                Api::Put,
                false,
                Err("invalid target URL"),
            ),
            (
                "http://127.0.0.1/v1?x=1",
                Api::Put,
                false,
                Err("invalid target URL"),
            ),
            ("http://192.0.2.1:8080/v1", Api::Put, false, Err("target")),
            ("http://192.0.2.1:8080/v1", Api::Put, true, Ok("/v1")),
        ];
        for (url, api, allow_remote, expected) in cases {
            let got = Target::parse(url, api, allow_remote);
            match (got, expected) {
                (Ok(target), Ok(path)) => assert_eq!(target.path, path, "{url}"),
                (Err(error), Err(start)) => {
                    assert!(error.to_string().starts_with(start), "{url}: {error}")
                }
                (got, expected) => panic!("{url}: got {got:?}, expected {expected:?}"),
            }
        }
        let s3 = Target::s3(
            "s3://bucket/some/prefix/",
            Api::S3Put,
            Some("http://127.0.0.1:9000"),
            None,
            false,
        )
        .unwrap();
        assert_eq!(
            s3.s3
                .as_ref()
                .map(|t| (t.bucket.as_str(), t.prefix.as_str())),
            Some(("bucket", "some/prefix"))
        );
        assert!(
            Target::s3("s3://bucket", Api::S3Put, None, None, false).is_err(),
            "AWS needs --allow-remote"
        );
        assert!(Target::s3("s3://bucket", Api::S3Put, None, None, true).is_ok());
        assert!(Target::s3(
            "s3://bucket",
            Api::S3Put,
            Some("http://192.0.2.1:9000"),
            None,
            false
        )
        .is_err());
        assert!(Target::s3(
            "s3://",
            Api::S3Put,
            Some("http://127.0.0.1:9000"),
            None,
            false
        )
        .is_err());
        assert!(Target::s3(
            "s3://bucket",
            Api::Put,
            Some("http://127.0.0.1:9000"),
            None,
            false
        )
        .is_err());
        let remote = Target::parse("http://192.0.2.1:8080/v1", Api::Put, false).unwrap_err();
        assert!(remote.to_string().contains("--allow-remote"), "{remote}");
    }

    fn plan(model: Model) -> LoadPlan {
        LoadPlan {
            target: Target::parse("http://127.0.0.1:1/v1/objects", Api::Put, false).unwrap(),
            model,
            object_size: 10 << 10,
            min_object_size: None,
            key_prefix: "bench".into(),
            key_scheme: KeyScheme::Common,
            retries_after_503: 3,
            request_timeout: Duration::from_secs(60),
            chunk_size: None,
        }
    }

    #[test]
    fn key_scheme_table() {
        let cases = [
            ("common", Some(KeyScheme::Common)),
            ("tenants:8", Some(KeyScheme::Tenants(8))),
            ("shards:64", Some(KeyScheme::Shards(64))),
            ("shards", None),
            ("shards:0", None),
            ("shards:x", None),
            ("common:3", None),
            ("random", None),
        ];
        for (text, expected) in cases {
            assert_eq!(KeyScheme::parse(text).ok(), expected, "{text}");
        }
    }

    #[test]
    fn plan_bounds_table() {
        let secs = Duration::from_secs;
        let closed = |users, stop| Model::Closed {
            users,
            ramp: Duration::ZERO,
            stop,
        };
        let open = |rate, max_in_flight, duration| Model::Open {
            rate,
            max_in_flight,
            duration,
        };
        let cases: Vec<(Model, bool)> = vec![
            (closed(1, Stop::Iterations(1)), true),
            (closed(10_000, Stop::Duration(secs(30))), true),
            (closed(0, Stop::Iterations(1)), false),
            (closed(200_000, Stop::Iterations(1)), false),
            (closed(1, Stop::Iterations(0)), false),
            (closed(1, Stop::Duration(Duration::ZERO)), false),
            (closed(1, Stop::Duration(secs(25 * 3600))), false),
            (open(2000.0, 10_000, secs(30)), true),
            (open(0.0, 10, secs(30)), false),
            (open(f64::NAN, 10, secs(30)), false),
            (open(10.0, 0, secs(30)), false),
            (open(10.0, 10, Duration::ZERO), false),
        ];
        for (model, ok) in cases {
            assert_eq!(plan(model.clone()).validate().is_ok(), ok, "{model:?}");
        }
        let mut big = plan(closed(1, Stop::Iterations(1)));
        big.object_size = MAX_OBJECT_SIZE + 1;
        assert!(big.validate().is_err());
        let mut chunked = plan(closed(1, Stop::Iterations(1)));
        chunked.chunk_size = Some(1 << 20);
        assert!(chunked.validate().is_err(), "chunks with put");
        for prefix in ["", "/a", "a/"] {
            let mut p = plan(closed(1, Stop::Iterations(1)));
            p.key_prefix = prefix.into();
            assert!(p.validate().is_err(), "{prefix:?}");
        }
    }
}
