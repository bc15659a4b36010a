//! The reconciliation of intents: what a gateway killed between writing an
//! intent and recording its event (or an outbox write that failed) left
//! behind. Every gateway with events runs a pass at start-up and then every
//! `events.reconcile_interval`; passes of several gateways may overlap, since
//! every step is idempotent (an event's outbox entries have fixed names and are
//! written only when absent; removing an intent twice is removing it once).
//!
//! An intent younger than `events.reconcile_after` is left to the request
//! that wrote it, and one written where events go elsewhere (another
//! `--event-url` list) to a reconciliation that sends there. An older one is
//! settled by what the store says:
//!
//! | the intent's object | its multipart upload | the intent |
//! | --- | --- | --- |
//! | any | still open | waits (a completion may still run; the janitor aborts it in the end) |
//! | there, as intended (size, and checksum when both are known) | gone | becomes its event |
//! | there, as intended, and made after the intent | none (a single PUT) | becomes its event |
//! | missing or another | gone | is dropped: its object was never made |
//! | missing or another | none (a single PUT) | is dropped once `DROP_UNMADE_AFTER` old |
//! | there, as intended, and its table holds it (Delta: its log; Iceberg: a snapshot's manifests) | none (a table's file) | becomes its event |
//! | not in its table (or missing) | none (a table's file) | is dropped once `DROP_UNMADE_AFTER` old |
//!
//! A table's file is stored before its intent (the intent is written before
//! the commit that adds it, see `sluice_streams::table::announce`): its time
//! is not compared; the table says whether it came into being.
//!
//! A multipart object's time is not compared: S3 dates it from the upload's
//! start, which may be long before the intent. A pass reads at most
//! `PER_PASS` intents old enough to settle (their age from the listing) and
//! the next pass goes on after the last one, so a crowd of waiting intents
//! never hides the rest.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use sluice_store::{ObjectStore, StoreError};
use sluice_streams::table::delta::{DeltaTable, Snapshot, TableLayout};

use super::intents::IntentRecord;
use super::{Completion, CompletionPoint, Made};

/// How far the store's clock may be behind the gateway's.
const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// A single PUT, or a table's commit, still running this long after its
/// intent is no longer possible (their attempts give up far sooner): the
/// object will not come (a writer that commits later than this, alive,
/// records the event itself).
pub const DROP_UNMADE_AFTER: Duration = Duration::from_secs(15 * 60);

/// Intents looked at per pass.
const PER_PASS: usize = 1000;

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Intents read (old enough to settle).
    pub seen: usize,
    /// Turned into their events.
    pub confirmed: usize,
    /// Removed: their objects were never made.
    pub dropped: usize,
    /// Left for a later pass.
    pub waiting: usize,
    /// Where the next pass goes on (None: from the start).
    pub next: Option<String>,
}

/// What to do with one intent.
#[derive(Debug, PartialEq, Eq)]
enum Settled {
    Confirm,
    Drop,
    Wait,
}

/// One pass over the intents after `from`, at `now_ms`; intents younger than
/// `after` wait.
pub async fn reconcile_once(
    point: &CompletionPoint,
    now_ms: u64,
    after: Duration,
    from: Option<String>,
) -> Result<ReconcileReport, StoreError> {
    let mut report = ReconcileReport::default();
    let mut tables = TableReads::default();
    let mut cursor = from;
    let settled_before = UNIX_EPOCH + Duration::from_millis(now_ms) - after;
    loop {
        let (listed, more) = point.intents().list(cursor.as_deref(), PER_PASS).await?;
        for (name, written) in listed {
            cursor = Some(name.clone());
            if written > settled_before {
                report.waiting += 1;
                continue;
            }
            let intent = match point.intents().read(&name).await {
                Ok(Some(intent)) => intent,
                Ok(None) => continue,
                Err(error) => {
                    report.waiting += 1;
                    tracing::warn!(name, error = %sluice_store::error_chain(&error), "could not read an intent; trying again next pass");
                    continue;
                }
            };
            report.seen += 1;
            match settle(point, &mut tables, &intent, now_ms, after).await {
                Ok(Settled::Confirm) => report.confirmed += 1,
                Ok(Settled::Drop) => report.dropped += 1,
                Ok(Settled::Wait) => report.waiting += 1,
                Err(error) => {
                    report.waiting += 1;
                    tracing::warn!(key = %intent.key, intent = %intent.id, error = %sluice_store::error_chain(&error), "could not settle an intent; trying again next pass");
                }
            }
            if report.seen >= PER_PASS {
                report.next = cursor;
                return Ok(report);
            }
        }
        if !more {
            return Ok(report);
        }
    }
}

/// The tables one pass reads (each once), to settle their files' intents.
#[derive(Default)]
struct TableReads(HashMap<String, Option<TableRead>>);

/// What a table has held, as one pass read it.
enum TableRead {
    Delta(TableLayout, Box<Snapshot>),
    /// The store keys of the files its snapshots hold.
    Iceberg(std::collections::BTreeSet<String>),
}

impl TableReads {
    /// Whether the table at `table` has held the file at `key`; None when
    /// the table cannot be read now.
    async fn holds(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        table: &str,
        key: &str,
    ) -> Option<bool> {
        if !self.0.contains_key(table) {
            let read = match read_table(store, table).await {
                Ok(read) => Some(read),
                Err(error) => {
                    tracing::warn!(table, %error, "could not read a table to settle its files' intents; trying again next pass");
                    None
                }
            };
            self.0.insert(table.to_owned(), read);
        }
        Some(match self.0.get(table)?.as_ref()? {
            TableRead::Delta(layout, snapshot) => snapshot.has_held(layout, key),
            TableRead::Iceberg(held) => held.contains(key),
        })
    }
}

/// The table at `table`: an Iceberg table when its metadata is there, else
/// a Delta table (whose log may not be there either: it holds nothing).
async fn read_table(
    store: &Arc<dyn ObjectStore>,
    table: &str,
) -> Result<TableRead, Box<dyn std::error::Error + Send + Sync>> {
    let layout = TableLayout {
        location: table.to_owned(),
        partition_columns: Vec::new(),
    };
    let iceberg =
        sluice_iceberg::IcebergTable::new(store.clone(), layout.clone(), &store.describe());
    if iceberg.latest().await?.is_some() {
        return Ok(TableRead::Iceberg(iceberg.held_keys().await?));
    }
    let snapshot = DeltaTable::new(store.clone(), layout.clone())
        .read_with_files()
        .await?;
    Ok(TableRead::Delta(layout, Box::new(snapshot)))
}

async fn settle(
    point: &CompletionPoint,
    tables: &mut TableReads,
    intent: &IntentRecord,
    now_ms: u64,
    after: Duration,
) -> Result<Settled, StoreError> {
    let age = Duration::from_millis(now_ms.saturating_sub(intent.at_ms));
    if age < after {
        return Ok(Settled::Wait);
    }
    // Written by a gateway or command sending events elsewhere: left to one
    // that sends where it does (a janitor or ingest run with its own
    // --event-url never takes the gateways' events away from them).
    if intent
        .destination
        .as_ref()
        .is_some_and(|tag| Some(tag) != point.events().destination_tag().as_ref())
    {
        return Ok(Settled::Wait);
    }
    let store = &point.store;
    if let Some(upload_id) = &intent.multipart_upload_id {
        match store.list_parts(&intent.key, upload_id).await {
            Ok(_) => return Ok(Settled::Wait),
            Err(StoreError::NoSuchUpload { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let object = match store.head_object(&intent.key).await {
        Ok(meta) => Some(meta),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    let made_after = UNIX_EPOCH + Duration::from_millis(intent.at_ms);
    let multipart = intent.multipart_upload_id.is_some();
    let ours = object.filter(|meta| {
        let same_checksum = match (meta.checksum, intent.checksum()) {
            (Some(stored), Some(intended)) => stored == intended,
            _ => true,
        };
        // A multipart upload gone with an object of its size is its
        // completion; a table's file is stored before its intent.
        let in_time =
            multipart || intent.table.is_some() || meta.last_modified + CLOCK_SKEW >= made_after;
        meta.size == intent.size && same_checksum && in_time
    });
    let committed = match (&intent.table, &ours) {
        (Some(table), Some(_)) => match tables.holds(store, table, &intent.key).await {
            Some(held) => held,
            None => return Ok(Settled::Wait),
        },
        _ => true,
    };
    if let Some(meta) = ours.filter(|_| committed) {
        let made = Made {
            size: meta.size,
            etag: &meta.etag,
            checksum: meta.checksum,
            described: Some((
                meta.content_type.clone(),
                meta.metadata.clone().into_iter().collect(),
            )),
        };
        let completion = Completion::of(intent, &made);
        tracing::info!(key = %completion.key, intent = %intent.id, kind = %intent.kind, "an interrupted completion's object is there: recording its event");
        point.record(&completion).await?;
        return Ok(Settled::Confirm);
    }
    let never_made = multipart || age >= DROP_UNMADE_AFTER;
    if !never_made {
        return Ok(Settled::Wait);
    }
    tracing::info!(key = %intent.key, intent = %intent.id, kind = %intent.kind, "an interrupted completion made no object: dropping its intent");
    point.intents().remove(&intent.id).await?;
    Ok(Settled::Drop)
}

/// Runs a pass now and then every `interval` until the task is aborted.
pub fn spawn(
    point: CompletionPoint,
    interval: Duration,
    after: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut from: Option<String> = None;
        loop {
            let now = crate::events::outbox::now_ms();
            match reconcile_once(&point, now, after, from.take()).await {
                Ok(report) if report.confirmed + report.dropped > 0 => {
                    from = report.next.clone();
                    tracing::info!(
                        confirmed = report.confirmed,
                        dropped = report.dropped,
                        waiting = report.waiting,
                        "intents reconciled"
                    );
                }
                Ok(report) => from = report.next,
                Err(error) => {
                    tracing::warn!(error = %sluice_store::error_chain(&error), "could not list intents; trying again next interval");
                }
            }
            tokio::time::sleep(interval).await;
        }
    })
}
