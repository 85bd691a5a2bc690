//! Thread CPU per model run under ONNX Runtime session options: the options the pool uses
//! (`runtime::one_thread_session`) against variants, on the same fixed inputs, with the largest
//! output difference from the pool's options. Silero VAD at batch sizes 1, 8 and 64 (states
//! carried run to run, as the pool does), and Smart Turn on one turn's features.
//!
//! ```text
//! cargo run --release -p ontime-inference --example session_options [-- RUNS]
//! ```
//! RUNS (default 300) VAD runs per batch size and RUNS / 15 Smart Turn runs, after 20 (2) warm-up
//! runs; a few seconds per variant on one core. CPU = `CLOCK_THREAD_CPUTIME_ID` of this thread
//! (the session runs on the caller's thread with one intra-op thread).
//!
//! With `--cadence` (`-- RUNS --cadence`), only the pool's options, batch of one, at the gateway's
//! cadence against back to back: the pool runs one call's chunk every 32 ms and sleeps between,
//! and a run after a sleep starts with the model out of the caches. Three more wait spinning on
//! the clock instead of sleeping, 32, 4 and 1 ms: the thread keeps its core and touches nothing,
//! so if a run after a spin costs what one after a sleep does, the caches were not lost to the
//! core idling but to other work sharing it (a hyperthread sibling, the host). Page faults per run (the thread's, from
//! `/proc/thread-self/stat`) tell whether ONNX Runtime's memory goes back to the system between runs.
//! Then Silero's lean 8 kHz graph (`ontime_inference::vad_graph`, the pool's default) alternated
//! with the published one, back to back and one batch every 32 ms, batches of 1 and 8.
//! Then Smart Turn the same way at the cadence of turn ends: back to back against one run every
//! 2 s, asleep or spinning between; then its float-softmax graph (`TurnGraph::FloatAttentionSoftmax`)
//! alternated with the published one; then its attention layers on ontime's kernels
//! (`TurnGraph::OwnAttentionKernels`, the pool's default), its softmaxes alone on ontime's kernel
//! (`TurnGraph::OwnSoftmaxKernel`) and the published graph, alternated, asserting the same
//! probability bit for bit.
//!
//! With `--softmax` (`-- RUNS --softmax`), ontime's attention softmax kernel alone on one Smart
//! Turn run's rows (`attention_softmax::softmax_u8`, RUNS / 15 runs).
//!
//! With `--products` (`-- RUNS --products`), ontime's attention product kernel alone on one
//! Smart Turn run's products (`attention_matmul::QuantisedMatMul`, RUNS / 15 runs).
//!
//! With `--profile` (`-- RUNS --profile`), ONNX Runtime's profiler on RUNS / 15 Smart Turn runs
//! of each graph: every kernel's share of the kernel time and its nodes per run.

use std::path::Path;
use std::time::{Duration, Instant};

use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::session::Session;
use ort::value::TensorRef;

use ontime_inference::resample::upsample_2x;
use ontime_inference::speech::{VAD_CHUNK_SAMPLES, VAD_CONTEXT_SAMPLES};
use ontime_inference::vad::{VAD_ROW, VAD_STATE};
use ontime_inference::{runtime, thread_cpu_time, ModelPaths, SmartTurn, TurnGraph};

type Tune = fn(SessionBuilder) -> Result<SessionBuilder, String>;

/// The pool's options (`runtime::one_thread_session`), then the variants measured against them.
const VARIANTS: [(&str, Tune); 6] = [
    (
        "pool (1 thread, sequential, no spinning, all optimisations)",
        Ok,
    ),
    ("+ denormals flushed to zero", |b| {
        b.with_flush_to_zero().map_err(|e| e.to_string())
    }),
    ("+ memory pattern off", |b| {
        b.with_memory_pattern(false).map_err(|e| e.to_string())
    }),
    ("+ QDQ clean-up", |b| {
        b.with_qdq_cleanup().map_err(|e| e.to_string())
    }),
    ("+ QDQ propagation off", |b| {
        b.with_quant_qdq(false).map_err(|e| e.to_string())
    }),
    ("optimisation level 1 instead of all", |b| {
        b.with_optimization_level(GraphOptimizationLevel::Level1)
            .map_err(|e| e.to_string())
    }),
];

fn read_wav(path: &Path) -> Vec<i16> {
    let mut r = hound::WavReader::open(path).expect("fixture WAV");
    r.samples::<i16>().map(|s| s.expect("sample")).collect()
}

/// How a run waits for the next: not at all, asleep, or spinning on the clock.
#[derive(Clone, Copy)]
enum Gap {
    None,
    Sleep(Duration),
    Spin(Duration),
}

impl Gap {
    fn wait(self) {
        match self {
            Gap::None => {}
            Gap::Sleep(d) => std::thread::sleep(d),
            Gap::Spin(d) => {
                let until = Instant::now() + d;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// Minor + major page faults of this thread so far (`/proc/thread-self/stat`, fields 10 and 12).
fn thread_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    // The command name (field 2) may hold spaces; the fields after it follow its closing ')'.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let field = |n: usize| fields[n - 3].parse::<u64>().expect("stat field");
    field(10) + field(12)
}

/// One cadence's figures per run.
struct PerRun {
    cpu_us: f64,
    wall_us: f64,
    faults: f64,
}

/// Thread CPU, wall time and page faults summed over the runs counted.
#[derive(Default)]
struct Tally {
    cpu: Duration,
    wall: Duration,
    faults: u64,
    runs: usize,
}

impl Tally {
    /// Runs `f`, adding its cost to the tally when `counted` (a warm-up run is not).
    fn measure<T>(&mut self, counted: bool, f: impl FnOnce() -> T) -> T {
        let faults_before = thread_faults();
        let (before, started) = (thread_cpu_time(), Instant::now());
        let out = f();
        let (cpu, wall) = (thread_cpu_time().saturating_sub(before), started.elapsed());
        // Read after the clocks so the read's own cost is not charged to the run.
        let faults = thread_faults() - faults_before;
        if counted {
            self.cpu += cpu;
            self.wall += wall;
            self.faults += faults;
            self.runs += 1;
        }
        out
    }

    fn per_run(&self) -> PerRun {
        let n = self.runs.max(1) as f64;
        PerRun {
            cpu_us: self.cpu.as_secs_f64() * 1e6 / n,
            wall_us: self.wall.as_secs_f64() * 1e6 / n,
            faults: self.faults as f64 / n,
        }
    }
}

/// Runs `runs` batches of `b` rows (row i reads chunk (run·b + i) of the recording, states
/// carried per row), waiting `gap` before each; returns thread CPU, wall time and page faults per
/// run, and every probability, in order.
fn vad_runs(
    session: &mut Session,
    pcm: &[f32],
    b: usize,
    runs: usize,
    gap: Gap,
) -> (PerRun, Vec<f32>) {
    let chunks = pcm.len() / VAD_CHUNK_SAMPLES - 1;
    let mut input = vec![0.0f32; b * VAD_ROW];
    let mut state = vec![0.0f32; b * VAD_STATE];
    let sr = [8000i64];
    let mut probs = Vec::with_capacity(runs * b);
    let mut tally = Tally::default();
    for run in 0..runs + 20 {
        for i in 0..b {
            let c = (run * b + i) % chunks;
            let start = (c + 1) * VAD_CHUNK_SAMPLES - VAD_CONTEXT_SAMPLES;
            input[i * VAD_ROW..(i + 1) * VAD_ROW].copy_from_slice(&pcm[start..start + VAD_ROW]);
        }
        gap.wait();
        tally.measure(run >= 20, || {
            let input_t = TensorRef::from_array_view(([b, VAD_ROW], &input[..])).expect("input");
            let state_t = TensorRef::from_array_view(([2, b, 128], &state[..])).expect("state");
            let sr_t = TensorRef::from_array_view(((), &sr[..])).expect("sr");
            let outputs = session
                .run(ort::inputs![input_t, state_t, sr_t])
                .expect("VAD run");
            let (_, p) = outputs["output"]
                .try_extract_tensor::<f32>()
                .expect("output");
            let (_, s) = outputs["stateN"]
                .try_extract_tensor::<f32>()
                .expect("stateN");
            if run >= 20 {
                probs.extend_from_slice(p);
            }
            state.copy_from_slice(s);
        });
    }
    (tally.per_run(), probs)
}

/// Runs Smart Turn `runs` times on `features`, waiting `gap` before each; returns thread CPU,
/// wall time and page faults per run (CPU and wall in µs) and the last probability.
fn turn_runs(session: &mut Session, features: &[f32], runs: usize, gap: Gap) -> (PerRun, f32) {
    timed_turn_runs(
        |features| {
            let outputs = session
                .run(ort::inputs![TensorRef::from_array_view((
                    [1, 80, 800],
                    features
                ))
                .expect("features")])
                .expect("Smart Turn run");
            let (_, p) = outputs["logits"]
                .try_extract_tensor::<f32>()
                .expect("logits");
            p[0]
        },
        features,
        runs,
        gap,
    )
}

/// [`turn_runs`] on a loaded `SmartTurn` (whatever graph it runs).
fn smart_turn_runs(turn: &mut SmartTurn, features: &[f32], runs: usize, gap: Gap) -> (PerRun, f32) {
    timed_turn_runs(
        |features| turn.predict_features(features).expect("Smart Turn run"),
        features,
        runs,
        gap,
    )
}

fn timed_turn_runs(
    mut run: impl FnMut(&[f32]) -> f32,
    features: &[f32],
    runs: usize,
    gap: Gap,
) -> (PerRun, f32) {
    let mut tally = Tally::default();
    let mut last = f32::NAN;
    for i in 0..runs + 2 {
        gap.wait();
        last = tally.measure(i >= 2, || run(features));
    }
    (tally.per_run(), last)
}

fn max_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max)
}

/// ONNX Runtime's profiler on Smart Turn, published graph and float-softmax graph: each
/// kernel's share of the runs' kernel time and its nodes per run.
fn profile_turn_kernels(
    env: &ort::environment::Environment,
    paths: &ModelPaths,
    pcm: &[f32],
    runs: usize,
) {
    let mut up = Vec::new();
    upsample_2x(pcm, &mut up);
    let features = SmartTurn::load(env, &paths.smart_turn)
        .expect("Smart Turn")
        .features_of(&up);
    let published = std::fs::read(&paths.smart_turn).expect("Smart Turn bytes");
    let (edited, _) = ontime_inference::turn_graph::float_attention_softmax(&published)
        .expect("float-softmax graph");
    let dir = std::env::temp_dir().join(format!("ontime-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("profile directory");
    for (name, bytes) in [("published", &published), ("float softmax", &edited)] {
        let mut session = runtime::one_thread_builder(env)
            .expect("session options")
            .with_profiling(dir.join(name.replace(' ', "_")))
            .expect("profiling")
            .commit_from_memory(bytes)
            .expect("session");
        let (r, _) = turn_runs(&mut session, &features, runs, Gap::None);
        let file = session.end_profiling().expect("profile file");
        let events: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(&file).expect("profile")).expect("profile JSON");
        let mut by_op: Vec<(String, f64, usize)> = Vec::new();
        for e in &events {
            let kernel = e["cat"] == "Node"
                && e["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("_kernel_time"));
            let (Some(op), Some(dur)) = (e["args"]["op_name"].as_str(), e["dur"].as_f64()) else {
                continue;
            };
            if !kernel {
                continue;
            }
            match by_op.iter_mut().find(|(o, _, _)| o == op) {
                Some(row) => {
                    row.1 += dur;
                    row.2 += 1;
                }
                None => by_op.push((op.to_string(), dur, 1)),
            }
        }
        let total: f64 = by_op.iter().map(|r| r.1).sum();
        by_op.sort_by(|a, b| b.1.total_cmp(&a.1));
        println!(
            "{name}: {:.2} ms CPU / run over {runs} runs (profiled)",
            r.cpu_us / 1e3
        );
        println!("| kernel | share of kernel time | nodes per run |");
        println!("| --- | --- | --- |");
        // Warm-up runs are profiled too: nodes per run over every run the session made.
        let made = (runs + 2) as f64;
        for (op, dur, n) in by_op.iter().take(8) {
            println!(
                "| `{op}` | {:.1} % | {:.0} |",
                dur / total * 100.0,
                *n as f64 / made
            );
        }
        println!();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// ontime's attention product kernel alone on one run's worth of products (4 layers × a
/// `Q·Kᵀ` of 6 × 400 × 64 × 400 and a `P·V` of 6 × 400 × 400 × 64), with the first layer's
/// scales and zero points, pseudo-random operands.
fn product_kernel_alone(runs: usize) {
    use ontime_inference::attention_matmul::{Dims, QuantisedMatMul, Requantisation};
    let shapes = [
        Dims {
            batch: 6,
            m: 400,
            k: 64,
            n: 400,
        },
        Dims {
            batch: 6,
            m: 400,
            k: 400,
            n: 64,
        },
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 32) as u8
    };
    let operands: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = shapes
        .iter()
        .map(|d| {
            let a = (0..d.batch * d.m * d.k).map(|_| next()).collect();
            let b = (0..d.batch * d.k * d.n).map(|_| next()).collect();
            (a, b, vec![0u8; d.batch * d.m * d.n])
        })
        .collect();
    let rq = Requantisation::new(0.023_968_54, 141, 0.022_464_39, 130, 0.208_193_59, 114);
    let mut kernel = QuantisedMatMul::new();
    let mut operands = operands;
    let runs = (runs / 15).max(2);
    let mut tally = Tally::default();
    for i in 0..runs + 2 {
        tally.measure(i >= 2, || {
            for _layer in 0..4 {
                for (d, (a, b, y)) in shapes.iter().zip(operands.iter_mut()) {
                    assert!(kernel.run(a, b, *d, &rq, y));
                }
            }
        });
    }
    let r = tally.per_run();
    println!(
        "own product kernel (fast path: {}), 4 layers' Q·Kᵀ and P·V: {:.2} ms CPU / run, {:.2} ms wall / run ({runs} runs)",
        ontime_inference::attention_matmul::fast_path_available(),
        r.cpu_us / 1e3,
        r.wall_us / 1e3
    );
}

/// ontime's attention softmax kernel alone on one run's worth of rows (4 layers × 6 heads ×
/// 400 rows of 400, the load check's fixed rows), with the first layer's scales.
fn softmax_kernel_alone(runs: usize) {
    use ontime_inference::attention_softmax::{
        lookup_table, output_multiplier, softmax_u8, ShiftLog,
    };
    use ontime_inference::turn::{check_rows, ATTENTION_LENGTH};
    let d = ATTENTION_LENGTH;
    let x = check_rows(4 * 6 * d, d);
    let table = lookup_table(0.208_193_59, d, ShiftLog::Single);
    let multiplier = output_multiplier(0.003_875_127);
    let mut y = vec![0u8; x.len()];
    let mut scratch = Vec::new();
    let runs = (runs / 15).max(2);
    let mut tally = Tally::default();
    for i in 0..runs + 2 {
        tally.measure(i >= 2, || {
            assert!(softmax_u8(
                &x,
                d,
                &table,
                multiplier,
                0,
                &mut y,
                &mut scratch
            ))
        });
    }
    let r = tally.per_run();
    println!(
        "own softmax kernel, {} rows of {d}: {:.2} ms CPU / run, {:.2} ms wall / run ({runs} runs)",
        x.len() / d,
        r.cpu_us / 1e3,
        r.wall_us / 1e3
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cadence = args.iter().any(|a| a == "--cadence");
    let profile = args.iter().any(|a| a == "--profile");
    let runs: usize = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(|a| a.parse().expect("RUNS is a number"))
        .unwrap_or(300);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let paths = ModelPaths::from_env_or(root.join(".cache/models"));
    if let Err(e) = paths.check() {
        eprintln!("{e}");
        std::process::exit(2);
    }
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let pcm16 = read_wav(&root.join("fixtures/speech/book_table_8k.wav"));
    let pcm: Vec<f32> = pcm16.iter().map(|&s| f32::from(s) / 32768.0).collect();
    if profile {
        profile_turn_kernels(&env, &paths, &pcm, (runs / 15).max(2));
        return;
    }
    if args.iter().any(|a| a == "--softmax") {
        softmax_kernel_alone(runs);
        return;
    }
    if args.iter().any(|a| a == "--products") {
        product_kernel_alone(runs);
        return;
    }
    if cadence {
        let mut session =
            runtime::one_thread_session(&env, &paths.silero_vad, "Silero VAD").expect("session");
        println!("| cadence | CPU µs / run | wall µs / run | page faults / run |");
        println!("| --- | --- | --- | --- |");
        let every = Duration::from_millis(32);
        for (name, gap) in [
            ("back to back", Gap::None),
            ("one every 32 ms, asleep between", Gap::Sleep(every)),
            ("one every 32 ms, spinning between", Gap::Spin(every)),
            ("one every 4 ms, spinning between", Gap::Spin(every / 8)),
            ("one every 1 ms, spinning between", Gap::Spin(every / 32)),
            ("back to back again", Gap::None),
        ] {
            let (r, _) = vad_runs(&mut session, &pcm, 1, runs, gap);
            println!(
                "| {name} | {:.1} | {:.1} | {:.2} |",
                r.cpu_us, r.wall_us, r.faults
            );
        }
        // The lean 8 kHz graph (`VadGraph::Lean`, the pool's default) against the published
        // one, alternated so both see the same machine, batches of 1 and 8.
        let published = std::fs::read(&paths.silero_vad).expect("Silero VAD bytes");
        let lean_bytes =
            ontime_inference::vad_graph::lean_silero_8k(&published).expect("lean VAD graph");
        let mut lean = runtime::one_thread_session_from_memory(&env, &lean_bytes, "Silero VAD")
            .expect("lean session");
        println!();
        println!("| VAD graph, cadence | B | CPU µs / run | wall µs / run | max \\|Δp\\| against published |");
        println!("| --- | --- | --- | --- | --- |");
        for round in 0..2 {
            for (name, gap) in [
                ("back to back", Gap::None),
                ("one every 32 ms, asleep between", Gap::Sleep(every)),
            ] {
                for b in [1, 8] {
                    let (rp, pp) = vad_runs(&mut session, &pcm, b, runs, gap);
                    let (rl, pl) = vad_runs(&mut lean, &pcm, b, runs, gap);
                    let worst = pp
                        .iter()
                        .zip(&pl)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0f32, f32::max);
                    println!(
                        "| published, {name} (round {}) | {b} | {:.1} | {:.1} | – |",
                        round + 1,
                        rp.cpu_us,
                        rp.wall_us
                    );
                    println!(
                        "| lean, {name} (round {}) | {b} | {:.1} | {:.1} | {worst} |",
                        round + 1,
                        rl.cpu_us,
                        rl.wall_us
                    );
                }
            }
        }
        // Smart Turn at the cadence of turn ends: one run every few seconds at one call.
        let mut up = Vec::new();
        upsample_2x(&pcm, &mut up);
        let features = SmartTurn::load(&env, &paths.smart_turn)
            .expect("Smart Turn")
            .features_of(&up);
        let mut turn =
            runtime::one_thread_session(&env, &paths.smart_turn, "Smart Turn").expect("session");
        let turn_n = (runs / 15).max(2);
        println!();
        println!("| Smart Turn cadence | CPU ms / run | wall ms / run | page faults / run |");
        println!("| --- | --- | --- | --- |");
        for (name, gap) in [
            ("back to back", Gap::None),
            (
                "one every 2 s, asleep between",
                Gap::Sleep(Duration::from_secs(2)),
            ),
            (
                "one every 2 s, spinning between",
                Gap::Spin(Duration::from_secs(2)),
            ),
            ("back to back again", Gap::None),
        ] {
            let (r, _) = turn_runs(&mut turn, &features, turn_n, gap);
            println!(
                "| {name} | {:.2} | {:.2} | {:.2} |",
                r.cpu_us / 1e3,
                r.wall_us / 1e3,
                r.faults
            );
        }
        // The same with the attention softmax in float (`TurnGraph::FloatAttentionSoftmax`),
        // alternated with the published graph so both see the same machine.
        let published = std::fs::read(&paths.smart_turn).expect("Smart Turn bytes");
        let (edited, _) = ontime_inference::turn_graph::float_attention_softmax(&published)
            .expect("float-softmax graph");
        let mut float = runtime::one_thread_session_from_memory(&env, &edited, "Smart Turn")
            .expect("float-softmax session");
        let two_s = Gap::Sleep(Duration::from_secs(2));
        for (name, is_float, gap) in [
            ("float softmax, back to back", true, Gap::None),
            ("published, back to back", false, Gap::None),
            ("float softmax, one every 2 s, asleep between", true, two_s),
            ("published, one every 2 s, asleep between", false, two_s),
        ] {
            let session = if is_float { &mut float } else { &mut turn };
            let (r, _) = turn_runs(session, &features, turn_n, gap);
            println!(
                "| {name} | {:.2} | {:.2} | {:.2} |",
                r.cpu_us / 1e3,
                r.wall_us / 1e3,
                r.faults
            );
        }
        // The attention layers on ontime's kernels (`TurnGraph::OwnAttentionKernels`, the pool's
        // default), the softmaxes alone on ontime's kernel (`TurnGraph::OwnSoftmaxKernel`) and
        // the published graph, alternated: the same probability, bit for bit.
        let mut own = SmartTurn::load(&env, &paths.smart_turn).expect("own-kernel Smart Turn");
        let mut softmax_only =
            SmartTurn::load_graph(&env, &paths.smart_turn, TurnGraph::OwnSoftmaxKernel)
                .expect("own-softmax Smart Turn");
        let mut published = SmartTurn::load_graph(&env, &paths.smart_turn, TurnGraph::Published)
            .expect("published Smart Turn");
        println!("(default graph here: {:?})", own.graph());
        assert_eq!(softmax_only.graph(), TurnGraph::OwnSoftmaxKernel);
        for round in 0..2 {
            for (name, gap) in [
                ("back to back", Gap::None),
                ("one every 2 s, asleep between", two_s),
            ] {
                let (ro, po) = smart_turn_runs(&mut own, &features, turn_n, gap);
                let (rs, ps) = smart_turn_runs(&mut softmax_only, &features, turn_n, gap);
                let (rp, pp) = smart_turn_runs(&mut published, &features, turn_n, gap);
                assert_eq!(
                    po.to_bits(),
                    pp.to_bits(),
                    "own kernels {po} against published {pp}"
                );
                assert_eq!(
                    ps.to_bits(),
                    pp.to_bits(),
                    "own softmax {ps} against published {pp}"
                );
                for (graph, r) in [
                    ("own attention kernels", ro),
                    ("own softmax kernel", rs),
                    ("published", rp),
                ] {
                    println!(
                        "| {graph}, {name} (round {}) | {:.2} | {:.2} | {:.2} |",
                        round + 1,
                        r.cpu_us / 1e3,
                        r.wall_us / 1e3,
                        r.faults
                    );
                }
            }
        }
        return;
    }
    let mut up = Vec::new();
    upsample_2x(&pcm, &mut up);
    let features = SmartTurn::load(&env, &paths.smart_turn)
        .expect("Smart Turn")
        .features_of(&up);
    let turn_n = (runs / 15).max(2);
    println!(
        "| options | VAD B = 1 (µs / run) | B = 8 | B = 64 | max |Δp| VAD | Smart Turn (ms / run) | |Δp| turn |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut base: Option<(Vec<Vec<f32>>, f32)> = None;
    for (name, tune) in VARIANTS {
        let build = |model: &Path| -> Result<Session, String> {
            let pool = runtime::one_thread_builder(&env).expect("session options");
            tune(pool)?
                .commit_from_file(model)
                .map_err(|e| e.to_string())
        };
        let mut vad = match build(&paths.silero_vad) {
            Ok(s) => s,
            Err(e) => {
                println!("| {name} | not built: {e} | | | | | |");
                continue;
            }
        };
        let mut cells = Vec::new();
        let mut all = Vec::new();
        for b in [1usize, 8, 64] {
            let (r, probs) = vad_runs(&mut vad, &pcm, b, runs, Gap::None);
            cells.push(format!("{:.1}", r.cpu_us));
            all.push(probs);
        }
        let mut turn = build(&paths.smart_turn).expect("Smart Turn session");
        let (r, p) = turn_runs(&mut turn, &features, turn_n, Gap::None);
        let ms = r.cpu_us / 1e3;
        let (dv, dt) = match &base {
            Some((probs, p0)) => (
                probs
                    .iter()
                    .zip(&all)
                    .map(|(a, b)| max_diff(a, b))
                    .fold(0.0, f64::max),
                f64::from((p - p0).abs()),
            ),
            None => (0.0, 0.0),
        };
        println!(
            "| {name} | {} | {} | {} | {dv:.1e} | {ms:.2} | {dt:.1e} |",
            cells[0], cells[1], cells[2]
        );
        if base.is_none() {
            base = Some((all, p));
        }
    }
}
