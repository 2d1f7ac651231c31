//! A profile under construction: the string table, functions, locations and mappings, each
//! interned once and given its 1-based id, and the samples; [`Builder::finish`] hands back the
//! prost message, [`write`] gzips it into a file (on disk a profile is always gzipped).
//!
//! Pure: no process, no symbols; the exporters say what goes in.

use std::{collections::HashMap, io::Write as _, path::Path};

use prost::Message as _;

use super::proto::{Function, Line, Location, Mapping, Profile, Sample, ValueType};

/// What a [`Builder`] is asked to intern as a function.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FunctionKey {
    /// Demangled, as people read it.
    pub name: String,
    /// As the file gives it (mangled for C++).
    pub system_name: String,
    pub filename: String,
}

/// One frame of a location: a function and the line within it (0: unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LineAt {
    pub function: u64,
    pub line: i64,
}

/// A mapping as [`Builder::mapping`] takes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MappingKey {
    pub start: u64,
    pub limit: u64,
    pub offset: u64,
    pub filename: String,
    /// Lowercase hex, as pprof prints and matches it; empty when the file has none.
    pub build_id: String,
}

#[derive(Default)]
pub struct Builder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<Function>,
    function_ids: HashMap<FunctionKey, u64>,
    locations: Vec<Location>,
    location_ids: HashMap<(u64, u64, Vec<LineAt>), u64>,
    mappings: Vec<Mapping>,
    mapping_ids: HashMap<(u64, u64, u64, String), u64>,
    samples: Vec<Sample>,
}

impl Builder {
    pub fn new() -> Self {
        let mut b = Self::default();
        // Index 0 of the string table is always the empty string.
        b.string("");
        b
    }

    /// The index of `s` in the string table.
    pub fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    pub fn value_type(&mut self, kind: &str, unit: &str) -> ValueType {
        ValueType {
            r#type: self.string(kind),
            unit: self.string(unit),
        }
    }

    pub fn function(&mut self, key: FunctionKey) -> u64 {
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let function = Function {
            id,
            name: self.string(&key.name),
            system_name: self.string(&key.system_name),
            filename: self.string(&key.filename),
            start_line: 0,
        };
        self.functions.push(function);
        self.function_ids.insert(key, id);
        id
    }

    /// A mapping's id; the first mapping added is the one pprof takes for the main binary.
    pub fn mapping(&mut self, m: &MappingKey) -> u64 {
        let key = (m.start, m.limit, m.offset, m.filename.clone());
        if let Some(&id) = self.mapping_ids.get(&key) {
            return id;
        }
        let id = self.mappings.len() as u64 + 1;
        self.mapping_ids.insert(key, id);
        let mapping = Mapping {
            id,
            memory_start: m.start,
            memory_limit: m.limit,
            file_offset: m.offset,
            filename: self.string(&m.filename),
            build_id: self.string(&m.build_id),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
        };
        self.mappings.push(mapping);
        id
    }

    /// A location's id: `lines` innermost first (the functions inlined at the address, then
    /// the one that holds its code), at `address` of mapping `mapping` (0 and 0 for a frame
    /// that is no code, such as a type).
    pub fn location(&mut self, mapping: u64, address: u64, lines: Vec<LineAt>) -> u64 {
        let key = (mapping, address, lines);
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let id = self.locations.len() as u64 + 1;
        self.locations.push(Location {
            id,
            mapping_id: mapping,
            address,
            line: key
                .2
                .iter()
                .map(|l| Line {
                    function_id: l.function,
                    line: l.line,
                    column: 0,
                })
                .collect(),
            is_folded: false,
        });
        self.location_ids.insert(key, id);
        id
    }

    /// A frame that is a name, not code (`type: shop::Item`, `this.items`): a location of one
    /// function of that name, with no mapping and no address.
    pub fn named_frame(&mut self, name: &str) -> u64 {
        let function = self.function(FunctionKey {
            name: name.to_string(),
            system_name: name.to_string(),
            filename: String::new(),
        });
        self.location(0, 0, vec![LineAt { function, line: 0 }])
    }

    /// A sample: its locations leaf first, one value per sample type.
    pub fn sample(&mut self, locations: Vec<u64>, values: Vec<i64>) {
        self.samples.push(Sample {
            location_id: locations,
            value: values,
            label: Vec::new(),
        });
    }

    /// The profile: `sample_types` in value order, the default one by name.
    pub fn finish(mut self, head: Head<'_>) -> Profile {
        let sample_type = head
            .sample_types
            .iter()
            .map(|(k, u)| self.value_type(k, u))
            .collect();
        let period_type = Some(self.value_type(head.period_type.0, head.period_type.1));
        let default_sample_type = self.string(head.default_sample_type);
        let comment = head.comments.iter().map(|c| self.string(c)).collect();
        Profile {
            sample_type,
            sample: self.samples,
            mapping: self.mappings,
            location: self.locations,
            function: self.functions,
            string_table: self.strings,
            drop_frames: 0,
            keep_frames: 0,
            time_nanos: head.time_nanos,
            duration_nanos: head.duration_nanos,
            period_type,
            period: head.period,
            comment,
            default_sample_type,
            ..Profile::default()
        }
    }
}

/// What a profile says about itself.
pub struct Head<'a> {
    /// (type, unit) per value, in value order.
    pub sample_types: &'a [(&'a str, &'a str)],
    pub default_sample_type: &'a str,
    pub period_type: (&'a str, &'a str),
    pub period: i64,
    /// Wall-clock start, ns since the Unix epoch.
    pub time_nanos: i64,
    pub duration_nanos: i64,
    pub comments: Vec<String>,
}

/// Start of a run that lasted `elapsed` and ends now, ns since the Unix epoch.
pub fn started_ns(elapsed: std::time::Duration) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.saturating_sub(elapsed).as_nanos() as i64
}

/// Writes `profile` gzipped to `out`.
pub fn write(profile: &Profile, out: impl std::io::Write) -> std::io::Result<()> {
    let mut gz =
        flate2::write::GzEncoder::new(std::io::BufWriter::new(out), flate2::Compression::default());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()?.flush()
}

/// Writes `profile` gzipped into a new file at `path`.
pub fn write_file(profile: &Profile, path: &Path) -> std::io::Result<()> {
    write(profile, std::fs::File::create(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Interning: one string, function and location per key; ids from 1; string 0 is "".
    #[test]
    fn interns_once() {
        let mut b = Builder::new();
        let f = FunctionKey {
            name: "shop::add".into(),
            system_name: "_ZN4shop3addEv".into(),
            filename: "shop.cpp".into(),
        };
        let a = b.function(f.clone());
        assert_eq!((a, b.function(f)), (1, 1));
        let line = LineAt {
            function: a,
            line: 7,
        };
        let l = b.location(0, 0x10, vec![line]);
        assert_eq!(b.location(0, 0x10, vec![line]), l);
        assert_ne!(b.named_frame("type: int"), l);
        b.sample(vec![l], vec![3]);
        let p = b.finish(Head {
            sample_types: &[("x", "count")],
            default_sample_type: "x",
            period_type: ("x", "count"),
            period: 1,
            time_nanos: 0,
            duration_nanos: 0,
            comments: vec![],
        });
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.string_table[p.function[0].name as usize], "shop::add");
        assert_eq!(p.location.len(), 2);
        assert_eq!(p.sample[0].value, [3]);
    }
}
