//! Object keys at the gateway: the rules for keys clients name, and the key
//! template for uploads that do not name one, such as
//! `{tenant}/{yyyy}/{mm}/{dd}/{uuid}/{filename}`, optionally behind a short
//! hashed shard prefix so that one busy tenant spreads over many S3 partitions.

use sluice_store::limits::MAX_KEY_LEN;

/// Checks a key given by a client: UTF-8 (already, as a `&str`), 1–1024 bytes, no
/// control characters, no empty, `.` or `..` segments.
pub fn validate_client_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("the key is empty".into());
    }
    if key.len() > MAX_KEY_LEN {
        return Err(format!(
            "the key is {} bytes; at most 1024 are allowed",
            key.len()
        ));
    }
    if sluice_store::is_reserved_key(key) {
        return Err(format!(
            "the key {0:?} and keys under {0}/ are reserved for the gateway's own state",
            sluice_store::RESERVED_SEGMENT
        ));
    }
    if key.chars().any(char::is_control) {
        return Err("the key contains a control character".into());
    }
    for segment in key.split('/') {
        match segment {
            "" => {
                return Err(
                    "the key contains an empty segment (a leading, trailing or double '/')".into(),
                )
            }
            "." | ".." => return Err("the key contains a '.' or '..' segment".into()),
            _ => {}
        }
    }
    Ok(())
}

/// Checks a listing prefix as a key is checked, but for what a prefix may be:
/// empty, ending in `/`, or ending in part of a name. No `.` or `..` segment
/// (a partial last one included: S3 servers refuse such names), no empty
/// segment but the one after a trailing `/`, no control character.
pub fn validate_list_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Ok(());
    }
    if prefix.len() > MAX_KEY_LEN {
        return Err(format!(
            "the prefix is {} bytes; at most 1024 are allowed",
            prefix.len()
        ));
    }
    if prefix.chars().any(char::is_control) {
        return Err("the prefix contains a control character".into());
    }
    let segments: Vec<&str> = prefix.split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.into_iter().enumerate() {
        match segment {
            "" if i == last => {}
            "" => {
                return Err("the prefix contains an empty segment (a leading or double '/')".into())
            }
            "." | ".." => return Err("the prefix contains a '.' or '..' segment".into()),
            _ => {}
        }
    }
    Ok(())
}

/// Longest key a template may make from short names: half the key limit, so
/// that the sample checked at parsing is never cut (and names have room).
const MAX_TEMPLATE_KEY: usize = MAX_KEY_LEN / 2;

/// Header naming the tenant for `{tenant}` in the key template.
pub const TENANT_HEADER: &str = "x-sluice-tenant";

/// The tenant a request names (`default` when it names none).
pub fn tenant(headers: &http::HeaderMap) -> String {
    headers
        .get(TENANT_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("default")
        .to_string()
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Tenant,
    Year,
    Month,
    Day,
    Hour,
    Uuid,
    Filename,
}

/// A parsed key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    pieces: Vec<Piece>,
    shard_prefix: bool,
}

/// The values a template is filled with.
#[derive(Debug, Clone)]
pub struct KeyInputs<'a> {
    pub tenant: &'a str,
    pub filename: &'a str,
    pub now: time::OffsetDateTime,
    pub uuid: uuid::Uuid,
}

impl KeyTemplate {
    /// Parses `{name}` placeholders: tenant, yyyy, mm, dd, hh, uuid, filename.
    pub fn parse(text: &str) -> Result<KeyTemplate, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_string()));
            }
            let close = rest[open..].find('}').ok_or("an unclosed '{'")? + open;
            pieces.push(match &rest[open + 1..close] {
                "tenant" => Piece::Tenant,
                "yyyy" => Piece::Year,
                "mm" => Piece::Month,
                "dd" => Piece::Day,
                "hh" => Piece::Hour,
                "uuid" => Piece::Uuid,
                "filename" => Piece::Filename,
                other => {
                    return Err(format!(
                        "unknown placeholder {{{other}}} (known: tenant, yyyy, mm, dd, hh, uuid, filename)"
                    ))
                }
            });
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        if !pieces.contains(&Piece::Uuid) {
            return Err("the template needs {uuid} so that keys are unique".into());
        }
        let template = KeyTemplate {
            pieces,
            shard_prefix: false,
        };
        // Placeholders never render empty, '/', '.' or '..', so the literal text
        // decides whether keys are valid: one sample tells for all.
        let sample = template.render(&KeyInputs {
            tenant: "tenant",
            filename: "file",
            now: time::OffsetDateTime::UNIX_EPOCH,
            uuid: uuid::Uuid::nil(),
        });
        if sample.len() > MAX_TEMPLATE_KEY {
            return Err(format!(
                "the template makes keys of {} bytes before any name is put in; at most {MAX_TEMPLATE_KEY} are allowed",
                sample.len()
            ));
        }
        validate_client_key(&sample)
            .map_err(|reason| format!("the template makes invalid keys ({sample:?}): {reason}"))?;
        if matches!(template.pieces.first(), Some(Piece::Text(text)) if sluice_store::is_reserved_key(text) && text.contains('/'))
        {
            return Err(format!(
                "keys under {}/ are the gateway's own state",
                sluice_store::RESERVED_SEGMENT
            ));
        }
        Ok(template)
    }

    pub fn with_shard_prefix(mut self, on: bool) -> Self {
        self.shard_prefix = on;
        self
    }

    /// The key for one upload.
    pub fn render(&self, inputs: &KeyInputs<'_>) -> String {
        let mut key = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => key.push_str(text),
                Piece::Tenant => key.push_str(&sanitize_segment(inputs.tenant, "default")),
                Piece::Year => key.push_str(&format!("{:04}", inputs.now.year())),
                Piece::Month => key.push_str(&format!("{:02}", u8::from(inputs.now.month()))),
                Piece::Day => key.push_str(&format!("{:02}", inputs.now.day())),
                Piece::Hour => key.push_str(&format!("{:02}", inputs.now.hour())),
                Piece::Uuid => key.push_str(&inputs.uuid.simple().to_string()),
                Piece::Filename => key.push_str(&sanitize_segment(inputs.filename, "file")),
            }
        }
        if self.shard_prefix {
            key = format!("{:04x}/{key}", fnv1a(inputs.uuid.as_bytes()) & 0xffff);
        }
        if sluice_store::is_reserved_key(&key) {
            // A tenant named `_sluice` must not write into the gateway's state.
            key.insert(0, '_');
        }
        truncate_to_key_limit(key)
    }
}

/// A single safe path segment from client-supplied text: the last path
/// component, control characters and `/` `\` replaced, never `.` or `..`.
pub fn sanitize_segment(text: &str, fallback: &str) -> String {
    let last = text.rsplit(['/', '\\']).next().unwrap_or("");
    let cleaned: String = last
        .chars()
        .map(|c| if c.is_control() { '_' } else { c })
        .take(200)
        .collect();
    match cleaned.trim() {
        "" | "." | ".." => fallback.to_string(),
        s => s.to_string(),
    }
}

/// Cuts a key to the limit; what the cut leaves at the end (a '/', a '.'
/// segment) goes too, so the key stays valid.
fn truncate_to_key_limit(mut key: String) -> String {
    if key.len() <= MAX_KEY_LEN {
        return key;
    }
    while key.len() > MAX_KEY_LEN {
        key.pop();
    }
    while key.ends_with(['/', '.']) {
        key.pop();
    }
    key
}

/// FNV-1a: a hash that stays the same across releases, for shard prefixes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_keys() {
        let long = "k".repeat(1025);
        let cases: Vec<(&str, bool)> = vec![
            ("a", true),
            ("dir/file.bin", true),
            ("ünïcødé/файл", true),
            ("..hidden/x", true),
            ("", false),
            ("/abs", false),
            ("a//b", false),
            ("dir/", false),
            ("a/./b", false),
            ("a/../b", false),
            ("..", false),
            ("tab\there", false),
            ("nul\0", false),
            (&long, false),
            ("_sluice", false),
            ("_sluice/tus/x/state", false),
            ("_sluice/other", false),
            ("_sluicey/x", true),
            ("a/_sluice", true),
        ];
        for (key, ok) in cases {
            assert_eq!(validate_client_key(key).is_ok(), ok, "{key:?}");
        }
    }

    #[test]
    fn templates() {
        let inputs = KeyInputs {
            tenant: "acme",
            filename: "../../etc/passwd",
            now: time::macros::datetime!(2026-11-22 13:04 UTC),
            uuid: uuid::Uuid::from_u128(0x1234),
        };
        let t = KeyTemplate::parse("{tenant}/{yyyy}/{mm}/{dd}/{uuid}/{filename}").unwrap();
        assert_eq!(
            t.render(&inputs),
            "acme/2026/11/22/00000000000000000000000000001234/passwd"
        );
        let sharded = t.clone().with_shard_prefix(true).render(&inputs);
        assert_eq!(
            sharded.len(),
            "acme/2026/11/22/00000000000000000000000000001234/passwd".len() + 5
        );
        assert!(validate_client_key(&sharded).is_ok());
        let reserved_tenant = KeyInputs {
            tenant: "_sluice",
            ..inputs
        };
        let key = t.render(&reserved_tenant);
        assert!(key.starts_with("__sluice/2026/"), "{key}");
        assert!(validate_client_key(&key).is_ok());
        for bad in [
            "{tenant}/{filename}",
            "{uuid}/{nope}",
            "{uuid",
            "/{uuid}",
            "{uuid}/",
            "a//{uuid}",
            "./{uuid}",
            "{uuid}/../x",
            "tab\t{uuid}",
            "_sluice/{uuid}",
        ] {
            assert!(KeyTemplate::parse(bad).is_err(), "{bad}");
        }
        let too_long = KeyTemplate::parse(&format!("{}/{{uuid}}", "x".repeat(600)));
        assert!(too_long.is_err());
        assert_eq!(sanitize_segment("..", "file"), "file");
        assert_eq!(sanitize_segment("a\nb.txt", "file"), "a_b.txt");
        assert_eq!(sanitize_segment("C:\\x\\y.png", "file"), "y.png");
    }

    /// A cut at the key limit never leaves a trailing '/' or a '.' segment.
    #[test]
    fn cuts_at_the_limit_stay_valid() {
        let cases = [
            format!("{}/b", "a".repeat(1023)),
            format!("{}/..x", "a".repeat(1020)),
            format!("{}/./x", "a".repeat(1021)),
            format!("{}é", "a".repeat(1023)),
        ];
        for key in cases {
            let cut = truncate_to_key_limit(key.clone());
            assert!(cut.len() <= MAX_KEY_LEN);
            assert!(validate_client_key(&cut).is_ok(), "{key:?} -> {cut:?}");
        }
    }
}
