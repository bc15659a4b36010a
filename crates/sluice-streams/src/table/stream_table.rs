//! A stream's table, whichever its format ([`StreamTable`]: Delta Lake or
//! Apache Iceberg): what the stream's writer ([`super::sink`]) and a Kafka
//! source need of it — application transactions' versions, one commit of
//! files with transactions, what follows a commit — and the one error a
//! commit ends with ([`CommitError`]). Both formats keep the same discipline
//! (sluice-table's [`Transaction`]): a commit names the version each
//! transaction must be at, and is refused (fenced) when another writer moved
//! it; a lost answer is told apart by reading the table back.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema};
use sluice_table::{Committed, NewFile, TableLayout, Transaction};

use super::delta::DeltaTable;
use super::schema::Version;
use sluice_iceberg::IcebergTable;

/// Why files were not added to a stream's table.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommitError {
    #[error(transparent)]
    Delta(#[from] sluice_delta::TableError),
    #[error(transparent)]
    Iceberg(#[from] sluice_iceberg::TableError),
    /// The file was left out of the table on purpose.
    #[error("the file was not added to the table: {reason}")]
    Withdrawn { reason: String },
    /// A Kafka partition cannot start where the table says.
    #[error("partition {partition} cannot start where the table says: {reason}")]
    Position { partition: i32, reason: String },
}

impl CommitError {
    /// Another writer committed this transaction's data first: these files
    /// are not in the table, and must not be.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            CommitError::Delta(sluice_delta::TableError::Fenced { .. })
                | CommitError::Iceberg(sluice_iceberg::TableError::Fenced { .. })
        )
    }
}

/// One stream's table.
#[derive(Clone)]
pub enum StreamTable {
    Delta(Arc<DeltaTable>),
    Iceberg(Arc<IcebergTable>),
}

impl StreamTable {
    pub fn layout(&self) -> &TableLayout {
        match self {
            StreamTable::Delta(table) => table.layout(),
            StreamTable::Iceberg(table) => table.layout(),
        }
    }

    /// The format's name, for messages and spans.
    pub fn format(&self) -> &'static str {
        match self {
            StreamTable::Delta(_) => "Delta",
            StreamTable::Iceberg(_) => "Iceberg",
        }
    }

    /// The latest version of application transaction `app_id`.
    pub async fn txn_version(&self, app_id: &str) -> Result<Option<i64>, CommitError> {
        Ok(match self {
            StreamTable::Delta(table) => table.txn_version(app_id).await?,
            StreamTable::Iceberg(table) => table.txn_version(app_id).await?,
        })
    }

    /// Every application transaction's latest version, in one read.
    pub async fn txn_versions(&self) -> Result<BTreeMap<String, i64>, CommitError> {
        Ok(match self {
            StreamTable::Delta(table) => table.snapshot().await?.txns.into_iter().collect(),
            StreamTable::Iceberg(table) => table.txn_versions().await?,
        })
    }

    /// Adds `files` in one commit with `transactions`; the table's columns
    /// widened to the stream's `columns` (None: the stream has no schema).
    pub async fn commit(
        &self,
        files: &[NewFile],
        transactions: &[Transaction],
        columns: Option<&Version>,
    ) -> Result<Committed, CommitError> {
        let partition_columns = &self.layout().partition_columns;
        Ok(match self {
            StreamTable::Delta(table) => {
                let columns = delta_columns(columns, partition_columns);
                table.commit(files, transactions, &columns).await?
            }
            StreamTable::Iceberg(table) => {
                let columns = iceberg_columns(columns, self.columns_apart());
                table.append(files, transactions, &columns).await?
            }
        })
    }

    /// The stream's fields kept out of its files: a Delta table's partition
    /// columns (in its directories and its log only); an Iceberg table keeps
    /// its partition columns in the files too (readers that do not project
    /// partition values read them there).
    pub fn columns_apart(&self) -> &[String] {
        match self {
            StreamTable::Delta(table) => &table.layout().partition_columns,
            StreamTable::Iceberg(_) => &[],
        }
    }

    /// After this writer made `version`: upkeep off the commit's way (a
    /// Delta checkpoint every `delta.checkpointInterval` versions; Iceberg
    /// snapshots past the table's retention expired every 100).
    pub fn after_commit(&self, version: u64) {
        match self {
            StreamTable::Delta(table) => table.after_commit(version),
            StreamTable::Iceberg(table) => table.after_commit(version),
        }
    }

    /// Whether the table keeps a Kafka partition's position for good (see
    /// `rules::positions_kept`); why not, when it does not.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) async fn keeps_positions(&self) -> Result<Result<(), String>, CommitError> {
        Ok(match self {
            StreamTable::Delta(table) => super::rules::positions_kept(
                table.snapshot().await?.configuration(),
                &table.layout().location,
            ),
            // Snapshot expiry keeps the snapshot that holds them.
            StreamTable::Iceberg(_) => Ok(()),
        })
    }
}

/// The stream's columns as a Delta struct type, partition columns left out
/// (the table adds them).
fn delta_columns(columns: Option<&Version>, partition_columns: &[String]) -> serde_json::Value {
    let empty = super::delta::schema::empty_struct();
    let Some(version) = columns else {
        return empty;
    };
    let mut columns = super::columns::delta_type(version.root()).unwrap_or(empty);
    if let Some(fields) = columns.get_mut("fields").and_then(|f| f.as_array_mut()) {
        fields.retain(|f| {
            !f.get("name")
                .and_then(|n| n.as_str())
                .is_some_and(|n| partition_columns.iter().any(|c| c == n))
        });
    }
    columns
}

/// The stream's columns as the Arrow schema of its files (but `apart`), and
/// the fields every record gives (the table's required ones,
/// which the stream keeps) not nullable: what an Iceberg commit merges into
/// the table's schema.
fn iceberg_columns(columns: Option<&Version>, apart: &[String]) -> Schema {
    let Some(version) = columns else {
        return Schema::empty();
    };
    let schema = version.arrow_schema();
    let required = version.required().paths();
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .filter(|f| !apart.contains(f.name()))
        .map(|f| with_required(f, required, &[]))
        .collect();
    Schema::new(fields)
}

/// `field` (at `parent`), not nullable where a required path names it.
fn with_required(field: &Field, required: &[Vec<String>], parent: &[String]) -> Field {
    let mut path = parent.to_vec();
    path.push(field.name().clone());
    let nullable = !required.contains(&path);
    let data_type = match field.data_type() {
        DataType::Struct(inner) => DataType::Struct(
            inner
                .iter()
                .map(|f| with_required(f, required, &path))
                .collect::<Fields>(),
        ),
        other => other.clone(),
    };
    Field::new(field.name(), data_type, nullable).with_metadata(field.metadata().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::schema::{Required, Shape, StreamSchema};

    #[test]
    fn an_iceberg_commit_s_columns_mark_what_every_record_gives() {
        let schema = StreamSchema::with_required(
            vec![
                ("id".into(), Shape::Int),
                ("day".into(), Shape::Text),
                (
                    "user".into(),
                    Shape::Struct(vec![
                        ("name".into(), Shape::Text),
                        ("age".into(), Shape::Int),
                    ]),
                ),
                ("note".into(), Shape::Text),
            ],
            Required::new(vec![vec!["id".into()], vec!["user".into(), "name".into()]]),
        );
        let columns = iceberg_columns(Some(&schema.current()), &["day".into()]);
        let nullable: Vec<(String, bool)> = columns
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.is_nullable()))
            .collect();
        assert_eq!(
            nullable,
            [
                ("id".to_string(), false),
                ("user".to_string(), true),
                ("note".to_string(), true)
            ],
            "the partition column is left out"
        );
        let DataType::Struct(user) = columns.field(1).data_type() else {
            panic!("user is a struct");
        };
        assert!(!user[0].is_nullable(), "user.name is required");
        assert!(user[1].is_nullable());
        assert_eq!(iceberg_columns(None, &[]), Schema::empty());
    }
}
