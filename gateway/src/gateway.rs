//! The embeddable gateway: [`Gateway::builder`] takes a [`Config`] and an [`Agent`],
//! [`GatewayBuilder::bind`] starts the real-time sender and the inference thread and binds the
//! sockets, and [`Gateway::run`] serves calls until the shutdown future resolves, then drains.
//!
//! What belongs to the host program stays there: the global metrics recorder (the gateway only
//! emits through the `metrics` facade; pass [`GatewayBuilder::metrics_renderer`] to serve it on
//! `/metrics`), signal handling (the binary turns SIGTERM into the shutdown future), logging and
//! the command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ontime_inference::{InferencePool, ModelPaths, PoolConfig, VadParams};
use ontime_sender::{Sender, SenderConfig};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::admission::headroom::{HeadroomEstimator, HeadroomLimits, Sample};
use crate::admission::CallSlots;
use crate::agent::Agent;
use crate::call_driver::CallServices;
use crate::config::Config;
use crate::ops::cgroup_watch::{self, CgroupWatch};
use crate::ops::http::{self, OpsState};
use crate::ops::metrics::{self as m, JitterDepthGauge};
use crate::records::recording::CallRecording;
use crate::registry::CallRegistry;
use crate::routing::VoiceRoute;
use crate::sip_driver::SipDriver;

/// Folder searched for the runtime and models when neither flag nor env names one.
pub const DEFAULT_MODELS_DIR: &str = ".cache/models";

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The real-time sender thread could not start.
    #[error("starting the real-time sender: {0}")]
    Sender(#[from] ontime_sender::Error),
    /// The inference pool (ONNX Runtime, models) could not start.
    #[error("starting the inference pool: {0}")]
    Inference(#[from] ontime_inference::Error),
    /// A listening socket could not be bound.
    #[error("binding {what} on {addr}: {source}")]
    Bind {
        /// Which socket (`SIP`, `metrics`).
        what: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The recording folder (`record`) cannot be written.
    #[error("config field `record`: cannot write recordings into {path}: {source}")]
    RecordDir {
        /// The folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The builder was not given an agent.
    #[error("no agent: call GatewayBuilder::agent")]
    NoAgent,
    /// A registrar (`register`) cannot be resolved.
    #[error("config field `register`: {aor}: {source}")]
    Register {
        /// The address of record whose registrar it is.
        aor: String,
        /// Why its URI names no address.
        source: crate::resolve::ResolveError,
    },
    /// A TLS file or setting cannot be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The HTTP client for TwiML fetches and status callbacks could not be built (its TLS
    /// roots: `tls_ca_file`).
    #[error("call-control API's HTTP client: {0}")]
    Api(#[source] crate::tls::TlsError),
    /// The `voice_twiml` document is not TwiML ontime runs.
    #[error("config field `voice_twiml`: {0}")]
    VoiceTwiml(#[source] ontime_twilio::TwimlError),
}

/// Renders the metrics the host's recorder collected (Prometheus text) for `/metrics`.
pub type MetricsRenderer = Arc<dyn Fn() -> String + Send + Sync>;

/// Addresses the gateway listens on, once bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bound {
    /// SIP (UDP).
    pub sip: SocketAddr,
    /// Metrics and health (HTTP).
    pub ops: SocketAddr,
    /// The call-control API (HTTP), if configured.
    pub api: Option<SocketAddr>,
    /// SIP over TCP, if configured.
    pub sip_tcp: Option<SocketAddr>,
    /// SIP over TLS, if configured.
    pub sip_tls: Option<SocketAddr>,
}

/// The stream transports, bound.
struct BoundStreams {
    streams: crate::sip_driver::Streams,
    tcp: Option<SocketAddr>,
    tls: Option<SocketAddr>,
}

/// Resolve the registrations (RFC 3263; through the trunk as outbound proxy when one is
/// configured). A registrar that cannot be resolved stops the start: it names the field.
async fn resolve_registrations(
    config: &Config,
) -> Result<Vec<crate::sip_driver::Registration>, Error> {
    let mut out = Vec::new();
    for aor in &config.register {
        let register = |source| Error::Register {
            aor: aor.clone(),
            source,
        };
        let target = crate::resolve::SipTarget::parse(aor).map_err(register)?;
        let (destination, transport) = match &config.trunk_uri {
            Some(trunk) => (trunk.addr, trunk.transport),
            None => (
                crate::resolve::resolve(&target).await.map_err(register)?,
                target.transport,
            ),
        };
        out.push(crate::sip_driver::Registration {
            aor: aor.clone(),
            destination,
            transport,
        });
    }
    Ok(out)
}

/// Bind the SIP TCP and TLS listeners that are configured and start accepting.
async fn bind_streams(config: &Arc<Config>) -> Result<BoundStreams, Error> {
    let (tx, rx) = mpsc::channel(1024);
    let client = crate::tls::client_config(config.tls_ca_file.as_deref())?;
    let registrations = resolve_registrations(config).await?;
    // Calls arriving over a registration come from the registrar: trusted like the trunk.
    let mut trusted = config.trunk_cidrs.clone();
    trusted.extend(
        registrations
            .iter()
            .map(|r| ipnet::IpNet::from(r.destination.ip())),
    );
    let trunk = trusted.clone();
    // TLS to the trunk and the registrars verifies the host names written in the config.
    let mut names = std::collections::HashMap::new();
    let hosts = config
        .trunk_uri
        .iter()
        .map(|t| (t.addr, t.host_port.clone()))
        .chain(registrations.iter().map(|r| (r.destination, r.aor.clone())));
    for (addr, uri_or_host) in hosts {
        let host = crate::resolve::SipTarget::parse(&uri_or_host)
            .or_else(|_| crate::resolve::SipTarget::parse(&format!("sip:{uri_or_host}")))
            .map(|t| t.host);
        if let Ok(host) = host {
            if host.parse::<std::net::IpAddr>().is_err() {
                names.insert(addr.ip(), host);
            }
        }
    }
    let transports = crate::transport::StreamTransports::new(
        tx,
        Some(tokio_rustls::TlsConnector::from(client)),
        Arc::new(move |ip| trunk.iter().any(|n| n.contains(&ip))),
        names,
    );
    let bind = |what: &'static str, addr: SocketAddr| async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { what, addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| Error::Bind { what, addr, source })?;
        Ok::<_, Error>((listener, local))
    };
    let mut tcp = None;
    if let Some(addr) = config.sip_listen_tcp {
        let (listener, local) = bind("SIP TCP", addr).await?;
        transports.listen(listener, None);
        tcp = Some(local);
    }
    let mut tls = None;
    if let (Some(addr), Some(cert), Some(key)) =
        (config.sip_listen_tls, &config.tls_cert, &config.tls_key)
    {
        let server = crate::tls::server_config(cert, key)?;
        let (listener, local) = bind("SIP TLS", addr).await?;
        transports.listen(listener, Some(tokio_rustls::TlsAcceptor::from(server)));
        tls = Some(local);
    }
    let advertise = |a: Option<SocketAddr>| a.map(|a| SocketAddr::new(config.public_ip, a.port()));
    Ok(BoundStreams {
        streams: crate::sip_driver::Streams {
            transports,
            messages: rx,
            tcp_addr: advertise(tcp),
            tls_addr: advertise(tls),
            registrations,
            trusted,
        },
        tcp,
        tls,
    })
}

/// Builds a [`Gateway`].
#[must_use]
pub struct GatewayBuilder {
    config: Config,
    agent: Option<Arc<dyn Agent>>,
    renderer: Option<MetricsRenderer>,
}

impl GatewayBuilder {
    /// The agent that answers every call.
    pub fn agent(mut self, agent: Arc<dyn Agent>) -> Self {
        self.agent = Some(agent);
        self
    }

    /// What `/metrics` serves (e.g. a `metrics-exporter-prometheus` handle's `render`). Without
    /// it, `/metrics` answers 404 and the host exposes its recorder its own way.
    pub fn metrics_renderer(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.renderer = Some(Arc::new(render));
        self
    }

    /// Start the sender and inference threads and bind SIP and the ops endpoint; calls are
    /// served once [`Gateway::run`] is awaited.
    pub async fn bind(self) -> Result<Gateway, Error> {
        let agent = self.agent.ok_or(Error::NoAgent)?;
        Gateway::start(self.config, agent, self.renderer).await
    }
}

struct Ops {
    renderer: Option<MetricsRenderer>,
    slots: Arc<CallSlots>,
}

impl OpsState for Ops {
    fn render_metrics(&self) -> Option<String> {
        self.renderer.as_ref().map(|r| r())
    }
    fn readiness(&self) -> Result<(), &'static str> {
        self.slots.readiness().map_err(|r| r.describe())
    }
}

/// A bound gateway, ready to [`run`](Gateway::run).
pub struct Gateway {
    config: Arc<Config>,
    bound: Bound,
    sender: Arc<Sender>,
    slots: Arc<CallSlots>,
    jitter_depth: Arc<JitterDepthGauge>,
    headroom: HeadroomEstimator,
    sip_driver: SipDriver,
    ops_task: tokio::task::JoinHandle<()>,
    registry: Arc<CallRegistry>,
    api_task: Option<tokio::task::JoinHandle<()>>,
    pool: Arc<InferencePool>,
}

impl Gateway {
    /// A builder for a gateway with this configuration.
    pub fn builder(config: Config) -> GatewayBuilder {
        GatewayBuilder {
            config,
            agent: None,
            renderer: None,
        }
    }

    async fn start(
        config: Config,
        agent: Arc<dyn Agent>,
        renderer: Option<MetricsRenderer>,
    ) -> Result<Gateway, Error> {
        let config = Arc::new(config);
        if let Some(dir) = &config.record_dir {
            CallRecording::check_dir(dir).map_err(|source| Error::RecordDir {
                path: dir.clone(),
                source,
            })?;
        }
        m::describe_and_zero(ontime_rtp::packet::RtpError::REASONS);
        crate::ops::ws_metrics::describe_ws_metrics(crate::agent::ws::SENT_EVENTS);
        ontime_sender::describe_metrics();
        crate::ops::sip_stats::describe();
        ontime_inference::metrics::describe_metrics();

        let sender = Arc::new(Sender::start(SenderConfig {
            core: config.sender_core,
            ..SenderConfig::default()
        })?);
        // The sender logs whether it got SCHED_FIFO (and why not) itself.
        let pool_config = pool_config(&config);
        let headroom_limits = headroom_limits(&pool_config);
        info!(
            inference_cores = headroom_limits.inference_cores,
            process_cores = headroom_limits.process_cores,
            "admission estimates headroom on these CPU shares"
        );
        let pool = Arc::new(InferencePool::start(pool_config)?);
        let pool_handle = pool.clone();

        let slots =
            CallSlots::with_reserve(config.max_calls, config.rtp_ports, config.admission_reserve);
        // Ready from the prior before the SIP port is bound, not from the first measurement a
        // second later: the first OPTIONS a front door sends must get the answer `/readyz` gives.
        let headroom = HeadroomEstimator::new(headroom_limits);
        slots.set_headroom(headroom.prior().calls);
        let sip_socket =
            UdpSocket::bind(config.sip_listen)
                .await
                .map_err(|source| Error::Bind {
                    what: "SIP",
                    addr: config.sip_listen,
                    source,
                })?;
        let sip = sip_socket.local_addr().map_err(|source| Error::Bind {
            what: "SIP",
            addr: config.sip_listen,
            source,
        })?;
        let jitter_depth = Arc::new(JitterDepthGauge::default());
        let (sip_tx, sip_rx) = mpsc::unbounded_channel();
        let (registry_tx, registry_rx) = mpsc::unbounded_channel();
        let admit_slots = slots.clone();
        let callbacks = crate::api::wiring::callbacks(&config).map_err(Error::Api)?;
        let registry = Arc::new(CallRegistry::new(
            config.api_account_sid.clone(),
            registry_tx,
            callbacks.clone(),
            config.trunk_uri.is_some(),
            Box::new(move || admit_slots.ready()),
        ));
        let route = voice_route(&config, &callbacks)?;
        let api = match config.api_listen {
            Some(addr) => Some(
                crate::api::wiring::start(addr, registry.clone(), &config, callbacks.clone())
                    .await
                    .map_err(|source| Error::Bind {
                        what: "API",
                        addr,
                        source,
                    })?,
            ),
            None => None,
        };
        let mut ws_base = crate::agent::WsAgentConfig::from_config("", &config);
        ws_base.url.clear();
        let services = CallServices {
            sender: sender.clone(),
            pool,
            agent,
            sip: sip_tx,
            jitter_depth: jitter_depth.clone(),
            record_dir: config.record_dir.clone(),
            registry: registry.clone(),
            ws_base: Arc::new(ws_base),
            symmetric_rtp: config.symmetric_rtp,
        };
        let streams = bind_streams(&config).await?;
        let (sip_tcp, sip_tls) = (streams.tcp, streams.tls);
        let sip_driver = SipDriver::new(
            sip_socket,
            config.clone(),
            slots.clone(),
            services,
            crate::sip_driver::Requests {
                calls: sip_rx,
                registry: registry_rx,
            },
            route,
            streams.streams,
        )
        .map_err(|source| Error::Bind {
            what: "SIP",
            addr: config.sip_listen,
            source,
        })?;
        // Last: `/readyz` says ready only once every listener (SIP, API) is bound.
        let (ops, ops_task) = http::serve(
            config.metrics_listen,
            Arc::new(Ops {
                renderer,
                slots: slots.clone(),
            }),
        )
        .await
        .map_err(|source| Error::Bind {
            what: "metrics",
            addr: config.metrics_listen,
            source,
        })?;
        let (api, api_task) = match api {
            Some((addr, task)) => (Some(addr), Some(task)),
            None => (None, None),
        };
        info!(%sip, metrics = %ops, api = ?api, rtp_ports = ?config.rtp_ports, max_calls = config.max_calls, "ontime-gateway ready");
        Ok(Gateway {
            config,
            bound: Bound {
                sip,
                sip_tcp,
                sip_tls,
                ops,
                api,
            },
            registry,
            api_task,
            pool: pool_handle,
            sender,
            slots,
            jitter_depth,
            headroom,
            sip_driver,
            ops_task,
        })
    }

    /// The addresses bound.
    pub fn local_addrs(&self) -> Bound {
        self.bound
    }

    /// The calls, as the call-control API sees and acts on them: an embedding program hangs
    /// up, sends digits, transfers (`update`) and dials out (`create`) through this, exactly as
    /// the HTTP API does.
    pub fn call_control(&self) -> Arc<dyn ontime_twilio::CallControl> {
        self.registry.clone()
    }

    /// Serve calls until `shutdown` resolves, then drain: no new calls (503), calls in progress
    /// get `drain_timeout` to end, then a BYE; returns once every call has ended.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send + 'static) {
        let (drain_tx, drain_rx) = tokio::sync::watch::channel(None);
        let drain_timeout = self.config.drain_timeout;
        let waiter = tokio::spawn(async move {
            shutdown.await;
            info!(grace_s = drain_timeout.as_secs_f64(), "shutdown: draining");
            let _ = drain_tx.send(Some(Instant::now() + drain_timeout));
        });
        let publisher = {
            let sender = self.sender.clone();
            let pool = self.pool.clone();
            let slots = self.slots.clone();
            let depth = self.jitter_depth.clone();
            let mut headroom = self.headroom;
            tokio::spawn(async move {
                let mut cgroup = CgroupWatch::new();
                let mut every = tokio::time::interval(Duration::from_secs(1));
                loop {
                    every.tick().await;
                    sender.publish_metrics();
                    metrics::gauge!(m::CALLS_ACTIVE).set(slots.active() as f64);
                    depth.publish();
                    let (periods, throttled) = cgroup.publish();
                    let inference = pool.stats();
                    let estimate = headroom.update(Sample {
                        at: Instant::now(),
                        calls: slots.active(),
                        admitted: slots.admitted(),
                        inference_cpu: Duration::from_nanos(inference.model_cpu_ns),
                        turn_cpu: Duration::from_nanos(inference.turn_cpu_ns),
                        turn_runs: inference.turn_runs,
                        process_cpu: ontime_inference::process_cpu_time(),
                        queue_wait: Duration::from_nanos(inference.queue_wait_ns),
                        queue_waits: inference.queue_waits,
                        late_ticks: sender.stats().late_ticks,
                        periods,
                        throttled,
                    });
                    slots.set_headroom(estimate.calls);
                    metrics::gauge!(m::ADMISSION_HEADROOM_CALLS).set(slots.headroom() as f64);
                }
            })
        };
        self.sip_driver.run(drain_rx).await;
        publisher.abort();
        waiter.abort();
        self.sender.publish_metrics();
        self.ops_task.abort();
        if let Some(t) = self.api_task {
            t.abort();
        }
        info!("ontime-gateway stopped");
    }
}

/// The voice route of inbound calls from the configuration.
fn voice_route(config: &Config, callbacks: &crate::api::Callbacks) -> Result<VoiceRoute, Error> {
    if let Some(text) = &config.voice_twiml {
        let verbs = ontime_twilio::parse_twiml(text).map_err(Error::VoiceTwiml)?;
        return Ok(VoiceRoute::Twiml(Arc::new(verbs)));
    }
    if let Some(url) = &config.voice_url {
        let callbacks = callbacks.clone();
        return Ok(VoiceRoute::Url {
            url: url.clone(),
            fetch: Arc::new(move |url, params| {
                let callbacks = callbacks.clone();
                Box::pin(async move {
                    callbacks
                        .fetch_twiml(&url, false, &params)
                        .await
                        .map_err(|e| e.to_string())
                })
            }),
        });
    }
    Ok(VoiceRoute::Agent)
}

/// The headroom estimate's limits for this process: the inference thread gets at most one
/// core, and under a CPU quota only what its CPU budget allows it per CFS period (the quota
/// less `budget_reserve`, which the pool keeps for the rest of the process): under a 0.5-CPU
/// quota that is 0.4 of a core, not 0.5; estimating from the whole quota admitted calls the
/// thread then could not serve (queue waits of 2 s, docs/capacity.md).
/// The quota is the one the pool read for its budget (not read again).
fn headroom_limits(pool: &PoolConfig) -> HeadroomLimits {
    // The CPUs this process may run on (a cpuset or affinity mask).
    let cpus = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
    limits_for(pool.quota, cpus, pool.budget_reserve)
}

/// [`headroom_limits`] for a given quota and CPU count.
fn limits_for(
    quota: Option<ontime_inference::CpuQuota>,
    cpus: f64,
    budget_reserve: Duration,
) -> HeadroomLimits {
    let process_cores = quota.map_or(cpus, |q| q.cores().min(cpus));
    let inference_cores = match quota {
        Some(q) => ontime_inference::CpuBudget::new(Some(q), budget_reserve)
            .allowance()
            .map_or(1.0, |a| {
                // A Smart Turn run bigger than a period's allowance runs alone at the start of
                // a period and its overspend holds the next one's VAD batches back: turns
                // queue behind each other long before the average share is used (under a
                // 0.5-CPU quota with a 20 ms reserve, 30 ms a period against runs of about
                // 60 ms: p99 queue wait
                // 500 ms at 32 calls with 16 % of a core used, docs/capacity.md). Only the
                // allowance's fraction of a run counts as room for calls.
                let burst = (a.as_secs_f64()
                    / crate::admission::headroom::PRIOR_TURN_RUN.as_secs_f64())
                .min(1.0);
                burst * a.as_secs_f64() / q.period.as_secs_f64()
            }),
        None => 1.0,
    };
    HeadroomLimits {
        inference_cores: inference_cores.min(process_cores).min(1.0),
        process_cores,
        ..HeadroomLimits::default()
    }
}

/// CPU per CFS period the inference budget leaves to the rest of the process: a fifth of the
/// quota, 5–20 ms. What it is for is the tokio threads (RTP, SIP, metrics; the SCHED_FIFO
/// sender is not CFS-throttled), which cost about 0.12 % of a core per call
/// (docs/capacity.md): they grow with the calls, and the calls with the quota, so a share of the
/// quota covers them with room at every size. A fixed 20 ms kept 40 % of a 0.5-CPU quota
/// for threads that used at most 7 ms of it, and left the models 30 ms a period, half a Smart
/// Turn run.
fn budget_reserve_for(q: ontime_inference::CpuQuota) -> Duration {
    (q.quota / 5).clamp(Duration::from_millis(5), Duration::from_millis(20))
}

/// Where the runtime and models are: `models_dir` (the flag, or its `ONTIME_MODELS_DIR` twin, or the
/// field an embedder set) wins; without it the inference crate's environment lookup, then the default
/// folder. `ort_dylib_path` (flag or `ORT_DYLIB_PATH`) names the runtime library on its own.
fn model_paths(config: &Config) -> ModelPaths {
    let mut paths = match &config.models_dir {
        Some(dir) => ModelPaths::in_dir(dir.clone()),
        None => ModelPaths::from_env_or(PathBuf::from(DEFAULT_MODELS_DIR)),
    };
    if let Some(dylib) = &config.ort_dylib_path {
        paths.ort_dylib = dylib.clone();
    }
    paths
}

/// How far into a caller's speech a pending barge-in may wait on the VAD's judged progress
/// (`call::core`'s decision: the minimum speech, the stop's lag, the echo gate's hangover):
/// speech pairing starts past it, so no barge-in decision waits for a chunk's pair. Without a
/// minimum the barge-in is decided at the speech's start, before pairing could begin.
fn barge_in_horizon(min_speech: Duration) -> Duration {
    if min_speech.is_zero() {
        Duration::ZERO
    } else {
        min_speech + VadParams::default().stop + ontime_echo::CALLER_HANGOVER_TIME
    }
}

fn pool_config(config: &Config) -> PoolConfig {
    let mut pool_config = PoolConfig::new(model_paths(config));
    pool_config.turn.incomplete_timeout = config.turn_stop_timeout;
    pool_config.turn.speculate_after = config.turn_speculate_after;
    // Only the hold-back's pitch cue reads it.
    pool_config.turn.final_pitch = config.reply_hold_back && config.reply_hold_fall;
    pool_config.vad_gather = config.vad_gather;
    pool_config.vad_quiet_peak =
        (config.vad_quiet_peak > 0).then_some(config.vad_quiet_peak as i16);
    pool_config.vad_pair_after = config
        .vad_pair_speech
        .then(|| barge_in_horizon(config.barge_in_min_speech));
    // The float softmax is another arithmetic; the runtime's kernels the same bytes as ours.
    if config.turn_float_softmax {
        pool_config.turn_graph = ontime_inference::TurnGraph::FloatAttentionSoftmax;
    } else if config.turn_runtime_softmax {
        pool_config.turn_graph = ontime_inference::TurnGraph::Published;
    } else if config.turn_runtime_products {
        pool_config.turn_graph = ontime_inference::TurnGraph::OwnSoftmaxKernel;
    }
    if config.vad_published_graph {
        pool_config.vad_graph = ontime_inference::VadGraph::Published;
    }
    // The inference budget keeps model work inside the container's CFS quota: a throttled
    // period would freeze the sender too.
    cgroup_watch::publish_quota();
    match pool_config.clone().with_cgroup_quota() {
        Ok(mut c) => {
            if let Some(q) = c.quota {
                c.budget_reserve = budget_reserve_for(q);
            }
            c
        }
        Err(e) => {
            warn!(error = %e, "CPU quota unreadable: inference runs without a CPU budget");
            pool_config
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::StubAgent;
    use crate::config::Args;

    // Settings are filled in code, as an embedder without the `cli` feature does; a flag lands in
    // the same `Args` field.
    fn config(args: Args) -> Config {
        Config::resolve(args).unwrap()
    }

    #[test]
    fn the_models_dir_flag_wins_over_the_environment() {
        // The test script exports ONTIME_MODELS_DIR; the flag must still decide.
        let c = config(Args {
            models_dir: Some("/opt/flag-models".into()),
            ..Args::default()
        });
        let paths = model_paths(&c);
        assert!(
            paths.silero_vad.starts_with("/opt/flag-models"),
            "{paths:?}"
        );
        assert!(
            paths.smart_turn.starts_with("/opt/flag-models"),
            "{paths:?}"
        );
        let c = config(Args {
            models_dir: Some("/opt/flag-models".into()),
            ort_dylib_path: Some("/lib/ort.so".into()),
            ..Args::default()
        });
        assert_eq!(model_paths(&c).ort_dylib, PathBuf::from("/lib/ort.so"));
    }

    #[test]
    fn turn_speculation_reaches_the_pool() {
        let c = config(Args::default());
        assert_eq!(
            pool_config(&c).turn.speculate_after,
            Some(Duration::from_millis(96))
        );
        let c = config(Args {
            turn_speculate_after: Some("off".into()),
            ..Args::default()
        });
        assert_eq!(pool_config(&c).turn.speculate_after, None);
        let c = config(Args {
            turn_speculate_after: Some("160ms".into()),
            ..Args::default()
        });
        assert_eq!(
            pool_config(&c).turn.speculate_after,
            Some(Duration::from_millis(160))
        );
    }

    #[test]
    fn speech_pairing_starts_past_the_barge_in_horizon() {
        let c = config(Args::default());
        assert_eq!(pool_config(&c).vad_pair_after, Some(Duration::ZERO));
        let c = config(Args {
            barge_in_min_speech: Some("400ms".into()),
            ..Args::default()
        });
        // 400 ms of speech, the VAD's 200 ms stop, the echo gate's hangover.
        assert_eq!(
            pool_config(&c).vad_pair_after,
            Some(Duration::from_millis(400 + 200) + ontime_echo::CALLER_HANGOVER_TIME)
        );
        let c = config(Args {
            vad_pair_speech: Some(false),
            ..Args::default()
        });
        assert_eq!(pool_config(&c).vad_pair_after, None);
    }

    #[test]
    fn the_vad_runs_the_lean_graph_unless_asked() {
        assert_eq!(
            pool_config(&config(Args::default())).vad_graph,
            ontime_inference::VadGraph::Lean
        );
        let c = config(Args {
            vad_published_graph: Some(true),
            ..Args::default()
        });
        assert_eq!(
            pool_config(&c).vad_graph,
            ontime_inference::VadGraph::Published
        );
    }

    #[test]
    fn smart_turn_runs_its_attention_on_our_kernels_unless_asked() {
        assert_eq!(
            pool_config(&config(Args::default())).turn_graph,
            ontime_inference::TurnGraph::OwnAttentionKernels
        );
        let c = config(Args {
            turn_runtime_products: Some(true),
            ..Args::default()
        });
        assert_eq!(
            pool_config(&c).turn_graph,
            ontime_inference::TurnGraph::OwnSoftmaxKernel
        );
        let c = config(Args {
            turn_runtime_softmax: Some(true),
            ..Args::default()
        });
        assert_eq!(
            pool_config(&c).turn_graph,
            ontime_inference::TurnGraph::Published
        );
        let c = config(Args {
            turn_float_softmax: Some(true),
            ..Args::default()
        });
        assert_eq!(
            pool_config(&c).turn_graph,
            ontime_inference::TurnGraph::FloatAttentionSoftmax
        );
    }

    #[test]
    fn the_reserve_is_a_fifth_of_the_quota_within_5_to_20_ms() {
        let q = |ms| ontime_inference::CpuQuota {
            quota: Duration::from_millis(ms),
            period: Duration::from_millis(100),
        };
        let ms = Duration::from_millis;
        assert_eq!(budget_reserve_for(q(50)), ms(10));
        assert_eq!(budget_reserve_for(q(100)), ms(20));
        assert_eq!(budget_reserve_for(q(200)), ms(20));
        assert_eq!(budget_reserve_for(q(10)), ms(5));
    }

    #[test]
    fn under_a_quota_the_inference_thread_gets_its_budget_not_the_quota() {
        let reserve = Duration::from_millis(20);
        let quota = |ms| ontime_inference::CpuQuota {
            quota: Duration::from_millis(ms),
            period: Duration::from_millis(100),
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // 0.5 CPU: the pool keeps 20 ms of each 100 ms period for the sender and I/O, and
        // 30 ms is half a Smart Turn run: 0.3 of a core, of which half is room for calls.
        let l = limits_for(Some(quota(50)), 2.0, reserve);
        assert!(close(l.inference_cores, 0.15), "{l:?}");
        assert!(close(l.process_cores, 0.5), "{l:?}");
        // With the reserve the gateway picks there (10 ms): 40 ms, two thirds of a run.
        let l = limits_for(Some(quota(50)), 2.0, budget_reserve_for(quota(50)));
        assert!(close(l.inference_cores, 0.4 * 40.0 / 60.0), "{l:?}");
        // 1.0 CPU: 80 ms a period holds a whole run.
        let l = limits_for(Some(quota(100)), 2.0, reserve);
        assert!(close(l.inference_cores, 0.8), "{l:?}");
        // 1.5 CPUs on 2: the thread is one thread, at most a core.
        let l = limits_for(Some(quota(150)), 2.0, reserve);
        assert!(close(l.inference_cores, 1.0), "{l:?}");
        assert!(close(l.process_cores, 1.5), "{l:?}");
        // No quota: a core for the thread, every CPU of the affinity mask for the process.
        let l = limits_for(None, 2.0, reserve);
        assert!(close(l.inference_cores, 1.0), "{l:?}");
        assert!(close(l.process_cores, 2.0), "{l:?}");
    }

    #[tokio::test]
    async fn start_errors_name_the_field_and_keep_their_typed_source() {
        use std::error::Error as _;
        // `Config::resolve` refuses this URI already; a `Config` built in code reaches here.
        let mut c = config(Args::default());
        c.register = vec!["sip:alice@host:notaport".into()];
        let err = resolve_registrations(&c)
            .await
            .expect_err("the port is no number");
        assert!(
            err.to_string().starts_with(
                "config field `register`: sip:alice@host:notaport: `sip:alice@host:notaport`: port"
            ),
            "{err}"
        );
        let source = err.source().expect("a source");
        assert!(matches!(
            source.downcast_ref::<crate::resolve::ResolveError>(),
            Some(crate::resolve::ResolveError::Port { .. })
        ));
        assert!(source.source().is_some(), "the ParseIntError under it");

        let dir = std::env::temp_dir().join(format!("ontime-twiml-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("voice.xml");
        std::fs::write(&file, "<Response><NoSuchVerb/></Response>").unwrap();
        let c = config(Args {
            voice_twiml: Some(file),
            ..Args::default()
        });
        let callbacks = crate::api::wiring::callbacks(&c).unwrap();
        let err = voice_route(&c, &callbacks)
            .err()
            .expect("not TwiML ontime runs");
        assert!(
            err.to_string().starts_with("config field `voice_twiml`: "),
            "{err}"
        );
        assert!(err
            .source()
            .and_then(|s| s.downcast_ref::<ontime_twilio::TwimlError>())
            .is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn an_unwritable_record_folder_stops_the_start() {
        let c = config(Args {
            record: Some("/proc/ontime-cannot-record-here".into()),
            ..Args::default()
        });
        let err = Gateway::builder(c)
            .agent(Arc::new(StubAgent::built_in().unwrap()))
            .bind()
            .await
            .err()
            .expect("the start fails");
        assert!(
            err.to_string()
                .starts_with("config field `record`: cannot write recordings into /proc/ontime-cannot-record-here"),
            "{err}"
        );
    }
}
