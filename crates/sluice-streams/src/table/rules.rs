//! The rules a table's owner set on its rows, as sluice keeps them before a
//! record is taken: its NOT NULL columns become [`Required`] fields of the
//! stream's schema (a record without a value is a conflict, dead-lettered or
//! refused with its line and field). What sluice cannot keep refuses the
//! stream at start, naming the rule.

use crate::table::schema::{Required, Shape};

/// The rules a table's owner set on its rows that sluice keeps: its NOT NULL
/// columns (records without a value go to the dead letter). A rule sluice
/// cannot keep refuses the stream, naming it: a column invariant (a SQL
/// expression sluice does not evaluate), a NOT NULL column of a type sluice
/// does not write (its files would leave it out: null in every row).
pub(crate) fn table_rules(
    schema: &serde_json::Value,
    known: &[(String, Shape)],
    partition_columns: &[String],
) -> Result<Required, String> {
    if let Some((column, expression)) = crate::table::delta::schema::invariants(schema)
        .into_iter()
        .next()
    {
        return Err(format!(
            "column `{column}` has the invariant `{expression}` (delta.invariants), which sluice \
             cannot check; it does not append to such a table"
        ));
    }
    if let Some(path) = crate::table::delta::schema::no_nulls_inside_collections(schema)
        .into_iter()
        .next()
    {
        return Err(format!(
            "`{path}` allows no nulls inside a list or map, which sluice does not check; it \
             does not append to such a table"
        ));
    }
    let paths = crate::table::delta::schema::required_paths(schema);
    for path in &paths {
        let mut fields = known;
        let mut written = true;
        for (depth, name) in path.iter().enumerate() {
            match fields.iter().find(|(field, _)| field == name) {
                Some((_, Shape::Struct(inner))) => fields = inner,
                Some(_) if depth + 1 == path.len() => {}
                _ => {
                    written = false;
                    break;
                }
            }
        }
        if !written {
            return Err(format!(
                "column `{}` is NOT NULL and of a type sluice does not write; its files would \
                 leave it null",
                path.join(".")
            ));
        }
    }
    Ok(Required::of_table(paths, partition_columns))
}

/// The table property that lets checkpoints drop application transactions
/// not updated for that long.
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
pub(crate) const TXN_RETENTION: &str = "delta.setTransactionRetentionDuration";

/// Whether a source that keeps its positions in the table's transactions
/// (Kafka) may write to a table with this `configuration`: not when the table
/// lets checkpoints (another engine's) drop transactions after a while, since
/// a partition quiet that long would lose its position and a replay would
/// append its records twice.
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
pub(crate) fn positions_kept(
    configuration: &std::collections::BTreeMap<String, Option<String>>,
    location: &str,
) -> Result<(), String> {
    match configuration.get(TXN_RETENTION).cloned().flatten() {
        Some(retention) => Err(format!(
            "the Delta table at {location} sets {TXN_RETENTION} = {retention:?}: checkpoints may \
             drop a Kafka partition's position (its transaction) once it is that old, and a \
             replay would then append its records twice; sluice keeps Kafka offsets only in \
             tables without it"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(name: &str, data_type: serde_json::Value, nullable: bool) -> serde_json::Value {
        json!({"name": name, "type": data_type, "nullable": nullable, "metadata": {}})
    }

    /// Issue 48: another engine's checkpoint could drop the transactions
    /// that hold Kafka partitions' positions under this property, and a
    /// replay would duplicate rows; such a table is refused for Kafka.
    #[test]
    fn kafka_positions_are_kept_only_where_no_retention_drops_them() {
        let cases = [(None, true), (Some("interval 7 days"), false)];
        for (retention, kept) in cases {
            let configuration = retention
                .map(|r| (TXN_RETENTION.to_string(), Some(r.to_string())))
                .into_iter()
                .collect();
            let got = positions_kept(&configuration, "t");
            assert_eq!(got.is_ok(), kept, "{retention:?}: {got:?}");
            if let Err(reason) = got {
                assert!(reason.contains(TXN_RETENTION), "{reason}");
            }
        }
    }

    /// (case, the table's fields, Ok(required paths, dotted) or Err(what the
    /// refusal names))
    type Case = (
        &'static str,
        Vec<serde_json::Value>,
        Result<Vec<&'static str>, &'static str>,
    );

    #[test]
    fn a_table_s_rules_are_kept_or_the_stream_refused_naming_them() {
        let invariant = json!({"name": "n", "type": "long", "nullable": true,
            "metadata": {"delta.invariants": r#"{"expression":{"expression":"n > 0"}}"#}});
        let cases: Vec<Case> = vec![
            (
                "all nullable",
                vec![field("id", json!("long"), true)],
                Ok(vec![]),
            ),
            (
                "a NOT NULL column",
                vec![field("id", json!("long"), false)],
                Ok(vec!["id"]),
            ),
            (
                "a nested one",
                vec![field(
                    "o",
                    json!({"type": "struct", "fields": [field("x", json!("string"), false)]}),
                    true,
                )],
                Ok(vec!["o.x"]),
            ),
            (
                "NOT NULL of a type sluice does not write",
                vec![field("ts", json!("binary"), false)],
                Err("column `ts` is NOT NULL"),
            ),
            (
                "an invariant",
                vec![invariant],
                Err("column `n` has the invariant `n > 0`"),
            ),
            (
                "no nulls in a list",
                vec![field(
                    "l",
                    json!({"type": "array", "elementType": "long", "containsNull": false}),
                    true,
                )],
                Err("`l[]` allows no nulls"),
            ),
            (
                "a NOT NULL field of a struct in a list",
                vec![field(
                    "l",
                    json!({"type": "array", "containsNull": true, "elementType":
                        {"type": "struct", "fields": [field("z", json!("long"), false)]}}),
                    true,
                )],
                Err("`l[].z` allows no nulls"),
            ),
        ];
        for (case, fields, want) in cases {
            let schema = json!({"type": "struct", "fields": fields});
            let known = crate::table::columns::struct_fields(&schema).unwrap();
            let got = table_rules(&schema, &known, &[]);
            match (got, want) {
                (Ok(required), Ok(paths)) => {
                    let paths: Vec<Vec<String>> = paths
                        .iter()
                        .map(|p| p.split('.').map(str::to_owned).collect())
                        .collect();
                    assert_eq!(required, Required::new(paths), "{case}");
                }
                (Err(reason), Err(named)) => {
                    assert!(reason.contains(named), "{case}: {reason}")
                }
                (got, want) => panic!("{case}: {got:?}, wanted {want:?}"),
            }
        }
    }
}
