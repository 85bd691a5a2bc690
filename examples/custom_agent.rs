//! Embed the gateway in your own Rust program with your own agent and your own metrics recorder.
//!
//! The agent here is an echo: it keeps the caller's audio from the moment the VAD hears speech,
//! and when the caller's turn ends it plays that turn back — paced by ontime's real-time sender,
//! cut by barge-in like any reply. The host program installs a Prometheus recorder (the gateway
//! only emits through the `metrics` facade), adds a metric of its own, and hands the gateway a
//! renderer so `/metrics` serves both.
//!
//! ```text
//! cargo run --example custom_agent -- --sip-listen 127.0.0.1:5060 --metrics-listen 127.0.0.1:9090
//! ```
//!
//! Every `ontime-gateway` flag works (`--help`); Ctrl-C drains and stops.

use std::sync::Arc;

use clap::Parser;
use metrics_exporter_prometheus::PrometheusBuilder;
use ontime_gateway::{
    Agent, AgentAction, AgentCall, AgentEvent, AgentOutput, Args, CallInfo, Config, Gateway,
};

/// How much audio before the VAD's speech start to keep (its start confirmation lags the onset).
const PRE_ROLL_SAMPLES: usize = 8000 * 3 / 10;
/// The longest turn kept (a caller who never stops does not grow memory without bound).
const MAX_TURN_SAMPLES: usize = 8000 * 20;

/// Echoes each finished caller turn.
struct EchoAgent;

impl Agent for EchoAgent {
    fn start_call(&self, info: &CallInfo, output: AgentOutput) -> Box<dyn AgentCall> {
        println!("call {} from {}", info.call_id, info.from);
        Box::new(EchoCall {
            output,
            heard: Vec::new(),
            in_turn: false,
            turns: 0,
        })
    }
}

struct EchoCall {
    output: AgentOutput,
    /// The current turn (only the pre-roll while the caller is quiet).
    heard: Vec<i16>,
    /// From the VAD's speech start to the turn's end.
    in_turn: bool,
    turns: u64,
}

impl AgentCall for EchoCall {
    // Runs on the call's task every 20 ms: only cheap work here, never a blocking call.
    fn on_event(&mut self, event: AgentEvent<'_>) {
        match event {
            AgentEvent::CallerAudio(pcm) => {
                self.heard.extend_from_slice(pcm);
                let keep = if self.in_turn {
                    MAX_TURN_SAMPLES
                } else {
                    PRE_ROLL_SAMPLES
                };
                if self.heard.len() > keep {
                    let excess = self.heard.len() - keep;
                    self.heard.drain(..excess);
                }
            }
            AgentEvent::SpeechStarted => self.in_turn = true,
            AgentEvent::TurnEnded { .. } => {
                self.in_turn = false;
                self.turns += 1;
                let turn: Arc<[i16]> = std::mem::take(&mut self.heard).into();
                println!(
                    "turn {} ended: echoing {:.2} s",
                    self.turns,
                    turn.len() as f64 / 8000.0
                );
                self.output.send(AgentAction::Play(turn));
                self.output.send(AgentAction::EndOfUtterance);
                self.output
                    .send(AgentAction::Mark(format!("echo-{}", self.turns)));
                metrics::counter!("custom_agent_turns_echoed_total").increment(1);
            }
            AgentEvent::MarkPlayed(name) => println!("{name} played"),
            AgentEvent::Ended => println!("call ended after {} turns", self.turns),
            _ => {}
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    ontime::inference::prepare_process_environment();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let config = Config::resolve(Args::parse())?;

    // The host's recorder: the gateway's metrics and the program's own land in it.
    let recorder = PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    metrics::counter!("custom_agent_turns_echoed_total").absolute(0);

    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let gateway = Gateway::builder(config)
            .agent(Arc::new(EchoAgent))
            .metrics_renderer(move || prometheus.render())
            .bind()
            .await?;
        let bound = gateway.local_addrs();
        println!(
            "custom agent: SIP on {}, metrics on {}",
            bound.sip, bound.ops
        );
        gateway
            .run(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await;
        Ok(())
    })
}
