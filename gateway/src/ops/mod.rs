//! Operations: the HTTP endpoint (`/metrics`, `/healthz`, `/readyz`), metric names and their
//! descriptions, and the cgroup CPU-quota watch.

pub mod cgroup_watch;
pub mod http;
pub mod metrics;
pub(crate) mod sip_stats;
pub mod ws_metrics;
