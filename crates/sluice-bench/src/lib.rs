//! `sluice bench`: load generation against an upload gateway (sluice's own PUT and
//! form POST, or any tus 1.0 server), with a closed model (N users, each uploading in
//! a loop) or an open model (a constant arrival rate whatever the response times).
//!
//! A run is described by a [`LoadPlan`], validated before anything is sent (targets
//! outside loopback need `allow_remote`; every run is bounded by a count or a
//! duration), executed by [`run`], and summarised as a [`Summary`] that renders as a
//! text table or serialises as the JSON documented in docs/BENCH.md.
//! [`strategies`] times one object per size as a single PUT and as sequential and
//! parallel multipart uploads against a store.

mod error;
mod html;
mod http;
mod plan;
mod record;
mod report;
mod run;
pub mod strategies;
mod upload;

pub use error::BenchError;
pub use html::render_html;
pub use plan::{Api, KeyScheme, LoadPlan, Model, Stop, Target, MAX_OBJECT_SIZE};
pub use record::{Latency, Second, Summary, SCHEMA};
pub use run::{run, Tick};
