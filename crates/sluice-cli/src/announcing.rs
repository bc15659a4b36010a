//! The completion point of the commands that make objects outside a gateway
//! (`sluice ingest`, `sluice janitor`): the gateway's own, so that their objects
//! are announced as the gateway's are. With `--event-url`, an intent is written
//! before each object is made and its `upload.completed` event goes to the
//! outbox once it is (the gateways on the store deliver it), the intent removed
//! then; what a process killed in between leaves, the next run's reconciliation
//! (or any gateway's with events on the store) settles. Without one, nothing is
//! written: no intents pile up that nobody settles. Either way the objects are
//! counted (`sluice_uploads_completed_total`) and logged.

use sluice_server::completion::{reconcile, CompletionPoint};
use sluice_server::events::EventSettings;
use sluice_server::metrics::Metrics;
use sluice_upload::Engine;

use crate::UsageError;

/// The completion point a command's engine announces to.
pub struct Announcing {
    pub point: CompletionPoint,
    pub metrics: Metrics,
    settings: EventSettings,
}

impl Announcing {
    /// Announces every object `engine` makes for an origin through the
    /// gateway's completion point, with events as `settings` say.
    pub fn through(engine: &Engine, settings: &EventSettings) -> anyhow::Result<Announcing> {
        let metrics = Metrics::new();
        let point = CompletionPoint::announcing_for(engine, settings, metrics.clone())
            .map_err(|e| UsageError(e.to_string()))?;
        Ok(Announcing {
            point,
            metrics,
            settings: settings.clone(),
        })
    }

    /// With events on: one pass over the intents old enough to settle (an
    /// earlier run's, killed between an intent and its event); a report of it.
    pub async fn reconcile_now(&self) -> Option<reconcile::ReconcileReport> {
        if !self.point.events().enabled() {
            return None;
        }
        let now = sluice_server::events::outbox::now_ms();
        match reconcile::reconcile_once(&self.point, now, self.settings.reconcile_after, None).await
        {
            Ok(report) => Some(report),
            Err(error) => {
                tracing::warn!(error = %sluice_store::error_chain(&error), "could not reconcile intents; the next pass will");
                None
            }
        }
    }

    /// With events on: reconciles at once and then every
    /// `--event-reconcile-interval` while the returned guard lives.
    pub fn reconcile_meanwhile(&self) -> Option<Reconciling> {
        self.point.events().enabled().then(|| {
            Reconciling(reconcile::spawn(
                self.point.clone(),
                self.settings.reconcile_interval,
                self.settings.reconcile_after,
            ))
        })
    }
}

/// Reconciliation running in the background; stopped when dropped.
pub struct Reconciling(tokio::task::JoinHandle<()>);

impl Drop for Reconciling {
    fn drop(&mut self) {
        self.0.abort();
    }
}
