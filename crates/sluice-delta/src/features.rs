//! The protocol checker: for each reader and writer version and each table
//! feature of the Delta protocol, whether sluice reads and appends to a
//! table that has it, and what it does to honour it. A table is appended to
//! only when every feature its protocol names (explicitly at writer version
//! 7 and reader version 3, or implied by a legacy version) is one sluice
//! enforces; the first that is not is named in the refusal. Some features
//! are honoured only while the table does not use them (an invariant, a
//! CHECK constraint, a generated column): those look at the table's
//! metadata too.
//!
//! sluice never adds a feature to a table: a table it creates is reader 1,
//! writer 2; another engine's table keeps the protocol it was given.

use serde_json::Value;

use super::log::{MetaData, Protocol};

/// How sluice stands towards one table feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Read and written as the protocol asks (how: the feature's note).
    Enforced,
    /// Honoured while the table does not use it: a table whose metadata
    /// uses it is refused (see [`refusal`]).
    WhileUnused,
    /// Refused, for the reason given.
    Refused(&'static str),
}

/// One row of the feature table.
#[derive(Debug, Clone, Copy)]
pub struct Feature {
    pub name: &'static str,
    /// A reader feature too (readers must understand it).
    pub reader: bool,
    pub support: Support,
    /// What sluice does for it.
    pub note: &'static str,
}

const fn feature(
    name: &'static str,
    reader: bool,
    support: Support,
    note: &'static str,
) -> Feature {
    Feature {
        name,
        reader,
        support,
        note,
    }
}

/// Every table feature sluice knows, with what it does about it.
pub const FEATURES: &[Feature] = &[
    feature("appendOnly", false, Support::Enforced, "sluice only appends; compaction's rewrite changes no data (dataChange false)"),
    feature("invariants", false, Support::WhileUnused, "a column with `delta.invariants` is refused (sluice does not evaluate SQL)"),
    feature("checkConstraints", false, Support::WhileUnused, "a table with `delta.constraints.*` is refused (sluice does not evaluate SQL)"),
    feature("changeDataFeed", false, Support::Enforced, "appends are inserts to a change-feed reader; compaction changes no data"),
    feature("generatedColumns", false, Support::WhileUnused, "a column with `delta.generationExpression` is refused"),
    feature("identityColumns", false, Support::WhileUnused, "a column with `delta.identity.start` is refused (sluice does not allocate identities)"),
    feature("allowColumnDefaults", false, Support::WhileUnused, "a column with a `CURRENT_DEFAULT` is refused (sluice leaves absent columns null)"),
    feature("columnMapping", true, Support::Enforced, "files use the columns' physical names and field ids; sluice adds no column to such a table"),
    feature("deletionVectors", true, Support::Enforced, "sluice's files have none; compaction leaves a file with one alone; checkpoints keep them"),
    feature("rowTracking", false, Support::Enforced, "each add gets its base row id and commit version, the high-water mark moves in the same commit; compaction is refused"),
    feature("domainMetadata", false, Support::Enforced, "domains are kept through checkpoints; sluice writes only `delta.rowTracking`"),
    feature("inCommitTimestamp", false, Support::Enforced, "commitInfo comes first with an inCommitTimestamp past the last one"),
    feature("timestampNtz", true, Support::Enforced, "read; sluice's files leave such columns null"),
    feature("typeWidening", true, Support::Enforced, "files are written with the columns' current types"),
    feature("typeWidening-preview", true, Support::Enforced, "files are written with the columns' current types"),
    feature("variantType", true, Support::Enforced, "read; sluice's files leave such columns null"),
    feature("variantType-preview", true, Support::Enforced, "read; sluice's files leave such columns null"),
    feature("v2Checkpoint", true, Support::Enforced, "V2 checkpoints and their sidecars are read; sluice writes V2 checkpoints (UUID-named, with checkpointMetadata)"),
    feature("checkpointProtection", false, Support::Enforced, "the log is not cleaned up before `delta.requireCheckpointProtectionBeforeVersion`"),
    feature("vacuumProtocolCheck", true, Support::Enforced, "vacuum checks the protocol before it deletes"),
    feature("clustering", false, Support::Enforced, "sluice's files are not clustered (no clusteringProvider); the clustering domain is kept"),
    feature("icebergCompatV1", false, Support::Refused("sluice does not keep the Iceberg metadata such a table carries in step"), "refused"),
    feature("icebergCompatV2", false, Support::Refused("sluice does not keep the Iceberg metadata such a table carries in step"), "refused"),
    feature("icebergCompatV3", false, Support::Refused("sluice does not keep the Iceberg metadata such a table carries in step"), "refused"),
    feature("icebergWriterCompatV1", false, Support::Refused("sluice does not keep the Iceberg metadata such a table carries in step"), "refused"),
    feature("collations-preview", true, Support::Refused("statistics of collated strings need the collation"), "refused"),
    feature("catalogOwned-preview", true, Support::Refused("commits to a catalog-owned table go through its catalog"), "refused"),
    feature("catalogManaged", true, Support::Refused("commits to a catalog-managed table go through its catalog"), "refused"),
    feature("variantShredding-preview", true, Support::Refused("shredded variants are not read"), "refused"),
];

/// The row for `name`, if sluice knows the feature.
pub fn lookup(name: &str) -> Option<&'static Feature> {
    FEATURES.iter().find(|f| f.name == name)
}

/// The writer features a legacy writer version implies.
fn implied_writer_features(version: i32) -> &'static [&'static str] {
    const ALL: [&str; 7] = [
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
    ];
    match version {
        ..=1 => &[],
        2 => &ALL[..2],
        3 => &ALL[..3],
        4 => &ALL[..5],
        5 => &ALL[..6],
        _ => &ALL[..],
    }
}

/// The features `protocol` asks readers and writers to honour.
pub fn features_of(protocol: &Protocol) -> Vec<String> {
    let mut names: Vec<String> = match protocol.min_writer_version {
        7 => protocol.writer_features.clone().unwrap_or_default(),
        v => implied_writer_features(v)
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    let readers: Vec<String> = match protocol.min_reader_version {
        3 => protocol.reader_features.clone().unwrap_or_default(),
        2 => vec!["columnMapping".into()],
        _ => Vec::new(),
    };
    for name in readers {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Whether `protocol` names feature `name`.
pub fn has(protocol: Option<&Protocol>, name: &str) -> bool {
    protocol.is_some_and(|p| features_of(p).iter().any(|f| f == name))
}

/// Why sluice must not append to (or compact, checkpoint, vacuum) a table
/// under `protocol` and `metadata`; None when it may.
pub fn refusal(protocol: &Protocol, metadata: Option<&MetaData>) -> Option<String> {
    if !(1..=3).contains(&protocol.min_reader_version) {
        return Some(format!(
            "the table needs reader version {}; sluice reads versions 1 to 3",
            protocol.min_reader_version
        ));
    }
    if !(1..=7).contains(&protocol.min_writer_version) {
        return Some(format!(
            "the table needs writer version {}; sluice writes versions 1 to 7",
            protocol.min_writer_version
        ));
    }
    for name in features_of(protocol) {
        match lookup(&name).map(|f| f.support) {
            None => {
                return Some(format!(
                    "the table needs feature `{name}`, which sluice does not know"
                ))
            }
            Some(Support::Refused(why)) => {
                return Some(format!("the table needs feature `{name}`: {why}"))
            }
            Some(Support::WhileUnused) => {
                if let Some(used) = metadata.and_then(|m| used(&name, m)) {
                    return Some(format!(
                        "the table uses feature `{name}` ({used}), which sluice cannot honour"
                    ));
                }
            }
            Some(Support::Enforced) => {}
        }
    }
    let mode = metadata.and_then(|m| m.configuration.get(COLUMN_MAPPING_MODE)?.clone());
    match mode.as_deref() {
        None | Some("none") | Some("name") | Some("id") => None,
        Some(other) => Some(format!(
            "the table's {COLUMN_MAPPING_MODE} is {other:?}; sluice knows none, name and id"
        )),
    }
}

/// The table property that says how columns are mapped.
pub const COLUMN_MAPPING_MODE: &str = "delta.columnMapping.mode";

/// Where the table uses a feature sluice honours only while it is unused.
fn used(feature: &str, metadata: &MetaData) -> Option<String> {
    let schema: Value = serde_json::from_str(&metadata.schema_string).ok()?;
    let column_with = |key: &str| column_with(&schema, key, "");
    match feature {
        "invariants" => {
            column_with("delta.invariants").map(|c| format!("column `{c}` has an invariant"))
        }
        "checkConstraints" => metadata
            .configuration
            .keys()
            .find(|k| k.starts_with("delta.constraints."))
            .map(|k| format!("constraint `{k}`")),
        "generatedColumns" => {
            column_with("delta.generationExpression").map(|c| format!("column `{c}` is generated"))
        }
        "identityColumns" => {
            column_with("delta.identity.start").map(|c| format!("column `{c}` is an identity"))
        }
        "allowColumnDefaults" => {
            column_with("CURRENT_DEFAULT").map(|c| format!("column `{c}` has a default"))
        }
        _ => None,
    }
}

/// The first column (dotted) of struct type `schema` whose metadata has `key`.
fn column_with(schema: &Value, key: &str, prefix: &str) -> Option<String> {
    for (name, field) in crate::schema::named_fields(schema) {
        let dotted = crate::schema::dotted(prefix, name);
        if field.get("metadata").and_then(|m| m.get(key)).is_some() {
            return Some(dotted);
        }
        let mut inner = field.get("type");
        // Through arrays and maps to the structs inside them.
        while let Some(t) = inner {
            match t.get("type").and_then(Value::as_str) {
                Some("struct") => break,
                Some("array") => inner = t.get("elementType"),
                Some("map") => inner = t.get("valueType"),
                _ => {
                    inner = None;
                }
            }
        }
        if let Some(found) = inner.and_then(|t| column_with(t, key, &dotted)) {
            return Some(found);
        }
    }
    None
}

#[cfg(test)]
mod tests {

    use super::*;

    fn protocol(reader: i32, writer: i32, features: &[&str]) -> Protocol {
        let named = |r: bool| {
            let list: Vec<String> = features
                .iter()
                .filter(|f| !r || lookup(f).is_none_or(|f| f.reader))
                .map(|s| s.to_string())
                .collect();
            Some(list)
        };
        Protocol {
            min_reader_version: reader,
            min_writer_version: writer,
            reader_features: (reader == 3).then(|| named(true)).flatten(),
            writer_features: (writer == 7).then(|| named(false)).flatten(),
        }
    }

    fn metadata(schema: &str, configuration: &[(&str, &str)]) -> MetaData {
        MetaData {
            configuration: configuration
                .iter()
                .map(|(k, v)| (k.to_string(), Some(v.to_string())))
                .collect(),
            ..MetaData::new(schema.into(), vec![])
        }
    }

    const PLAIN: &str = r#"{"type":"struct","fields":[{"name":"id","type":"long","nullable":false,"metadata":{}}]}"#;

    #[test]
    fn the_protocol_checker_names_what_it_refuses() {
        let spark_today = [
            "deletionVectors",
            "domainMetadata",
            "v2Checkpoint",
            "timestampNtz",
            "rowTracking",
            "invariants",
            "inCommitTimestamp",
            "appendOnly",
            "columnMapping",
        ];
        let cases: Vec<(&str, Protocol, MetaData, Option<&str>)> = vec![
            (
                "sluice's own",
                Protocol::written(),
                metadata(PLAIN, &[]),
                None,
            ),
            ("writer 1", protocol(1, 1, &[]), metadata(PLAIN, &[]), None),
            (
                "writer 4, nothing used",
                protocol(1, 4, &[]),
                metadata(PLAIN, &[]),
                None,
            ),
            (
                "writer 3 with a CHECK constraint",
                protocol(1, 3, &[]),
                metadata(PLAIN, &[("delta.constraints.positive", "id > 0")]),
                Some("`checkConstraints` (constraint `delta.constraints.positive`)"),
            ),
            (
                "column mapping by name, reader 2 and writer 5",
                protocol(2, 5, &[]),
                metadata(PLAIN, &[(COLUMN_MAPPING_MODE, "name")]),
                None,
            ),
            (
                "a mode sluice does not know",
                protocol(2, 5, &[]),
                metadata(PLAIN, &[(COLUMN_MAPPING_MODE, "other")]),
                Some("delta.columnMapping.mode is \"other\""),
            ),
            (
                "Spark 4.2's features",
                protocol(3, 7, &spark_today),
                metadata(PLAIN, &[]),
                None,
            ),
            (
                "a feature nobody knows",
                protocol(3, 7, &["appendOnly", "hyperspace"]),
                metadata(PLAIN, &[]),
                Some("`hyperspace`, which sluice does not know"),
            ),
            (
                "UniForm",
                protocol(3, 7, &["columnMapping", "icebergCompatV2"]),
                metadata(PLAIN, &[]),
                Some("`icebergCompatV2`: sluice does not keep the Iceberg metadata"),
            ),
            (
                "an identity column",
                protocol(1, 6, &[]),
                metadata(
                    r#"{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{"delta.identity.start":1,"delta.identity.step":1}}]}"#,
                    &[],
                ),
                Some("column `id` is an identity"),
            ),
            (
                "an invariant on a nested field",
                protocol(1, 2, &[]),
                metadata(
                    r#"{"type":"struct","fields":[{"name":"s","type":{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{"delta.invariants":"{\"expression\":{\"expression\":\"x > 3\"}}"}}]},"nullable":true,"metadata":{}}]}"#,
                    &[],
                ),
                Some("column `s.x` has an invariant"),
            ),
            (
                "reader 4",
                protocol(4, 7, &[]),
                metadata(PLAIN, &[]),
                Some("reader version 4"),
            ),
            (
                "writer 8",
                protocol(3, 8, &[]),
                metadata(PLAIN, &[]),
                Some("writer version 8"),
            ),
        ];
        for (case, protocol, metadata, want) in cases {
            let got = refusal(&protocol, Some(&metadata));
            match want {
                None => assert_eq!(got, None, "{case}"),
                Some(want) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(want)),
                    "{case}: {got:?} should say {want:?}"
                ),
            }
        }
    }

    #[test]
    fn legacy_versions_imply_their_features() {
        let cases: [(i32, i32, &[&str]); 4] = [
            (1, 2, &["appendOnly", "invariants"]),
            (
                2,
                5,
                &[
                    "appendOnly",
                    "invariants",
                    "checkConstraints",
                    "changeDataFeed",
                    "generatedColumns",
                    "columnMapping",
                ],
            ),
            (
                1,
                6,
                &[
                    "appendOnly",
                    "invariants",
                    "checkConstraints",
                    "changeDataFeed",
                    "generatedColumns",
                    "columnMapping",
                    "identityColumns",
                ],
            ),
            (3, 7, &["deletionVectors", "rowTracking"]),
        ];
        for (reader, writer, want) in cases {
            let mut got = features_of(&protocol(reader, writer, want));
            got.sort();
            let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
            want.sort();
            assert_eq!(got, want, "reader {reader}, writer {writer}");
        }
    }
}
