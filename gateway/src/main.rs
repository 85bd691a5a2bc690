//! `ontime-gateway`: answers calls from a SIP trunk for AI voice bots and keeps the bot's audio
//! on time. Composition only: parse the configuration, set up logging, run [`ontime_gateway::app`].

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use ontime_gateway::agent::{Agent, StubAgent};
use ontime_gateway::config::{AgentKind, Args, Config, LogFormat};
use ontime_gateway::ws_agent::{WsAgent, WsAgentConfig};

fn main() -> ExitCode {
    // design.md §4: before any library starts a thread, math libraries get one thread each.
    ontime_inference::pin_math_threads_to_one();
    let config = match Config::resolve(Args::parse()) {
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
    let agent: Arc<dyn Agent> = match &config.agent {
        AgentKind::Stub => {
            let stub = match &config.stub_reply {
                Some(path) => StubAgent::from_file(path),
                None => StubAgent::built_in(),
            };
            match stub {
                Ok(s) => Arc::new(s),
                Err(e) => {
                    eprintln!("ontime-gateway: config field `stub_reply`: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        AgentKind::WebSocket(url) => match WsAgent::new(WsAgentConfig::from_config(url, &config)) {
            Ok(a) => Arc::new(a),
            Err(e) => {
                // The error names its field (`ws_ca_file`) or the built-in fixture.
                eprintln!("ontime-gateway: {e}");
                return ExitCode::from(2);
            }
        },
    };
    // Two workers: SIP, RTP receive, RTCP and HTTP are light; the clock and the models have their
    // own threads. A fixed count keeps the thread total independent of the number of calls.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
    match runtime.block_on(ontime_gateway::app::run(config, agent, |_| {})) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ontime-gateway: {e:#}");
            ExitCode::FAILURE
        }
    }
}
