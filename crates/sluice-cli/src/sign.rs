//! `sluice sign`: prints a signed URL (one method on one key until a time) for a
//! gateway that takes signed URLs made with the same secret.

use anyhow::Context;
use sluice_server::auth::signed_url::{encode_key, SignedRequest};

use crate::args::SignArgs;
use crate::UsageError;

pub fn run(args: SignArgs) -> anyhow::Result<()> {
    let secret = sluice_server::auth::read_secret("--url-secret-file", &args.url_secret_file)
        .map_err(|e| UsageError(e.to_string()))?;
    sluice_server::keys::validate_client_key(&args.key)
        .map_err(|reason| UsageError(format!("--key: {reason}")))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("the clock is before 1970")?;
    let path = format!("/v1/objects/{}", encode_key(&args.key));
    let request = SignedRequest {
        method: args.method,
        path: path.clone(),
        expires: (now + args.expires).as_secs(),
        tenant: args.tenant,
        max_size: args.max_size,
    };
    crate::output::out!(
        "{}{path}?{}",
        args.base_url.trim_end_matches('/'),
        request.query(&secret)
    );
    Ok(())
}
