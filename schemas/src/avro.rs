//! Mapping between the Rust event types and Avro values.
//!
//! Each field type knows its Avro form ([`AvroField`]); each record lists its
//! fields once, in the [`record!`](crate::record) macro that declares it, so
//! the struct and its Avro mapping cannot drift apart. Optional fields are
//! `["null", T]` unions with `null` first and default `null`.

use apache_avro::types::Value;

use crate::exact::{Decimal, Rational};
use crate::time::Timestamp;

/// What was wrong with one field of a decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub(crate) field: String,
    pub(crate) message: String,
}

impl FieldError {
    pub(crate) fn new(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// Prefixes the field path, for errors inside nested records and arrays.
    pub(crate) fn within(mut self, outer: &str) -> Self {
        self.field = format!("{outer}.{}", self.field);
        self
    }
}

/// A Rust value with an Avro form.
pub(crate) trait AvroField: Sized {
    fn to_avro(&self) -> Value;
    /// Reads the value back; the error is a message about this value alone.
    fn from_avro(value: Value) -> Result<Self, FieldError>;
}

fn unexpected(expected: &str, got: &Value) -> FieldError {
    FieldError::new("", format!("expected {expected}, found {got:?}"))
}

impl AvroField for String {
    fn to_avro(&self) -> Value {
        Value::String(self.clone())
    }
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        match value {
            Value::String(s) => Ok(s),
            other => Err(unexpected("a string", &other)),
        }
    }
}

impl AvroField for gpuledger_collections::Text {
    fn to_avro(&self) -> Value {
        Value::String(self.to_string())
    }
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        match value {
            Value::String(s) => Ok(s.into()),
            other => Err(unexpected("a string", &other)),
        }
    }
}

impl AvroField for i32 {
    fn to_avro(&self) -> Value {
        Value::Int(*self)
    }
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        match value {
            Value::Int(n) => Ok(n),
            other => Err(unexpected("an int", &other)),
        }
    }
}

impl AvroField for i64 {
    fn to_avro(&self) -> Value {
        Value::Long(*self)
    }
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        match value {
            Value::Long(n) => Ok(n),
            Value::Int(n) => Ok(n.into()),
            other => Err(unexpected("a long", &other)),
        }
    }
}

impl AvroField for f32 {
    fn to_avro(&self) -> Value {
        Value::Float(*self)
    }
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        match value {
            Value::Float(n) => Ok(n),
            other => Err(unexpected("a float", &other)),
        }
    }
}

impl AvroField for Timestamp {
    fn to_avro(&self) -> Value {
        Value::TimestampMicros(self.as_micros())
    }
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        match value {
            Value::TimestampMicros(n) | Value::Long(n) => Ok(Timestamp::from_micros(n)),
            other => Err(unexpected("a timestamp-micros", &other)),
        }
    }
}

impl AvroField for Decimal {
    fn to_avro(&self) -> Value {
        Value::String(self.to_string())
    }
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let s = String::from_avro(value)?;
        s.parse()
            .map_err(|e: crate::exact::ParseNumberError| FieldError::new("", e.to_string()))
    }
}

impl AvroField for Rational {
    fn to_avro(&self) -> Value {
        Value::String(self.to_string())
    }
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        let s = String::from_avro(value)?;
        s.parse()
            .map_err(|e: crate::exact::ParseNumberError| FieldError::new("", e.to_string()))
    }
}

impl<T: AvroField> AvroField for Option<T> {
    fn to_avro(&self) -> Value {
        match self {
            None => Value::Union(0, Box::new(Value::Null)),
            Some(v) => Value::Union(1, Box::new(v.to_avro())),
        }
    }
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        match value {
            Value::Union(_, inner) => match *inner {
                Value::Null => Ok(None),
                other => T::from_avro(other).map(Some),
            },
            Value::Null => Ok(None),
            other => T::from_avro(other).map(Some),
        }
    }
}

impl<T: AvroField> AvroField for Vec<T> {
    fn to_avro(&self) -> Value {
        Value::Array(self.iter().map(AvroField::to_avro).collect())
    }
    fn from_avro(value: Value) -> Result<Self, FieldError> {
        match value {
            Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| T::from_avro(v).map_err(|e| e.within(&format!("[{i}]"))))
                .collect(),
            other => Err(unexpected("an array", &other)),
        }
    }
}

/// The fields of a decoded record, taken out by name.
#[derive(Debug)]
pub(crate) struct Fields(Vec<(String, Value)>);

impl Fields {
    pub(crate) fn from_value(value: Value) -> Result<Self, FieldError> {
        match value {
            Value::Record(fields) => Ok(Self(fields)),
            other => Err(unexpected("a record", &other)),
        }
    }

    /// Takes the named field. A field the writer's schema lacked has already
    /// been filled from its default by schema resolution.
    pub(crate) fn take<T: AvroField>(&mut self, name: &str) -> Result<T, FieldError> {
        let slot = self
            .0
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| FieldError::new(name, "is missing"))?;
        let value = std::mem::replace(&mut slot.1, Value::Null);
        T::from_avro(value).map_err(|e| {
            if e.field.is_empty() {
                FieldError::new(name, e.message)
            } else {
                e.within(name)
            }
        })
    }
}

/// A Rust struct that is an Avro record.
pub(crate) trait AvroRecord: Sized {
    fn write_fields(&self, out: &mut Vec<(String, Value)>);
    fn read_fields(fields: &mut Fields) -> Result<Self, FieldError>;
}

/// Declares a record struct, deriving its serde (JSON) form and its Avro
/// mapping from the one list of fields.
macro_rules! record {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $crate::avro::AvroRecord for $name {
            fn write_fields(&self, out: &mut Vec<(String, apache_avro::types::Value)>) {
                $( out.push((stringify!($field).to_owned(), $crate::avro::AvroField::to_avro(&self.$field))); )*
            }
            fn read_fields(fields: &mut $crate::avro::Fields) -> Result<Self, $crate::avro::FieldError> {
                Ok(Self { $( $field: fields.take(stringify!($field))?, )* })
            }
        }

        impl $crate::avro::AvroField for $name {
            fn to_avro(&self) -> apache_avro::types::Value {
                let mut out = Vec::new();
                $crate::avro::AvroRecord::write_fields(self, &mut out);
                apache_avro::types::Value::Record(out)
            }
            fn from_avro(value: apache_avro::types::Value) -> Result<Self, $crate::avro::FieldError> {
                let mut fields = $crate::avro::Fields::from_value(value)?;
                $crate::avro::AvroRecord::read_fields(&mut fields)
            }
        }
    };
}

/// Declares a closed set of lowercase names: an Avro `enum` on the wire, a
/// string in JSON, and an error listing the known values otherwise.
macro_rules! symbols {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $( $(#[$vmeta])* $variant, )+ }

        impl $name {
            /// Every value, in schema order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The contract's name for this value.
            pub const fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $text, )+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $( $text => Ok($name::$variant), )+
                    other => Err(format!(
                        "unknown value {other:?} (expected one of: {})",
                        [$($text),+].join(", ")
                    )),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

        impl $crate::avro::AvroField for $name {
            fn to_avro(&self) -> apache_avro::types::Value {
                let index = $name::ALL.iter().position(|v| v == self).unwrap_or(0);
                apache_avro::types::Value::Enum(index as u32, self.as_str().to_owned())
            }
            fn from_avro(value: apache_avro::types::Value) -> Result<Self, $crate::avro::FieldError> {
                match value {
                    apache_avro::types::Value::Enum(_, s) | apache_avro::types::Value::String(s) => {
                        s.parse().map_err(|e: String| $crate::avro::FieldError::new("", e))
                    }
                    other => Err($crate::avro::FieldError::new("", format!("expected an enum symbol, found {other:?}"))),
                }
            }
        }
    };
}
