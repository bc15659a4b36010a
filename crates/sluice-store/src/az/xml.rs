//! The little XML Azure Blob speaks: answers (listings, block lists, errors)
//! read into a small element tree, and the one request body sluice sends
//! (Put Block List) written out. Built on `xmlparser` (a tokenizer, already
//! in the build through the AWS SDK) rather than a serde XML crate: the
//! answers are a handful of fixed shapes.

/// One element: its name, its attributes, its text (entities decoded), its
/// children in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Element {
    pub name: String,
    pub attributes: Vec<(String, String)>,
    pub text: String,
    pub children: Vec<Element>,
}

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child named `name`.
    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The text of the child at `path` (names separated by `/`).
    pub fn text_at(&self, path: &str) -> Option<&str> {
        let mut at = self;
        for name in path.split('/') {
            at = at.child(name)?;
        }
        Some(at.text.as_str())
    }

    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why an answer could not be read.
#[derive(Debug, thiserror::Error)]
#[error("the store's XML answer could not be read: {0}")]
pub(crate) struct XmlError(String);

/// Reads a document into its root element.
pub(crate) fn parse(text: &str) -> Result<Element, XmlError> {
    use xmlparser::{ElementEnd, Token};
    let mut stack: Vec<Element> = vec![Element::default()];
    for token in xmlparser::Tokenizer::from(text) {
        let token = token.map_err(|e| XmlError(e.to_string()))?;
        match token {
            Token::ElementStart { local, .. } => stack.push(Element {
                name: local.as_str().to_string(),
                ..Element::default()
            }),
            Token::Attribute { local, value, .. } => {
                if let Some(top) = stack.last_mut() {
                    top.attributes
                        .push((local.as_str().to_string(), unescape(value.as_str())?));
                }
            }
            Token::ElementEnd { end, .. } => match end {
                ElementEnd::Open => {}
                ElementEnd::Close(..) | ElementEnd::Empty => {
                    let done = stack.pop().filter(|_| !stack.is_empty());
                    match (done, stack.last_mut()) {
                        (Some(done), Some(parent)) => parent.children.push(done),
                        _ => return Err(XmlError("unbalanced elements".into())),
                    }
                }
            },
            Token::Text { text } => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&unescape(text.as_str())?);
                }
            }
            Token::Cdata { text, .. } => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(text.as_str());
                }
            }
            _ => {}
        }
    }
    let document = stack.pop().filter(|_| stack.is_empty());
    document
        .and_then(|mut d| d.children.pop())
        .ok_or_else(|| XmlError("no root element".into()))
}

/// Decodes the five named entities and numeric character references.
fn unescape(text: &str) -> Result<String, XmlError> {
    if !text.contains('&') {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let end = after
            .find(';')
            .ok_or_else(|| XmlError(format!("an unfinished entity in {text:?}")))?;
        let entity = &after[..end];
        let decoded = match entity {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let number = match entity.strip_prefix("#x").or(entity.strip_prefix("#X")) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => entity.strip_prefix('#').and_then(|d| d.parse().ok()),
                };
                number
                    .and_then(char::from_u32)
                    .ok_or_else(|| XmlError(format!("an unknown entity &{entity};")))?
            }
        };
        out.push(decoded);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The body of Put Block List naming `block_ids` (base64, which needs no
/// escaping) in order.
pub(crate) fn block_list(block_ids: &[String]) -> String {
    let mut body = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    for id in block_ids {
        body.push_str("<Latest>");
        body.push_str(id);
        body.push_str("</Latest>");
    }
    body.push_str("</BlockList>");
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_reads_into_elements() {
        let text = r#"<?xml version="1.0" encoding="utf-8"?>
<EnumerationResults ServiceEndpoint="http://x/" ContainerName="c">
  <Prefix>p/</Prefix>
  <Blobs>
    <Blob><Name>p/a &amp; b</Name><Properties><Content-Length>12</Content-Length><Etag>"0x1"</Etag></Properties></Blob>
    <Blob><Name Encoded="true">p/%EF%BF%BE</Name><Properties><Content-Length>0</Content-Length></Properties></Blob>
  </Blobs>
  <NextMarker />
</EnumerationResults>"#;
        let root = parse(text).unwrap();
        assert_eq!(root.name, "EnumerationResults");
        assert_eq!(root.attribute("ContainerName"), Some("c"));
        let blobs: Vec<&Element> = root
            .child("Blobs")
            .unwrap()
            .children_named("Blob")
            .collect();
        assert_eq!(blobs.len(), 2);
        assert_eq!(blobs[0].text_at("Name"), Some("p/a & b"));
        assert_eq!(blobs[0].text_at("Properties/Etag"), Some("\"0x1\""));
        assert_eq!(
            blobs[1].child("Name").unwrap().attribute("Encoded"),
            Some("true")
        );
        assert_eq!(root.text_at("NextMarker"), Some(""));
    }

    #[test]
    fn entities_decode_or_refuse() {
        // (text, decoded or None for refused)
        let cases = [
            ("plain", Some("plain")),
            ("a&lt;b&gt;&quot;&apos;", Some("a<b>\"'")),
            ("&#65;&#x42;", Some("AB")),
            ("&bogus;", None),
            ("&amp", None),
        ];
        for (text, want) in cases {
            assert_eq!(unescape(text).ok().as_deref(), want, "{text}");
        }
    }

    #[test]
    fn broken_documents_are_errors() {
        for text in ["", "<a><b></a>", "not xml", "<a>"] {
            assert!(parse(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn a_block_list_names_its_blocks_in_order() {
        assert_eq!(
            block_list(&["QQ==".into(), "Qg==".into()]),
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList><Latest>QQ==</Latest><Latest>Qg==</Latest></BlockList>"
        );
    }
}
