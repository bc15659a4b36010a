//! The delivery worker, one per gateway: scans the outbox, claims each due
//! entry with a conditional write, POSTs it signed, and then removes it (2xx),
//! reschedules it with exponential backoff, or gives up on it once
//! `events.retry_for` has passed. Entries this worker saw scheduled for later
//! are skipped without a read until then. A claim lapses after twice the
//! delivery timeout, so an entry claimed by a gateway that died is taken up by
//! another.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::outbox::{now_ms, Entry, Outbox};
use super::{signature, EventsInner};

/// Deliveries in flight at once, per gateway.
const CONCURRENCY: usize = 8;
/// Entries looked at per pass.
const PER_PASS: usize = 1000;
/// Longest pause between two attempts at one entry.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

pub(super) async fn run(inner: Arc<EventsInner>) {
    let me = format!("gw-{}", uuid::Uuid::new_v4().simple());
    // A redirect is not followed (the signed event would go wherever it
    // points): a 3xx answer is a failed delivery, retried and logged.
    let client = match reqwest::Client::builder()
        .timeout(inner.settings.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "no HTTP client for events; they stay in the outbox");
            return;
        }
    };
    // Entries known not to be due before a time (ms), so they are not read again.
    let mut later: HashMap<String, u64> = HashMap::new();
    loop {
        let now = now_ms();
        let (due, pending) = due_entries(&inner.outbox, &later, now).await;
        if let Some(pending) = pending {
            inner.metrics.events_pending(pending);
        }
        later.retain(|_, at| *at > now);
        let rescheduled: Vec<Option<(String, u64)>> = futures::stream::iter(due)
            .map(|key| attempt(&inner, &client, &me, key))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        later.extend(rescheduled.into_iter().flatten());
        tokio::select! {
            () = tokio::time::sleep(inner.settings.poll_interval) => {}
            () = inner.written.notified() => {}
        }
    }
}

/// Keys of pending entries not known to be due later, in key order, and the
/// entries pending in all (at least that many, when the listing stopped at
/// [`PER_PASS`] due ones; none when it failed).
async fn due_entries(
    outbox: &Outbox,
    later: &HashMap<String, u64>,
    now: u64,
) -> (Vec<String>, Option<u64>) {
    let mut due = Vec::new();
    let mut seen = 0u64;
    let mut after: Option<String> = None;
    loop {
        let (keys, more) = match outbox.list(after.as_deref(), PER_PASS).await {
            Ok(page) => page,
            Err(error) => {
                tracing::warn!(%error, "cannot list the event outbox; trying again later");
                return (due, None);
            }
        };
        seen += keys.len() as u64;
        after = keys.last().cloned();
        due.extend(
            keys.into_iter()
                .filter(|k| later.get(k).is_none_or(|at| *at <= now)),
        );
        if !more || due.len() >= PER_PASS {
            return (due, Some(seen));
        }
    }
}

/// Twice the doubling pause of `attempts`, jittered: between half and all of
/// min(1 s × 2^(attempts-1), 1 h).
fn backoff(attempts: u32) -> u64 {
    let full = (1000u64 << attempts.saturating_sub(1).min(22)).min(MAX_BACKOFF.as_millis() as u64);
    let half = full / 2;
    half + (uuid::Uuid::new_v4().as_u128() % (half as u128 + 1)) as u64
}

/// One try at the entry `key`; returns when it is next due if it stays.
async fn attempt(
    inner: &EventsInner,
    client: &reqwest::Client,
    me: &str,
    key: String,
) -> Option<(String, u64)> {
    let outbox = &inner.outbox;
    let read = match outbox.read(&key).await {
        Ok(Some(read)) => read,
        Ok(None) => return None,
        Err(error) => {
            tracing::warn!(key, %error, "cannot read an outbox entry");
            return None;
        }
    };
    let now = now_ms();
    let mut entry = read.entry;
    if !entry.is_due(now) {
        return Some((key, entry.next_at_ms.max(entry.claimed_until_ms)));
    }
    entry.claimed_by = Some(me.to_owned());
    entry.claimed_until_ms = now + 2 * inner.settings.timeout.as_millis() as u64 + 1000;
    let etag = match outbox.replace(&key, &entry, &read.etag).await {
        Ok(Some(etag)) => etag,
        Ok(None) => return None, // another gateway has it
        Err(error) => {
            tracing::warn!(key, %error, "cannot claim an outbox entry");
            return None;
        }
    };
    let failure = match post(inner, client, &entry).await {
        Ok(()) => {
            inner.metrics.event_delivered();
            if let Err(error) = outbox.remove(&key).await {
                // Delivered again after the claim lapses: a duplicate, never a loss.
                tracing::warn!(key, %error, "delivered, but the outbox entry stays");
            }
            return None;
        }
        Err(failure) => failure,
    };
    let now = now_ms();
    entry.attempts += 1;
    entry.claimed_by = None;
    entry.claimed_until_ms = 0;
    entry.last_error = Some(failure.clone());
    tracing::info!(
        event = %entry.event.id,
        url = %entry.url,
        attempts = entry.attempts,
        error = %failure,
        "event delivery failed"
    );
    if now >= entry.give_up_at_ms {
        inner.metrics.event_given_up();
        tracing::warn!(event = %entry.event.id, url = %entry.url, "event given up on");
        if let Err(error) = outbox.give_up(&key, &entry).await {
            tracing::warn!(key, %error, "cannot move a failed event to failed/");
        }
        return None;
    }
    inner.metrics.event_delivery_failed();
    entry.next_at_ms = (now + backoff(entry.attempts)).min(entry.give_up_at_ms);
    match outbox.replace(&key, &entry, &etag).await {
        Ok(_) => Some((key, entry.next_at_ms)),
        Err(error) => {
            tracing::warn!(key, %error, "cannot reschedule an outbox entry");
            None
        }
    }
}

/// POSTs the entry's event, signed; the failure as text.
async fn post(inner: &EventsInner, client: &reqwest::Client, entry: &Entry) -> Result<(), String> {
    let body = serde_json::to_vec(&entry.event).expect("events serialise");
    let timestamp = now_ms() / 1000;
    let kind = serde_json::to_value(entry.event.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let answer = client
        .post(&entry.url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(
            signature::HEADER,
            signature::sign(&inner.secret, timestamp, &body),
        )
        .header("sluice-event-id", &entry.event.id)
        .header("sluice-event-type", kind)
        .body(body)
        .send()
        .await
        .map_err(|e| format!("{e}"))?;
    match answer.status().is_success() {
        true => Ok(()),
        false => Err(format!("answered {}", answer.status())),
    }
}
