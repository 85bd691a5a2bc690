//! `ontime-gateway`: answers calls from a SIP trunk for AI voice bots and keeps the bot's audio
//! on time. The binary owns what a host program owns — the command line, logging, the
//! Prometheus recorder and the signals — and embeds [`ontime_gateway::Gateway`] like any other.

use std::process::ExitCode;
use std::sync::Arc;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use ontime_gateway::metrics::{histogram_buckets, HistogramMatch};
use ontime_gateway::{
    Agent, AgentKind, Args, Config, Gateway, LogFormat, StubAgent, WsAgent, WsAgentConfig,
};

fn main() -> ExitCode {
    // Before any library starts a thread: math libraries (BLAS, OpenMP) get one thread each, so
    // one inference never fans out over every core and starves the sender; ONNX Runtime's
    // telemetry is off (it would look up and post to Microsoft's collector).
    ontime_inference::prepare_process_environment();
    let config = match Config::resolve(Args::parse_with_ranges()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ontime-gateway: {e}");
            return ExitCode::from(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    match config.log_format {
        LogFormat::Text => tracing_subscriber::fmt().with_env_filter(filter).init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init(),
    }
    let agent = match agent(&config) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ontime-gateway: {e}");
            return ExitCode::from(2);
        }
    };
    let prometheus = match install_recorder() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("ontime-gateway: metrics recorder: {e}");
            return ExitCode::FAILURE;
        }
    };
    // At most two workers: SIP, RTP receive, RTCP and HTTP are light; the clock and the models have
    // their own threads. A bounded count keeps the thread total independent of the number of calls.
    // On a one-core cpuset or quota a second worker buys no parallelism, only one more thread on
    // that core (docs/capacity.md, *One I/O worker on one core*: no worse, within noise).
    let io_workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(2));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(io_workers)
        .max_blocking_threads(2)
        .thread_name("ontime-io")
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ontime-gateway: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let upkeep = prometheus.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
        let gateway = Gateway::builder(config)
            .agent(agent)
            .metrics_renderer(move || prometheus.render())
            .bind()
            .await?;
        gateway.run(wait_for_signal()).await;
        Ok::<(), ontime_gateway::Error>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ontime-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The agent the configuration names; errors name their field.
fn agent(config: &Config) -> Result<Arc<dyn Agent>, String> {
    match &config.agent {
        AgentKind::Stub => {
            let stub = match &config.stub_reply {
                Some(path) => StubAgent::from_file(path),
                None => StubAgent::built_in(),
            };
            stub.map(|s| Arc::new(s) as Arc<dyn Agent>)
                .map_err(|e| format!("config field `stub_reply`: {e}"))
        }
        // The error names its field (`ws_ca_file`) or the built-in fixture.
        AgentKind::WebSocket(url) => WsAgent::new(WsAgentConfig::from_config(url, config))
            .map(|a| Arc::new(a) as Arc<dyn Agent>)
            .map_err(|e| e.to_string()),
    }
}

fn install_recorder() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    let mut builder = PrometheusBuilder::new();
    for (matcher, buckets) in histogram_buckets() {
        let matcher = match matcher {
            HistogramMatch::Full(name) => Matcher::Full(name.into()),
            HistogramMatch::Prefix(prefix) => Matcher::Prefix(prefix.into()),
            _ => continue,
        };
        builder = builder.set_buckets_for_metric(matcher, &buckets)?;
    }
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    Ok(handle)
}

/// SIGTERM or SIGINT starts the drain.
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
            tracing::warn!("cannot install signal handlers; Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!("signal received: draining");
}
