//! Start-up and shutdown: the metrics recorder, the sender thread, the inference thread, the SIP
//! loop, the ops endpoint and the signal-driven drain, in the order design.md §4 gives.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use ontime_inference::{InferencePool, ModelPaths, PoolConfig};
use ontime_sender::{Sender, SenderConfig, LATENESS_BUCKET_BOUNDS};
use tokio::net::UdpSocket;
use tracing::{info, warn};

use crate::agent::Agent;
use crate::config::Config;
use crate::http::{self, OpsState};
use crate::metrics as m;
use crate::ports::PortPool;
use crate::server::{Shared, SipLoop};

/// Folder searched for the runtime and models when neither flag nor env names one.
pub const DEFAULT_MODELS_DIR: &str = ".cache/models";

struct Ops {
    prometheus: PrometheusHandle,
    shared: Arc<Shared>,
}

impl OpsState for Ops {
    fn render_metrics(&self) -> String {
        self.prometheus.render()
    }
    fn ready(&self) -> bool {
        self.shared.ready()
    }
}

/// Addresses the gateway listens on, once bound.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// SIP (UDP).
    pub sip: SocketAddr,
    /// Metrics and health (HTTP).
    pub ops: SocketAddr,
}

fn install_recorder() -> anyhow::Result<PrometheusHandle> {
    let buckets: Vec<f64> = LATENESS_BUCKET_BOUNDS
        .iter()
        .map(|d| d.as_secs_f64())
        .collect();
    let inference_buckets = [
        0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
    ];
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("ontime_sender_tick_lateness_seconds".into()),
            &buckets,
        )?
        .set_buckets_for_metric(
            Matcher::Prefix("ontime_inference_".into()),
            &inference_buckets,
        )?
        .set_buckets_for_metric(
            Matcher::Full(m::AGENT_BUFFERED_AUDIO_SECONDS.into()),
            m::AGENT_BUFFERED_AUDIO_BUCKETS_SECONDS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(crate::ws_agent::WS_CONNECT_SECONDS.into()),
            crate::ws_agent::CONNECT_BUCKETS_SECONDS,
        )?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).context("a metrics recorder was already installed")?;
    Ok(handle)
}

/// Run the gateway until SIGTERM/SIGINT and the drain that follows. `on_bound` learns the
/// listening addresses (tests and embedders).
pub async fn run(
    config: Config,
    agent: Arc<dyn Agent>,
    on_bound: impl FnOnce(Bound),
) -> anyhow::Result<()> {
    let config = Arc::new(config);
    let prometheus = install_recorder()?;
    m::describe_and_zero(ontime_rtp::packet::RtpError::REASONS);
    ontime_sender::describe_metrics();
    ontime_inference::metrics::describe_metrics();

    let sender = Sender::start(SenderConfig {
        core: config.sender_core,
        ..SenderConfig::default()
    })
    .context("starting the real-time sender")?;
    let sender = Arc::new(sender);
    // The sender logs whether it got SCHED_FIFO (and why not) itself.
    let mut paths = ModelPaths::from_env_or(
        config
            .models_dir
            .clone()
            .unwrap_or_else(|| DEFAULT_MODELS_DIR.into()),
    );
    if let Some(dylib) = &config.ort_dylib_path {
        paths.ort_dylib = dylib.clone();
    }
    let mut pool_config = PoolConfig::new(paths);
    pool_config.turn.incomplete_timeout = config.turn_stop_timeout;
    // The inference budget keeps model work inside the container's CFS quota (design.md §4).
    let pool_config = match pool_config.clone().with_cgroup_quota() {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "CPU quota unreadable: inference runs without a CPU budget");
            pool_config
        }
    };
    crate::cgroup_watch::publish_quota();
    let pool = Arc::new(InferencePool::start(pool_config).context("starting the inference pool")?);

    let shared = Arc::new(Shared {
        accepting: AtomicBool::new(true),
        active_calls: AtomicUsize::new(0),
        max_calls: config.max_calls,
        ports: Mutex::new(PortPool::new(config.rtp_ports)),
    });
    let sip_socket = UdpSocket::bind(config.sip_listen)
        .await
        .with_context(|| format!("binding SIP on {}", config.sip_listen))?;
    let sip_addr = sip_socket.local_addr()?;
    let (ops_addr, ops_task) = http::serve(
        config.metrics_listen,
        Arc::new(Ops {
            prometheus: prometheus.clone(),
            shared: shared.clone(),
        }),
    )
    .await
    .with_context(|| format!("binding metrics on {}", config.metrics_listen))?;

    let sip_loop = SipLoop::new(
        sip_socket,
        config.clone(),
        shared.clone(),
        sender.clone(),
        pool.clone(),
        agent,
    )?;
    info!(sip = %sip_addr, metrics = %ops_addr, rtp_ports = ?config.rtp_ports, max_calls = config.max_calls, "ontime-gateway ready");
    on_bound(Bound {
        sip: sip_addr,
        ops: ops_addr,
    });

    let (drain_tx, drain_rx) = tokio::sync::watch::channel(None);
    let drain_timeout = config.drain_timeout;
    tokio::spawn(async move {
        wait_for_signal().await;
        info!(
            grace_s = drain_timeout.as_secs_f64(),
            "signal received: draining"
        );
        let _ = drain_tx.send(Some(Instant::now() + drain_timeout));
    });

    let publisher = {
        let sender = sender.clone();
        let shared = shared.clone();
        let prometheus = prometheus.clone();
        tokio::spawn(async move {
            let mut cgroup = crate::cgroup_watch::CgroupWatch::new();
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                sender.publish_metrics();
                metrics::gauge!(m::CALLS_ACTIVE)
                    .set(shared.active_calls.load(Ordering::Relaxed) as f64);
                cgroup.publish();
                prometheus.run_upkeep();
            }
        })
    };

    sip_loop.run(drain_rx).await;
    publisher.abort();
    sender.publish_metrics();
    ops_task.abort();
    info!("ontime-gateway stopped");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            warn!("cannot install signal handlers; Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
