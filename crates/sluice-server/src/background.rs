//! The gateway's work beside its requests, owned in one place: the janitor
//! (expired resumable uploads, stale multipart uploads), the reload of auth
//! keys and of the TLS certificate, event delivery from the outbox, the
//! reconciliation of intents, the confirmation of direct uploads, imports to
//! carry on (a dead gateway's), and the store
//! heartbeat (a store that dies while no upload asks it is noticed all the
//! same). [`Background::start`] starts what the settings ask for and
//! [`Background::stop`] stops it all; the listener (`server.rs`) does both
//! around serving, and a test can run them against a gateway of its own
//! without a socket.

use tokio::task::JoinHandle;

use crate::AppState;

/// The background tasks of one gateway; stopped when dropped.
#[derive(Debug, Default)]
pub struct Background {
    /// (what it is, its task), in the order they started.
    tasks: Vec<(&'static str, JoinHandle<()>)>,
}

impl Background {
    /// Starts every task `state`'s settings ask for.
    pub fn start(state: &AppState) -> Background {
        let mut tasks: Vec<(&'static str, Option<JoinHandle<()>>)> = Vec::new();
        let janitor = &state.config.janitor;
        tasks.push((
            "janitor",
            (!janitor.interval.is_zero()).then(|| {
                crate::janitor::spawn(
                    state.resumable.clone(),
                    state.store.clone(),
                    janitor.interval,
                    janitor.older_than,
                )
            }),
        ));
        tasks.push(("auth key reloader", state.auth.spawn_key_reloader()));
        tasks.push(("event delivery", state.completion.events().spawn_delivery()));
        // Intents not settled when it stops stay for the next pass of any gateway.
        tasks.push((
            "intent reconciliation",
            state.completion.events().settings().map(|events| {
                crate::completion::reconcile::spawn(
                    state.completion.clone(),
                    events.reconcile_interval,
                    events.reconcile_after,
                )
            }),
        ));
        tasks.push((
            "direct upload confirmation",
            crate::direct::confirm::spawn(state.clone()),
        ));
        tasks.push(("imports", crate::imports::spawn(state.clone())));
        tasks.push((
            "TLS certificate reloader",
            state.tls.as_ref().map(|tls| {
                let metrics = state.metrics.clone();
                state.metrics.tls_certificate_loaded(tls.not_after());
                tls.spawn_reloader(move |expires| metrics.tls_certificate_loaded(expires))
            }),
        ));
        tasks.push((
            "store heartbeat",
            state
                .engine
                .breaker()
                .map(|breaker| breaker.spawn_heartbeat()),
        ));
        Background {
            tasks: tasks
                .into_iter()
                .filter_map(|(name, task)| task.map(|task| (name, task)))
                .collect(),
        }
    }

    /// What runs, by name (for tests and logs).
    pub fn running(&self) -> Vec<&'static str> {
        self.tasks
            .iter()
            .filter(|(_, task)| !task.is_finished())
            .map(|(name, _)| *name)
            .collect()
    }

    /// Stops every task (as dropping it does). What delivery had not
    /// delivered stays in the outbox for the next gateway; intents stay for
    /// the next reconciliation.
    pub fn stop(self) {}
}

impl Drop for Background {
    fn drop(&mut self) {
        for (name, task) in self.tasks.drain(..) {
            task.abort();
            tracing::debug!(task = name, "background task stopped");
        }
    }
}
