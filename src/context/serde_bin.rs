//! Serde adapters that let events and state embed the draft's context objects
//! in both JSON and bincode.
//!
//! The context types omit absent optional members (`skip_serializing_if`) so
//! their JSON matches what agents sent. A non-self-describing format such as
//! bincode cannot decode a struct whose fields were skipped, so for such
//! formats (`is_human_readable() == false`) the context is carried as its
//! compact JSON text instead. JSON trails and topics still show the context
//! as a nested object.

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `#[serde(with = "json_in_binary")]` for a context field.
pub mod json_in_binary {
    use super::*;

    pub fn serialize<T: Serialize, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            value.serialize(s)
        } else {
            let text = serde_json::to_string(value).map_err(S::Error::custom)?;
            s.serialize_str(&text)
        }
    }

    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        if d.is_human_readable() {
            T::deserialize(d)
        } else {
            let text = String::deserialize(d)?;
            serde_json::from_str(&text).map_err(D::Error::custom)
        }
    }
}

/// `#[serde(with = "opt_json_in_binary")]` for an optional context field.
pub mod opt_json_in_binary {
    use super::*;

    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            value.serialize(s)
        } else {
            let text = value
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(S::Error::custom)?;
            text.serialize(s)
        }
    }

    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        if d.is_human_readable() {
            Option::<T>::deserialize(d)
        } else {
            Option::<String>::deserialize(d)?
                .map(|text| serde_json::from_str(&text))
                .transpose()
                .map_err(D::Error::custom)
        }
    }
}
