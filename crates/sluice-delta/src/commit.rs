//! The one way a version is added to a table's log, for every change sluice
//! makes (appends of a stream's files, compaction's rewrite): the next
//! version written only when absent (`If-None-Match`), after checking the
//! change still holds against the table as it now is, and recognised as its
//! own when its answer was lost: a version is this commit's when the log
//! holds at that version exactly the bytes it wrote, read back after a
//! refusal by its own precondition (it landed, its retry was refused) or
//! after a failure. Another writer's version is read and the commit tried
//! again on top of it, a bounded number of times when the log does not move.
//!
//! Before a writer's first commit, the store is asked once whether it
//! honours `If-None-Match` at all ([`sluice_store::probe`]); one that does not
//! is refused every commit ([`TableError::CreateOnlyIgnored`]).
//!
//! What must still hold: the transactions are where the change expects them
//! (all at their new versions already: another commit holds them,
//! [`Committed::Already`]; one elsewhere: [`TableError::Fenced`]), every
//! file the change removes is still in the table (else another writer
//! removed it first), and the table's protocol lets sluice write.

use bytes::Bytes;
use serde_json::{json, Value};
use sluice_store::{PutRequest, StoreError, WriteCondition};

use super::features;
use super::log::{self, Action, Add, Txn};
use super::properties;
use super::{
    now_ms, Committed, DeltaTable, NewFile, Snapshot, TableError, Transaction, ROW_TRACKING_DOMAIN,
};

/// Versions lost in a row to a log that does not move on (one that exists
/// but cannot be listed or read) before the commit gives up.
const MOST_STUCK: u32 = 5;

/// What one commit changes.
#[derive(Default)]
pub(crate) struct Change<'a> {
    /// The commitInfo's `operation`, `operationParameters`, … (the time and
    /// sluice's version are added).
    pub operation: Value,
    /// Stored files it adds (their add actions made at each attempt).
    pub files: &'a [NewFile],
    /// Add actions made already (compaction's rewritten files).
    pub adds: &'a [Add],
    /// Files it removes (`dataChange: false`); each must still be in the
    /// table, read with its files.
    pub removes: &'a [Add],
    /// Application transactions it moves.
    pub transactions: &'a [Transaction],
    /// The files' columns (a Delta struct type), merged into the table's
    /// schema; None: the schema stays.
    pub schema: Option<&'a Value>,
}

/// Whether the change may still go ahead on `snapshot`.
enum Standing {
    Go,
    /// Its transactions are all at their new versions already.
    TransactionsIn,
    /// A file it removes is gone.
    RemovedGone(String),
    /// Another writer's commit, or the table, stands in its way.
    Blocked(TableError),
}

impl DeltaTable {
    /// Adds `change` to the log as the version after `snapshot`'s (read on
    /// first), trying again after other writers' versions; `snapshot` follows.
    pub(crate) async fn commit_change(
        &self,
        snapshot: &mut Snapshot,
        change: &Change<'_>,
    ) -> Result<Committed, TableError> {
        self.check_create_only().await?;
        // Versions lost to other writers in a row without the log moving on.
        let mut stuck = 0;
        // Versions refused by their precondition and not read back: one may
        // be this very commit, landed, its answer lost and its retry refused.
        let mut refused: Vec<(u64, Bytes)> = Vec::new();
        let now = now_ms();
        loop {
            let before = snapshot.version;
            self.refresh(snapshot).await?;
            if stuck > 0 && snapshot.version == before {
                if stuck >= MOST_STUCK {
                    return Err(TableError::Log {
                        key: format!(
                            "{}{}",
                            self.log_prefix,
                            log::commit_name(before.map_or(0, |v| v + 1))
                        ),
                        reason: "the version exists but the log does not list or read it".into(),
                    });
                }
                tokio::time::sleep(std::time::Duration::from_millis(100 << stuck)).await;
            }
            match self.standing(snapshot, change)? {
                Standing::Go => {}
                // Ours, if one of the versions refused holds what we wrote
                // (read before any refusal: a landed commit must not be
                // reported fenced); otherwise another commit's doing.
                standing => {
                    for (version, body) in refused.iter().rev() {
                        if self.log_holds(*version, body).await? {
                            tracing::info!(
                                version,
                                "a Delta commit whose answer was lost had landed"
                            );
                            return Ok(Committed::Version(*version));
                        }
                    }
                    return match standing {
                        Standing::RemovedGone(path) => Err(TableError::Log {
                            key: path,
                            reason: "another writer removed this file while it was being \
                                     compacted; the compacted files are orphans for vacuum"
                                .into(),
                        }),
                        Standing::Blocked(error) => Err(error),
                        Standing::TransactionsIn | Standing::Go => Ok(Committed::Already),
                    };
                }
            }
            let version = snapshot.version.map_or(0, |v| v + 1);
            let actions = self.actions(snapshot, change, version, now)?;
            let key = format!("{}{}", self.log_prefix, log::commit_name(version));
            let body = Bytes::from(log::write_commit(&actions));
            let mut put = PutRequest::new(key.clone(), body.clone());
            put.content_type = Some("application/json".into());
            put.condition = Some(WriteCondition::IfNoneMatch);
            match self.store.put_object(put).await {
                Ok(_) => {
                    snapshot.apply(version, actions);
                    return Ok(Committed::Version(version));
                }
                // Another writer has this version, or this commit does (it
                // landed, its answer was lost, its retry refused): read it.
                Err(StoreError::PreconditionFailed) => {
                    match self.log_holds(version, &body).await {
                        Ok(true) => {
                            tracing::info!(key, "a Delta commit whose answer was lost had landed");
                            let _ = self.refresh(snapshot).await;
                            return Ok(Committed::Version(version));
                        }
                        Ok(false) => {}
                        // Unread: looked at again if the change turns out
                        // to be in.
                        Err(_) => refused.push((version, body)),
                    }
                    stuck += 1;
                }
                Err(e) => {
                    // The answer may be lost with the commit in: the log tells,
                    // by holding at this version what was written.
                    tracing::warn!(key, error = %sluice_store::error_chain(&e), "a Delta commit failed; reading the log to see whether it landed");
                    if let Ok(true) = self.log_holds(version, &body).await {
                        let _ = self.refresh(snapshot).await;
                        return Ok(Committed::Version(version));
                    }
                    return Err(self.store_error(e));
                }
            }
        }
    }

    /// Refuses to commit on a store that ignores `If-None-Match` (found out
    /// once per writer, before its first commit).
    async fn check_create_only(&self) -> Result<(), TableError> {
        let honoured = self
            .create_only_honoured
            .get_or_try_init(|| async {
                sluice_store::probe::honours_create_only(self.store.as_ref(), &self.probe_prefix())
                    .await
                    .map_err(|e| self.store_error(e))
            })
            .await?;
        match honoured {
            true => Ok(()),
            false => Err(TableError::CreateOnlyIgnored {
                root: self.layout.location.clone(),
            }),
        }
    }

    /// Where the probe writes: beside the log (credentials scoped to the
    /// table reach it; readers pass over names that are no log file's).
    fn probe_prefix(&self) -> String {
        format!("{}_sluice_probe_", self.log_prefix)
    }

    /// Whether `change` still holds on `snapshot` (see the module's header).
    fn standing(&self, snapshot: &Snapshot, change: &Change<'_>) -> Result<Standing, TableError> {
        let found = |t: &Transaction| snapshot.txns.get(&t.app_id).copied();
        let transactions = change.transactions;
        if !transactions.is_empty() && transactions.iter().all(|t| found(t) == Some(t.version)) {
            return Ok(Standing::TransactionsIn);
        }
        if let Some(t) = transactions.iter().find(|t| found(t) != t.after) {
            return Ok(Standing::Blocked(TableError::Fenced {
                app_id: t.app_id.clone(),
                expected: t.after,
                found: found(t),
            }));
        }
        if !change.removes.is_empty() {
            let files = snapshot.files.as_ref().ok_or_else(|| TableError::Log {
                key: self.log_prefix.clone(),
                reason: "a commit that removes files needs the table read with its files".into(),
            })?;
            // Still the file planned: another writer may have removed it and
            // added it again under its path with a deletion vector (a DELETE).
            if let Some(gone) = change.removes.iter().find(|r| {
                files
                    .get(&r.path)
                    .is_none_or(|now| now.deletion_vector != r.deletion_vector)
            }) {
                return Ok(Standing::RemovedGone(gone.path.clone()));
            }
        }
        if let Some(reason) = snapshot.refusal() {
            return Ok(Standing::Blocked(TableError::Protocol {
                root: self.layout.location.clone(),
                reason,
            }));
        }
        Ok(Standing::Go)
    }

    /// The actions of `change` as `version`, the one after `snapshot`'s,
    /// with what the table's features ask of every commit: an in-commit
    /// timestamp past the last one, row ids and their high-water mark,
    /// partition values under the columns' physical names.
    fn actions(
        &self,
        snapshot: &Snapshot,
        change: &Change<'_>,
        version: u64,
        now: i64,
    ) -> Result<Vec<Action>, TableError> {
        let mut info = change.operation.clone();
        let timestamp = match snapshot.in_commit_timestamps() {
            true => now.max(snapshot.in_commit_timestamp.map_or(now, |last| last + 1)),
            false => now,
        };
        if let Value::Object(fields) = &mut info {
            if snapshot.in_commit_timestamps() {
                fields.insert("inCommitTimestamp".into(), json!(timestamp));
            }
            fields.insert("timestamp".into(), json!(timestamp));
            fields.insert(
                "clientVersion".into(),
                json!(concat!("sluice-", env!("CARGO_PKG_VERSION"))),
            );
        }
        let mut actions = vec![Action::CommitInfo(info)];
        if let Some(schema) = change.schema {
            actions.extend(self.metadata_actions(snapshot, schema, now)?);
        }
        actions.extend(change.transactions.iter().map(|t| {
            Action::Txn(Txn {
                app_id: t.app_id.clone(),
                version: t.version,
                last_updated: Some(now),
            })
        }));
        actions.extend(
            change
                .removes
                .iter()
                .map(|r| Action::Remove(r.removed_without_data_change(now))),
        );
        let stats_columns = snapshot.stats_columns();
        let mapping = snapshot
            .column_mapping()
            .map_err(|reason| TableError::Schema {
                root: self.layout.location.clone(),
                reason,
            })?;
        let mut adds = Vec::with_capacity(change.files.len() + change.adds.len());
        for file in change.files {
            let mut add = crate::add_action(&self.layout, file, now, &stats_columns)?;
            if let Some(mapping) = &mapping {
                add.partition_values = add
                    .partition_values
                    .into_iter()
                    .map(|(name, value)| {
                        let physical = mapping.physical_name(&name).unwrap_or(&name);
                        (physical.to_string(), value)
                    })
                    .collect();
            }
            adds.push((add, Some(file.records)));
        }
        adds.extend(change.adds.iter().map(|add| (add.clone(), None)));
        if features::has(snapshot.protocol.as_ref(), "rowTracking")
            && !snapshot.property_is_true(properties::ROW_TRACKING_SUSPENDED)
        {
            let mut high_water_mark = snapshot.row_id_high_water_mark().unwrap_or(-1);
            for (add, records) in &mut adds {
                let records = records.ok_or_else(|| TableError::Protocol {
                    root: self.layout.location.clone(),
                    reason: "the table tracks row ids (feature `rowTracking`), and a rewrite \
                             would have to keep them; sluice does not compact such a table"
                        .into(),
                })?;
                add.base_row_id = Some(high_water_mark + 1);
                add.default_row_commit_version = Some(version as i64);
                high_water_mark += records as i64;
            }
            if !adds.is_empty() {
                actions.push(Action::DomainMetadata(log::DomainMetadata {
                    domain: ROW_TRACKING_DOMAIN.into(),
                    configuration: json!({
                        "rowIdHighWaterMark": high_water_mark,
                        "domainName": ROW_TRACKING_DOMAIN,
                    })
                    .to_string(),
                    removed: false,
                }));
            }
        }
        actions.extend(adds.into_iter().map(|(add, _)| Action::Add(add)));
        Ok(actions)
    }
}
