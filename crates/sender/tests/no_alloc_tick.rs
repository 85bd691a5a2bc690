//! Proof that the 20 ms tick path allocates nothing: a counting global allocator, many streams,
//! many ticks (DTMF telephone-events included, SRTP-protected streams of both suites among
//! plain ones), zero allocations after warm-up. `harness = false`
//! so no test-runner thread allocates while we count. Frees are counted too: a command whose
//! payload owned heap memory would be freed on the tick when dropped there.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use ontime_rtp::{Codec, Packetizer, PT_OPUS_OFFER, PT_PCMU};
use ontime_sender::{
    EngineConfig, PacketInfo, PacketSink, Sender, SenderConfig, StreamConfig, StreamOutput,
    TickEngine,
};
use ontime_srtp::{SrtpContext, Suite};

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

/// Unprotects every packet on the tick with the stream's key and counts those that
/// authenticate and decrypt (SRTP's receive side allocates nothing either).
struct SrtpCheckSink {
    rx: SrtpContext,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl PacketSink for SrtpCheckSink {
    fn send_packet(&mut self, packet: &[u8], _info: PacketInfo) -> io::Result<()> {
        let mut buf = [0u8; 256];
        let Some(copy) = buf.get_mut(..packet.len()) else {
            self.failed.fetch_add(1, Relaxed);
            return Ok(());
        };
        copy.copy_from_slice(packet);
        match self.rx.unprotect(copy) {
            Ok(_) => self.ok.fetch_add(1, Relaxed),
            Err(_) => self.failed.fetch_add(1, Relaxed),
        };
        Ok(())
    }
}

/// The master key and salt of SRTP stream `i`.
fn srtp_key(i: usize) -> ([u8; 16], [u8; 14]) {
    ([i as u8; 16], [!(i as u8); 14])
}

/// The suite of SRTP stream `i`: both, alternately.
fn srtp_suite(i: usize) -> Suite {
    Suite::ALL[i / 3 % 2]
}

fn srtp_context(i: usize) -> SrtpContext {
    let (key, salt) = srtp_key(i);
    SrtpContext::new(srtp_suite(i), &key, &salt).expect("key")
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
    let srtp_ok = Arc::new(AtomicU64::new(0));
    let srtp_failed = Arc::new(AtomicU64::new(0));
    let mut producers = Vec::new();
    for i in 0..STREAMS {
        // A third of the streams are SRTP (both suites), checked by a receiving context; the
        // sequence numbers start near the top so the rollover counter moves during the run.
        let srtp = i % 3 == 0;
        let output: Box<dyn PacketSink> = if srtp {
            Box::new(SrtpCheckSink {
                rx: srtp_context(i),
                ok: Arc::clone(&srtp_ok),
                failed: Arc::clone(&srtp_failed),
            })
        } else {
            Box::new(CountingSink(Arc::clone(&bytes)))
        };
        // Every fourth stream is shaped like an Opus call: its 48 kHz clock's timestamp step
        // and a whole encoded frame for silence instead of a silence byte.
        let opus = i % 4 == 2;
        let packetizer = if opus {
            Packetizer::with_initial(PT_OPUS_OFFER, i as u32, 65_000, 0)
                .with_timestamp_step(Codec::Opus.timestamp_step())
        } else {
            Packetizer::with_initial(PT_PCMU, i as u32, 65_000, 0)
        };
        let mut config = StreamConfig::new(packetizer, StreamOutput::Sink(output));
        if opus {
            config.silence_frame = Some(ontime_rtp::opus::silence_frame());
        }
        if srtp {
            config.srtp = Some(srtp_context(i));
        }
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
    // A 130 ms late wake finds 6 or 7 slots due as its 10 ms phase alternates, 5 or 6 of them
    // catch-up: 5.5 on average over the 200 late wakes, beside the warm-up's tick and one for
    // each of the 10 000 wakes. Underruns are this script's (streams fed less than they play).
    assert_eq!(stats.ticks, 1 + 10_000 + 200 * 11 / 2);
    assert_eq!(stats.catchup_packets, STREAMS as u64 * 200 * 11 / 2);
    assert_eq!(stats.underruns, 708_506);
    // 50 streams x 50 rounds x 2 digits.
    assert_eq!(stats.dtmf_digits_sent, 5000, "every digit played");
    let srtp_streams = STREAMS.div_ceil(3) as u64;
    assert_eq!(
        srtp_failed.load(Relaxed),
        0,
        "every SRTP packet authenticated"
    );
    assert_eq!(
        srtp_ok.load(Relaxed),
        stats.ticks * srtp_streams,
        "one SRTP packet per slot per SRTP stream"
    );
    assert!(producers
        .iter()
        .all(|p| p.stats().srtp_errors == 0 && p.stats().send_errors == 0));
    assert_eq!(frees, 0, "{frees} frees in {served} wakes of the tick");
    assert_eq!(
        after - before,
        0,
        "{} allocations in {served} wakes of the tick",
        after - before
    );
    println!(
        "simulated: {} slots x {STREAMS} streams, {} packets ({} SRTP, unprotected by the sink), {} catch-up, {} underruns, {} DTMF digits, 0 allocations, 0 frees",
        stats.ticks, stats.packets_sent, srtp_ok.load(Relaxed), stats.catchup_packets, stats.underruns, stats.dtmf_digits_sent
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
    let srtp_ok = Arc::new(AtomicU64::new(0));
    let srtp_failed = Arc::new(AtomicU64::new(0));
    let mut producers = Vec::new();
    for i in 0..100u32 {
        // Streams 0, 3, 6, …: SRTP, over UDP (even) or into a checking sink (odd).
        let srtp = i % 3 == 0;
        let output = if i % 2 == 0 {
            StreamOutput::Udp {
                socket: Arc::clone(&tx),
                remote: rx.local_addr().expect("bound"),
            }
        } else if srtp {
            StreamOutput::Sink(Box::new(SrtpCheckSink {
                rx: srtp_context(i as usize),
                ok: Arc::clone(&srtp_ok),
                failed: Arc::clone(&srtp_failed),
            }))
        } else {
            StreamOutput::Sink(Box::new(CountingSink(Arc::clone(&bytes))))
        };
        let mut config = StreamConfig::new(Packetizer::with_initial(PT_PCMU, i, 0, 0), output);
        if srtp {
            config.srtp = Some(srtp_context(i as usize));
        }
        let mut p = sender.add_stream(config).expect("add");
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
    // The UDP SRTP streams' packets are unprotected here, off the tick, with one context per
    // SSRC (the SSRC is the stream's index).
    let mut receivers: Vec<Option<SrtpContext>> = (0..100)
        .map(|i| (i % 6 == 0).then(|| srtp_context(i)))
        .collect();
    let mut udp_srtp = 0;
    while let Ok(n) = rx.recv(&mut buf) {
        received += 1;
        let ssrc = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
        if let Some(Some(ctx)) = receivers.get_mut(ssrc) {
            let plain = ctx
                .unprotect(&mut buf[..n])
                .expect("UDP SRTP packet authenticates");
            assert_eq!(plain + srtp_suite(ssrc).srtp_tag_len(), n);
            udp_srtp += 1;
        } else {
            assert!(n == 172 || n == 16, "plain RTP: {n} bytes");
        }
    }
    assert!(udp_srtp > 0, "SRTP over UDP arrived");
    assert!(srtp_ok.load(Relaxed) > 0 && srtp_failed.load(Relaxed) == 0);
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
        "real thread: {} ticks x 100 streams in 2 s (34 SRTP), realtime={}, {received} UDP packets received ({udp_srtp} SRTP), {} SRTP packets unprotected on the tick, {} DTMF digits, 0 allocations, 0 frees",
        stats.ticks - ticks_before,
        sender.is_realtime(),
        srtp_ok.load(Relaxed),
        stats.dtmf_digits_sent
    );
}

fn main() {
    engine_on_simulated_time();
    real_thread_with_udp();
}
