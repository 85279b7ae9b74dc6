//! Serde helpers writing `u64` addresses as `"0x…"` strings (JSON numbers lose precision past
//! 2^53).

use serde::{Deserialize, Deserializer, Serializer};

/// Serializes as a hex string.
pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

/// Deserializes a hex string.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = String::deserialize(d)?;
    u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(serde::de::Error::custom)
}

/// The same for a map of names to addresses.
pub mod map {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes the values as hex strings.
    pub fn serialize<S: Serializer>(v: &BTreeMap<String, u64>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(v.iter().map(|(k, x)| (k, format!("{x:#x}"))))
    }

    /// Deserializes hex string values.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, u64>, D::Error> {
        BTreeMap::<String, String>::deserialize(d)?
            .into_iter()
            .map(|(k, s)| {
                u64::from_str_radix(s.trim_start_matches("0x"), 16)
                    .map(|v| (k, v))
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

/// The same for an optional address.
pub mod option {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes as a hex string (`None` is skipped by the field's attributes, or null).
    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(x) => s.serialize_str(&format!("{x:#x}")),
            None => s.serialize_none(),
        }
    }

    /// Deserializes a hex string or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// The same for a list.
pub mod vec {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes as hex strings.
    pub fn serialize<S: Serializer>(v: &[u64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|x| format!("{x:#x}")))
    }

    /// Deserializes hex strings.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(serde::de::Error::custom))
            .collect()
    }
}
