//! How events are signed (the scheme of Stripe's webhooks): the header
//! `Sluice-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
//! A receiver recomputes the HMAC over the timestamp, a dot and the raw body,
//! compares in constant time, and refuses timestamps too far from its clock
//! (replays). docs/EVENTS.md has a verifier in a few lines.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

pub const HEADER: &str = "sluice-signature";

fn mac(secret: &[u8], timestamp: u64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The header value signing `body` at `timestamp`.
pub fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let signature = hex::encode(mac(secret, timestamp, body).finalize().into_bytes());
    format!("t={timestamp},v1={signature}")
}

/// Whether `header` signs `body` with `secret` at a time within `tolerance_s`
/// of `now_s`.
/// Whether a received request (its headers and raw body) carries a valid
/// `Sluice-Signature` made with `secret` within `tolerance_s` of now: what a
/// receiver (or a test's) checks before anything else.
pub fn verify_request(
    secret: &[u8],
    headers: &http::HeaderMap,
    body: &[u8],
    tolerance_s: u64,
) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    headers
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|h| verify(secret, h, body, now, tolerance_s))
}

pub fn verify(secret: &[u8], header: &str, body: &[u8], now_s: u64, tolerance_s: u64) -> bool {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = t.parse::<u64>().ok(),
            Some(("v1", v)) => signatures.extend(hex::decode(v).ok()),
            _ => {}
        }
    }
    let Some(timestamp) = timestamp else {
        return false;
    };
    if now_s.abs_diff(timestamp) > tolerance_s {
        return false;
    }
    signatures
        .iter()
        .any(|s| mac(secret, timestamp, body).verify_slice(s).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_only_as_made() {
        let secret = b"a secret of thirty-two bytes or more!";
        let header = sign(secret, 1_000, b"{\"id\":1}");
        // (secret, header, body, now, verifies)
        type Case<'a> = (&'a [u8], String, &'a [u8], u64, bool);
        let cases: [Case; 6] = [
            (secret, header.clone(), b"{\"id\":1}", 1_000, true),
            (secret, header.clone(), b"{\"id\":1}", 1_299, true),
            (secret, header.clone(), b"{\"id\":1}", 1_301, false),
            (secret, header.clone(), b"{\"id\":2}", 1_000, false),
            (
                b"another secret",
                header.clone(),
                b"{\"id\":1}",
                1_000,
                false,
            ),
            (
                secret,
                header.replace("t=1000", "t=1001"),
                b"{\"id\":1}",
                1_000,
                false,
            ),
        ];
        for (secret, header, body, now, verifies) in cases {
            assert_eq!(
                verify(secret, &header, body, now, 300),
                verifies,
                "{header} at {now}"
            );
        }
    }

    /// The vector the Python verifier of docs/EVENTS.md computes.
    #[test]
    fn matches_the_documented_scheme() {
        let header = sign(
            b"a secret of thirty-two bytes or more!",
            1000,
            b"{\"id\":1}",
        );
        assert_eq!(
            header,
            "t=1000,v1=6d102d629b2a661e7b3ffb8e0c27129950711123cc391d5daf59d5bc0bc30710"
        );
    }
}
