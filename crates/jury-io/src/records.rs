//! The JSON records whose writer and reader live in different crates and that belong
//! to no algorithm crate: one type each, which the writer fills and the report reads.
//! (winrate.json and ranking.json are their algorithm crates' own types.)

use std::path::Path;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{IoError, layout};

/// Entries keyed by name (a judge's), in their order: a JSON object whose keys keep the
/// order they were written in.
#[derive(Debug, Clone, PartialEq)]
pub struct Named<T>(pub Vec<(String, T)>);

/// No entries (a record's field absent from a file written before it), whatever `T` is.
impl<T> Default for Named<T> {
    fn default() -> Self {
        Named(Vec::new())
    }
}

impl<T: Serialize> Serialize for Named<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Named<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct InOrder<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for InOrder<T> {
            type Value = Named<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Named<T>, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(Named(out))
            }
        }
        d.deserialize_map(InOrder(std::marker::PhantomData))
    }
}

/// adaptive.json (`jury simulate adaptive`): the adaptive rule replayed at one chosen
/// setting and over a grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveStudy {
    /// Accuracy of the adaptive labels at the chosen setting (`None` without labels).
    pub accuracy: Option<f64>,
    /// Accuracy of the same method on every judgment.
    pub full_accuracy: Option<f64>,
    /// The method whose posterior stops examples and which labels both (`gauss`, `ds`).
    pub method: String,
    /// Judge calls at the chosen setting, the warm-up's included.
    pub calls: usize,
    pub full_calls: usize,
    pub target: f64,
    pub warmup: f64,
    pub min_judges: usize,
    pub seed: u64,
    pub calls_per_judge: Named<usize>,
    /// Each judge's cost per call (1 where none was given).
    pub cost_per_call: Named<f64>,
    /// The calls at the chosen setting weighed by their judges' costs.
    pub cost: f64,
    pub full_cost: f64,
    /// Every (target, warm-up) of the grid.
    pub curve: Vec<AdaptivePoint>,
}

/// One setting of [`AdaptiveStudy`]'s grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdaptivePoint {
    pub target: f64,
    pub warmup: f64,
    pub accuracy: Option<f64>,
    pub calls: usize,
    /// calls / full_calls.
    pub share_of_calls: f64,
    pub cost: f64,
    /// cost / full_cost.
    pub share_of_cost: f64,
}

impl AdaptiveStudy {
    /// Writes adaptive.json into `dir`, atomically.
    pub fn write(&self, dir: &Path) -> Result<(), IoError> {
        crate::write_json(&dir.join(layout::ADAPTIVE_REPLAY), self)
    }

    /// Reads `dir`'s adaptive.json.
    pub fn read(dir: &Path) -> Result<Self, IoError> {
        crate::read_json(&dir.join(layout::ADAPTIVE_REPLAY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_entries_keep_their_order_both_ways() {
        let n = Named(vec![("b".to_owned(), 2usize), ("a".to_owned(), 1)]);
        let text = serde_json::to_string(&n).unwrap();
        assert_eq!(text, r#"{"b":2,"a":1}"#);
        assert_eq!(serde_json::from_str::<Named<usize>>(&text).unwrap(), n);
    }
}
