//! [`Text`]: an event's identifying text, read once and shared.
//!
//! The texts that name things (an event's id, its source and cluster, a
//! pool, tenant, job or request) are copied from the events the ledger
//! reads into the decisions it makes and the state it keeps. As `String`s,
//! each copy is an allocation and a copy of the bytes; a `Text` is shared,
//! so each copy is a count. Immutable: it reads as a `&str` everywhere a
//! string is read, and serializes, compares, orders and hashes as one.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Shared, immutable text.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Text(Arc<str>);

impl Text {
    /// The text as a `&str`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The shared text itself, for state that keeps it as an `Arc<str>`.
    pub fn as_arc(&self) -> &Arc<str> {
        &self.0
    }
}

impl Default for Text {
    fn default() -> Self {
        Self::from("")
    }
}

impl Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Text {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Self {
        Self(Arc::from(text))
    }
}

impl From<&String> for Text {
    fn from(text: &String) -> Self {
        Self(Arc::from(text.as_str()))
    }
}

impl From<String> for Text {
    fn from(text: String) -> Self {
        Self(Arc::from(text))
    }
}

impl From<Arc<str>> for Text {
    fn from(text: Arc<str>) -> Self {
        Self(text)
    }
}

impl From<Text> for Arc<str> {
    fn from(text: Text) -> Self {
        text.0
    }
}

impl From<Text> for String {
    fn from(text: Text) -> Self {
        text.0.to_string()
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Text> for str {
    fn eq(&self, other: &Text) -> bool {
        *self == *other.0
    }
}

impl PartialEq<Text> for &str {
    fn eq(&self, other: &Text) -> bool {
        **self == *other.0
    }
}

impl PartialEq<Text> for String {
    fn eq(&self, other: &Text) -> bool {
        **self == *other.0
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TextVisitor)
    }
}

/// Reads a string straight into a `Text`: one copy, from the input.
struct TextVisitor;

impl serde::de::Visitor<'_> for TextVisitor {
    type Value = Text;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Text, E> {
        Ok(Text::from(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_reads_compares_and_serializes_as_a_string() {
        let text = Text::from("pool-a");
        assert_eq!(text, "pool-a");
        assert_eq!("pool-a", text);
        assert_eq!(text, "pool-a".to_owned());
        assert_eq!(text.len(), 6);
        assert_eq!(format!("{text} {text:?}"), "pool-a \"pool-a\"");
        let (a, b) = (Text::from("a"), Text::from("b"));
        assert!(a < b, "ordered as strings");
        let json = serde_json::to_string(&text).unwrap();
        assert_eq!(json, "\"pool-a\"");
        let back: Text = serde_json::from_str(&json).unwrap();
        assert_eq!(back, text);
        let escaped: Text = serde_json::from_str("\"a\\\"b\"").unwrap();
        assert_eq!(escaped, "a\"b");
        let copy = text.clone();
        assert!(
            Arc::ptr_eq(copy.as_arc(), text.as_arc()),
            "a copy shares its text"
        );
        assert_eq!(String::from(copy), "pool-a");
    }
}
