//! `sluice events`: the upload events in a store's outbox, still being
//! delivered or given up on, one line each (oldest event first).

use anyhow::Context;
use sluice_server::events::outbox::Outbox;

use crate::args::EventsArgs;

pub async fn run(args: EventsArgs) -> anyhow::Result<()> {
    let store = args.store.open().await?;
    let description = store.describe();
    let entries = Outbox::new(store)
        .entries(args.failed, args.limit)
        .await
        .with_context(|| format!("reading the event outbox of {description}"))?;
    for entry in &entries {
        let next = match args.failed {
            true => "given up".to_owned(),
            false => {
                let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(entry.next_at_ms);
                let at = humantime::format_rfc3339_seconds(at);
                format!("next {at}")
            }
        };
        crate::output::out!(
            "{} {} {} -> {} attempts {} {} {}",
            entry.event.id,
            serde_json::to_value(entry.event.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            entry.event.data.key,
            entry.url,
            entry.attempts,
            next,
            entry
                .last_error
                .as_deref()
                .map(|e| format!("(last: {e})"))
                .unwrap_or_default(),
        );
    }
    eprintln!(
        "{} event deliveries {} in {description}",
        entries.len(),
        if args.failed {
            "given up on"
        } else {
            "pending"
        }
    );
    Ok(())
}
