//! A JSON object's key as serde reads it, borrowed from the input when it has
//! no escapes (serde's own `Cow<str>` always allocates): shared by the record
//! parser (records.rs) and the schema's fit check (table/schema.rs).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Visitor};

/// An object's key, borrowed from the input when it has no escapes (serde's
/// own `Cow<str>` always allocates).
pub(crate) struct JsonKey<'de>(pub Cow<'de, str>);

impl<'de> de::Deserialize<'de> for JsonKey<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JsonKey<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<JsonKey<'de>, E> {
                Ok(JsonKey(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<JsonKey<'de>, E> {
                Ok(JsonKey(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<JsonKey<'de>, E> {
                Ok(JsonKey(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}
