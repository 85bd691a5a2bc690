//! Proof that the 20 ms tick path allocates nothing: a counting global allocator, many streams,
//! many ticks (DTMF telephone-events included), zero allocations after warm-up. `harness = false`
//! so no test-runner thread allocates while we count. Frees are counted too: a command whose
//! payload owned heap memory would be freed on the tick when dropped there.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use ontime_rtp::{Packetizer, PT_PCMU};
use ontime_sender::{
    EngineConfig, PacketInfo, PacketSink, Sender, SenderConfig, StreamConfig, StreamOutput,
    TickEngine,
};

struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);

// SAFETY: defers to the system allocator; only counts calls.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREES.fetch_add(1, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Counts packets; allocates nothing.
struct CountingSink(Arc<AtomicU64>);

impl PacketSink for CountingSink {
    fn send_packet(&mut self, packet: &[u8], _info: PacketInfo) -> io::Result<()> {
        self.0.fetch_add(packet.len() as u64, Relaxed);
        Ok(())
    }
}

const STREAMS: usize = 200;
/// The telephone-event payload type the DTMF streams use.
const PT_EVENT: u8 = 101;

/// Simulated time: 10 000 slots (200 s) of 200 streams in a fraction of a second, with a stall
/// (catch-up path), clears, marks, underruns and DTMF all exercised.
fn engine_on_simulated_time() {
    let (mut engine, controller) = TickEngine::new(EngineConfig {
        metrics: false,
        ..EngineConfig::default()
    });
    let bytes = Arc::new(AtomicU64::new(0));
    let mut producers = Vec::new();
    for i in 0..STREAMS {
        let mut config = StreamConfig::new(
            Packetizer::with_initial(PT_PCMU, i as u32, 0, 0),
            StreamOutput::Sink(Box::new(CountingSink(Arc::clone(&bytes)))),
        );
        config.ring_capacity_bytes = 160 * 100;
        // Half the streams keep a copy of each sent frame (the gateway's recordings do).
        if i % 2 == 1 {
            config.sent_tap_frames = 50;
        }
        producers.push(controller.add_stream(config).expect("room for 200 streams"));
    }
    let audio = vec![0x55u8; 160 * 90];
    let mut now = Duration::ZERO;
    let clock = |t: Duration| move || t;
    // Warm-up: streams added, first slots served.
    now += Duration::from_millis(20);
    engine.run_due(&mut clock(now));
    assert_eq!(engine.stream_count(), STREAMS);

    let before = ALLOCATIONS.load(Relaxed);
    let frees_before = FREES.load(Relaxed);
    let mut served = 0u64;
    for round in 0..100u64 {
        // Producer side is not the tick; refill outside the counted region.
        let paused = ALLOCATIONS.load(Relaxed);
        let frees_paused = FREES.load(Relaxed);
        for (i, p) in producers.iter_mut().enumerate() {
            // A quarter of the streams play digits every other round (45 slots of a round's
            // 100), so ticks send telephone-events, DTMF silence and audio side by side.
            if i % 4 == 0 && round % 2 == 0 {
                controller
                    .send_dtmf(p.id(), PT_EVENT, "1w#")
                    .expect("control room");
            }
            p.push(&audio[..160 * (40 + i % 50)]);
            if round % 3 == 0 {
                p.mark(round).expect("mark room");
            }
            if round % 7 == 0 && i % 2 == 0 {
                p.clear();
            }
            while p.try_event().is_some() {}
            while p.try_sent_frame().is_some() {}
        }
        assert_eq!(ALLOCATIONS.load(Relaxed), paused, "producer side allocated");
        assert_eq!(FREES.load(Relaxed), frees_paused, "producer side freed");
        for step in 0..100u64 {
            // Every 50th step wakes 130 ms late: catch-up of 6 slots.
            now += if step % 50 == 49 {
                Duration::from_millis(130)
            } else {
                Duration::from_millis(20)
            };
            engine.run_due(&mut clock(now));
            served += 1;
        }
    }
    let after = ALLOCATIONS.load(Relaxed);
    let frees = FREES.load(Relaxed) - frees_before;
    let stats = controller.stats();
    assert!(stats.ticks > 10_000 && stats.catchup_packets > 0 && stats.underruns > 0);
    // 50 streams x 50 rounds x 2 digits.
    assert_eq!(stats.dtmf_digits_sent, 5000, "every digit played");
    assert_eq!(frees, 0, "{frees} frees in {served} wakes of the tick");
    assert_eq!(
        after - before,
        0,
        "{} allocations in {served} wakes of the tick",
        after - before
    );
    println!(
        "simulated: {} slots x {STREAMS} streams, {} packets, {} catch-up, {} underruns, {} DTMF digits, 0 allocations, 0 frees",
        stats.ticks, stats.packets_sent, stats.catchup_packets, stats.underruns, stats.dtmf_digits_sent
    );
}

/// The real thread, real clock, 50 streams over UDP loopback plus 50 sink streams for 2 s.
fn real_thread_with_udp() {
    let sender = Sender::start(SenderConfig {
        engine: EngineConfig {
            metrics: false,
            ..EngineConfig::default()
        },
        ..SenderConfig::default()
    })
    .expect("sender starts");
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    rx.set_nonblocking(true).expect("nonblocking");
    let tx = Arc::new(UdpSocket::bind("127.0.0.1:0").expect("bind loopback"));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut producers = Vec::new();
    for i in 0..100u32 {
        let output = if i % 2 == 0 {
            StreamOutput::Udp {
                socket: Arc::clone(&tx),
                remote: rx.local_addr().expect("bound"),
            }
        } else {
            StreamOutput::Sink(Box::new(CountingSink(Arc::clone(&bytes))))
        };
        let mut p = sender
            .add_stream(StreamConfig::new(
                Packetizer::with_initial(PT_PCMU, i, 0, 0),
                output,
            ))
            .expect("add");
        p.push(&vec![0x11; 160 * 150]);
        p.mark(1).expect("mark");
        producers.push(p);
    }
    // Warm-up: let the tick take the streams and settle.
    std::thread::sleep(Duration::from_millis(200));
    // A fifth of the streams play 9 digits (1.8 s) through the counted window.
    for p in producers.iter().step_by(5) {
        sender
            .send_dtmf(p.id(), PT_EVENT, "123456789")
            .expect("control room");
    }
    let ticks_before = sender.stats().ticks;
    let before = ALLOCATIONS.load(Relaxed);
    let frees_before = FREES.load(Relaxed);
    // The main thread only sleeps; the receive socket is drained afterwards by size, so the only
    // code running is the tick.
    std::thread::sleep(Duration::from_secs(2));
    let after = ALLOCATIONS.load(Relaxed);
    let frees = FREES.load(Relaxed) - frees_before;
    let stats = sender.stats();
    let mut buf = [0u8; 512];
    let mut received = 0;
    while rx.recv(&mut buf).is_ok() {
        received += 1;
    }
    assert!(stats.ticks - ticks_before >= 90, "the thread ticked");
    assert!(received > 0, "UDP packets arrived");
    assert!(stats.dtmf_digits_sent > 0, "DTMF played in the window");
    assert_eq!(
        after - before,
        0,
        "{} allocations on the real tick thread",
        after - before
    );
    assert_eq!(frees, 0, "{frees} frees on the real tick thread");
    println!(
        "real thread: {} ticks x 100 streams in 2 s, realtime={}, {received} UDP packets received, {} DTMF digits, 0 allocations, 0 frees",
        stats.ticks - ticks_before,
        sender.is_realtime(),
        stats.dtmf_digits_sent
    );
}

fn main() {
    engine_on_simulated_time();
    real_thread_with_udp();
}
