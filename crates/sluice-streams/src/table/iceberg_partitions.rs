//! What a key template's `NAME=` directories declare of an Iceberg table's
//! partitions (see `sluice_iceberg::partition`): `NAME={field:NAME}` is
//! `identity(NAME)`; `NAME={yyyy}-{mm}-{dd}` and `NAME={yyyy}-{mm}-{dd}-{hh}`
//! are `day` and `hour` of the stream's `time_field`, which must then be a
//! timestamp column that every record gives (the directory is rendered from
//! it, and Iceberg's readers prune files by it).

use sluice_iceberg::partition::{DeclaredPartition, Transform};

/// A directory value that is a time transform's, as Iceberg writes its path.
const TIME_VALUES: [(&str, Transform); 2] = [
    ("{yyyy}-{mm}-{dd}", Transform::Day),
    ("{yyyy}-{mm}-{dd}-{hh}", Transform::Hour),
];

/// The partitions of `keys` (the key template, `{stream}` put in) for its
/// `columns` (the layout's partition columns, in order), or why a directory
/// declares none that Iceberg has.
pub(crate) fn declared(
    keys: &str,
    columns: &[String],
    time_field: Option<&str>,
) -> Result<Vec<DeclaredPartition>, String> {
    columns
        .iter()
        .map(|column| {
            let value = keys
                .split('/')
                .find_map(|dir| dir.strip_prefix(column.as_str())?.strip_prefix('='))
                .unwrap_or("");
            if value == format!("{{field:{column}}}") {
                return Ok(DeclaredPartition::identity(column));
            }
            let Some((_, transform)) = TIME_VALUES.iter().find(|(v, _)| *v == value) else {
                return Err(format!(
                    "its directory `{column}={value}` is no Iceberg partition: a directory \
                     must be `{column}={{field:{column}}}` (identity), or \
                     `{column}={{yyyy}}-{{mm}}-{{dd}}` or `{column}={{yyyy}}-{{mm}}-{{dd}}-{{hh}}` \
                     (day or hour of the time_field)"
                ));
            };
            let Some(source) = time_field else {
                return Err(format!(
                    "its directory `{column}={value}` partitions by the {} of the records' \
                     time, and the stream names no time_field to take it from",
                    transform.name()
                ));
            };
            Ok(DeclaredPartition {
                name: column.clone(),
                source: source.to_owned(),
                transform: *transform,
            })
        })
        .collect()
}

/// Whether `keys` has a directory partitioned by time (then each record's
/// time field is read as its column is, and required).
pub(crate) fn by_time(keys: &str) -> bool {
    keys.split('/').any(|dir| {
        dir.split_once('=')
            .is_some_and(|(_, value)| TIME_VALUES.iter().any(|(v, _)| *v == value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (case, key template, time field, the partitions as
    /// `name:transform(source)` or the refusal)
    type Case = (
        &'static str,
        &'static str,
        Option<&'static str>,
        Result<Vec<&'static str>, &'static str>,
    );

    #[test]
    fn directories_declare_identity_day_and_hour_partitions() {
        let cases: Vec<Case> = vec![
            ("none", "t/{uuid}", None, Ok(vec![])),
            (
                "identity",
                "t/tenant={field:tenant}/{uuid}",
                None,
                Ok(vec!["tenant:identity(tenant)"]),
            ),
            (
                "a day",
                "t/ts_day={yyyy}-{mm}-{dd}/{uuid}",
                Some("ts"),
                Ok(vec!["ts_day:day(ts)"]),
            ),
            (
                "an hour and a tenant",
                "t/at={yyyy}-{mm}-{dd}-{hh}/tenant={field:tenant}/{uuid}",
                Some("ts"),
                Ok(vec!["at:hour(ts)", "tenant:identity(tenant)"]),
            ),
            (
                "a day without a time field",
                "t/ts_day={yyyy}-{mm}-{dd}/{uuid}",
                None,
                Err("names no time_field"),
            ),
            (
                "another field's value",
                "t/tenant={field:region}/{uuid}",
                None,
                Err("is no Iceberg partition"),
            ),
            (
                "a month",
                "t/month={yyyy}-{mm}/{uuid}",
                Some("ts"),
                Err("is no Iceberg partition"),
            ),
        ];
        for (case, keys, time_field, want) in cases {
            let layout = sluice_table::TableLayout::from_template("t", keys);
            let got = declared(keys, &layout.partition_columns, time_field).map(|partitions| {
                partitions
                    .iter()
                    .map(|p| format!("{}:{}({})", p.name, p.transform.name(), p.source))
                    .collect::<Vec<_>>()
            });
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{case}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{case}: {got}"),
                (got, want) => panic!("{case}: {got:?}, wanted {want:?}"),
            }
            assert_eq!(by_time(keys), keys.contains("={yyyy}-{mm}-{dd}"), "{case}");
        }
    }
}
