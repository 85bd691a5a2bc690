//! Checks `ontime_rtp::g722` against an independent G.722: spandsp's C codec as Debian ships it
//! (libspandsp2, spandsp 0.0.6), loaded at run time. Encoder and decoder run side by side with
//! spandsp's on several seconds of tones, chirps, noise, silence and full-scale clipping, and the
//! decoder on random byte streams, frame by frame (20 ms: 320 samples, 160 bytes). Skips with a
//! printed reason when the library is not installed (`apt install libspandsp2`).
//!
//! The encoder matches bit for bit. So does the decoder, but for one thing: where a decoded sample
//! lies past full scale, spandsp 0.0.6 casts it to 16 bits and so wraps it around (a loud click),
//! where ours saturates. Such a frame is counted apart, and each of its differing samples must
//! be one ours saturated; since the decoder's state never depends on its output, any other
//! disagreement would show up as differing samples off the rails.

// Calling C through function pointers is unsafe; this test does nothing else unsafe.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use libloading::Library;
use ontime_rtp::g722::{Decoder, Encoder, SILENCE_BYTE};
use ontime_rtp::{FRAME_BYTES, WIDEBAND_SAMPLES_PER_FRAME};

/// `g722_encode_state_t *g722_encode_init(g722_encode_state_t *s, int rate, int options)`, and
/// its twin `g722_decode_init`.
type InitFn = unsafe extern "C" fn(*mut c_void, c_int, c_int) -> *mut c_void;
/// `int g722_encode(g722_encode_state_t *s, uint8_t g722_data[], const int16_t amp[], int len)`.
type EncodeFn = unsafe extern "C" fn(*mut c_void, *mut u8, *const i16, c_int) -> c_int;
/// `int g722_decode(g722_decode_state_t *s, int16_t amp[], const uint8_t g722_data[], int len)`.
type DecodeFn = unsafe extern "C" fn(*mut c_void, *mut i16, *const u8, c_int) -> c_int;
/// `int g722_encode_free(g722_encode_state_t *s)`, and `g722_decode_free`.
type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// spandsp's G.722 entry points, valid while `_library` is loaded.
struct Spandsp {
    encode_init: InitFn,
    encode: EncodeFn,
    encode_free: FreeFn,
    decode_init: InitFn,
    decode: DecodeFn,
    decode_free: FreeFn,
    _library: Library,
}

impl Spandsp {
    /// The library, or `None` (with the reason printed) when it is not installed.
    fn load() -> Option<Spandsp> {
        // SAFETY: loading libspandsp runs only its (trivial) initialisers.
        let library = match unsafe { Library::new("libspandsp.so.2") } {
            Ok(library) => library,
            Err(_) => {
                eprintln!("skipped: libspandsp.so.2 not found (apt install libspandsp2)");
                return None;
            }
        };
        // SAFETY: the types above are the C declarations of spandsp's g722.h; the pointers are
        // used only while `_library`, stored beside them, keeps the library loaded.
        unsafe {
            let encode_init = *library
                .get::<InitFn>(b"g722_encode_init\0")
                .expect("g722_encode_init");
            let encode = *library
                .get::<EncodeFn>(b"g722_encode\0")
                .expect("g722_encode");
            let encode_free = *library
                .get::<FreeFn>(b"g722_encode_free\0")
                .expect("g722_encode_free");
            let decode_init = *library
                .get::<InitFn>(b"g722_decode_init\0")
                .expect("g722_decode_init");
            let decode = *library
                .get::<DecodeFn>(b"g722_decode\0")
                .expect("g722_decode");
            let decode_free = *library
                .get::<FreeFn>(b"g722_decode_free\0")
                .expect("g722_decode_free");
            Some(Spandsp {
                encode_init,
                encode,
                encode_free,
                decode_init,
                decode,
                decode_free,
                _library: library,
            })
        }
    }

    /// A spandsp encoder at 64 kbit/s, 16 kHz, unpacked (options 0).
    fn encoder(&self) -> SpanEncoder<'_> {
        // SAFETY: a NULL state asks spandsp to allocate one; freed in `Drop`.
        let state = unsafe { (self.encode_init)(std::ptr::null_mut(), 64_000, 0) };
        SpanEncoder {
            api: self,
            state: NonNull::new(state).expect("g722_encode_init"),
        }
    }

    /// A spandsp decoder at 64 kbit/s, 16 kHz, unpacked (options 0).
    fn decoder(&self) -> SpanDecoder<'_> {
        // SAFETY: as for `encoder`.
        let state = unsafe { (self.decode_init)(std::ptr::null_mut(), 64_000, 0) };
        SpanDecoder {
            api: self,
            state: NonNull::new(state).expect("g722_decode_init"),
        }
    }
}

struct SpanEncoder<'a> {
    api: &'a Spandsp,
    state: NonNull<c_void>,
}

impl SpanEncoder<'_> {
    /// Encodes one frame (an even number of samples) and returns its bytes.
    fn encode(&mut self, pcm: &[i16]) -> Vec<u8> {
        assert_eq!(pcm.len() % 2, 0);
        let mut out = vec![0u8; pcm.len() / 2];
        let len = c_int::try_from(pcm.len()).expect("frame length");
        // SAFETY: `out` has room for len / 2 bytes, all spandsp writes at 64 kbit/s unpacked.
        let n =
            unsafe { (self.api.encode)(self.state.as_ptr(), out.as_mut_ptr(), pcm.as_ptr(), len) };
        assert_eq!(usize::try_from(n), Ok(out.len()));
        out
    }
}

impl Drop for SpanEncoder<'_> {
    fn drop(&mut self) {
        // SAFETY: the state came from g722_encode_init with a NULL argument and is freed once.
        unsafe { (self.api.encode_free)(self.state.as_ptr()) };
    }
}

struct SpanDecoder<'a> {
    api: &'a Spandsp,
    state: NonNull<c_void>,
}

impl SpanDecoder<'_> {
    /// Decodes one frame of bytes and returns its samples.
    fn decode(&mut self, bytes: &[u8]) -> Vec<i16> {
        let mut out = vec![0i16; 2 * bytes.len()];
        let len = c_int::try_from(bytes.len()).expect("frame length");
        // SAFETY: `out` has room for two samples per byte, all spandsp writes at 64 kbit/s.
        let n = unsafe {
            (self.api.decode)(self.state.as_ptr(), out.as_mut_ptr(), bytes.as_ptr(), len)
        };
        assert_eq!(usize::try_from(n), Ok(out.len()));
        out
    }
}

impl Drop for SpanDecoder<'_> {
    fn drop(&mut self) {
        // SAFETY: the state came from g722_decode_init with a NULL argument and is freed once.
        unsafe { (self.api.decode_free)(self.state.as_ptr()) };
    }
}

/// A fixed-seed xorshift generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn sample(&mut self) -> i16 {
        (self.next() >> 48) as u16 as i16
    }
}

const SECOND: usize = 16_000;

fn to_i16(x: f64) -> i16 {
    x.round().clamp(-32768.0, 32767.0) as i16
}

fn sine(freq: f64, amplitude: f64, n: usize) -> f64 {
    amplitude * (2.0 * std::f64::consts::PI * freq * n as f64 / SECOND as f64).sin()
}

/// Nine seconds of test signals, one second each.
fn signals() -> Vec<(&'static str, Vec<i16>)> {
    let mut noise = XorShift(0x2545_F491_4F6C_DD1D);
    let second = |f: &mut dyn FnMut(usize) -> i16| (0..SECOND).map(f).collect::<Vec<i16>>();
    vec![
        (
            "440 Hz at -10 dBFS",
            second(&mut |n| to_i16(sine(440.0, 10_362.0, n))),
        ),
        (
            "DTMF 1 (697 + 1209 Hz)",
            second(&mut |n| to_i16(sine(697.0, 8000.0, n) + sine(1209.0, 8000.0, n))),
        ),
        (
            "chirp 50 Hz to 7950 Hz",
            second(&mut |n| {
                let t = n as f64 / SECOND as f64;
                let phase = 2.0 * std::f64::consts::PI * (50.0 * t + 3950.0 * t * t);
                to_i16(12_000.0 * phase.sin())
            }),
        ),
        (
            "white noise at -12 dBFS",
            second(&mut |_| noise.sample() / 4),
        ),
        ("silence", vec![0; SECOND]),
        ("white noise at full scale", second(&mut |_| noise.sample())),
        (
            "1 kHz clipped at 3x full scale",
            second(&mut |n| to_i16(sine(1000.0, 98_301.0, n))),
        ),
        (
            "1 kHz square at full scale",
            second(&mut |n| if n % 16 < 8 { i16::MAX } else { i16::MIN }),
        ),
        (
            "1 kHz at -56 dBFS",
            second(&mut |n| to_i16(sine(1000.0, 50.0, n))),
        ),
    ]
}

/// How one frame of our decoder's output compares with spandsp's.
#[derive(Debug, PartialEq)]
enum Agreement {
    Exact,
    /// Differs only where ours saturated and spandsp 0.0.6 wrapped around.
    Saturated,
}

fn compare(ours: &[i16], theirs: &[i16], what: &str) -> Agreement {
    assert_eq!(ours.len(), theirs.len());
    if ours == theirs {
        return Agreement::Exact;
    }
    for (k, (&a, &b)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            a == b || a == i16::MAX || a == i16::MIN,
            "{what}: sample {k}: ours {a}, spandsp {b}"
        );
    }
    Agreement::Saturated
}

#[test]
fn encoder_and_decoder_match_spandsp_on_varied_signals() {
    let Some(spandsp) = Spandsp::load() else {
        return;
    };
    let mut their_encoder = spandsp.encoder();
    let mut their_decoder = spandsp.decoder();
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new();
    let (mut fed, mut encoded_exact) = (0, 0);
    let (mut decoded_exact, mut decoded_saturated) = (0, 0);
    let mut saturated_in = Vec::new();
    for (name, signal) in signals() {
        for frame in signal.chunks(WIDEBAND_SAMPLES_PER_FRAME) {
            assert_eq!(frame.len(), WIDEBAND_SAMPLES_PER_FRAME);
            fed += 1;
            let theirs = their_encoder.encode(frame);
            let mut ours = [0u8; FRAME_BYTES];
            assert_eq!(encoder.encode(frame, &mut ours), FRAME_BYTES);
            assert_eq!(
                ours[..],
                theirs[..],
                "{name}: frame {fed} encoded differently"
            );
            encoded_exact += 1;

            let theirs = their_decoder.decode(&ours);
            let mut pcm = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
            assert_eq!(decoder.decode(&ours, &mut pcm), WIDEBAND_SAMPLES_PER_FRAME);
            match compare(&pcm, &theirs, name) {
                Agreement::Exact => decoded_exact += 1,
                Agreement::Saturated => {
                    decoded_saturated += 1;
                    if !saturated_in.contains(&name) {
                        saturated_in.push(name);
                    }
                }
            }
        }
    }
    eprintln!(
        "{fed} frames: encoded bit-exact {encoded_exact}; decoded bit-exact {decoded_exact}, \
         differing only by spandsp's wrap-around {decoded_saturated} (in {saturated_in:?})"
    );
    assert_eq!(fed, 9 * 50);
    assert_eq!(encoded_exact, fed);
    // The loud signals decode past full scale in 68 frames: there spandsp wraps, ours saturates.
    assert_eq!((decoded_exact, decoded_saturated), (382, 68));
    assert_eq!(
        saturated_in,
        [
            "white noise at full scale",
            "1 kHz clipped at 3x full scale",
            "1 kHz square at full scale"
        ]
    );
}

#[test]
fn decoder_matches_spandsp_on_random_bytes() {
    let Some(spandsp) = Spandsp::load() else {
        return;
    };
    // Twenty 1 s streams: ten of uniform bytes, five of only the largest low-band codes (loud),
    // five of only the smallest (quiet), each on a fresh pair of decoders.
    let mut random = XorShift(0x9E37_79B9_7F4A_7C15);
    let (mut fed, mut exact, mut saturated) = (0, 0, 0);
    for stream in 0..20 {
        let mut theirs = spandsp.decoder();
        let mut ours = Decoder::new();
        for _ in 0..50 {
            let mut frame = [0u8; FRAME_BYTES];
            for byte in &mut frame {
                let r = random.next() as u8;
                *byte = match stream {
                    0..10 => r,
                    10..15 => r & 0xC7 | 0x04,
                    _ => r | 0x3C,
                };
            }
            fed += 1;
            let expected = theirs.decode(&frame);
            let mut pcm = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
            assert_eq!(ours.decode(&frame, &mut pcm), WIDEBAND_SAMPLES_PER_FRAME);
            match compare(&pcm, &expected, &format!("stream {stream}")) {
                Agreement::Exact => exact += 1,
                Agreement::Saturated => saturated += 1,
            }
        }
    }
    eprintln!(
        "{fed} frames: bit-exact {exact}, differing only by spandsp's wrap-around {saturated}"
    );
    assert_eq!(fed, 20 * 50);
    // Random codes drive the decoder to full scale often: 582 frames with wrapped samples.
    assert_eq!((exact, saturated), (418, 582));
}

/// The claim `ontime_rtp::g722`'s documentation makes about the fill, checked on spandsp's
/// arithmetic: a decoder that heard an earlier reply before the fill plays a new reply
/// differently from one that heard only the fill, because the fill does not wipe the earlier
/// reply's residue from its state.
#[test]
fn in_spandsp_too_the_fill_leaves_an_earlier_reply_behind() {
    let Some(spandsp) = Spandsp::load() else {
        return;
    };
    let earlier: Vec<i16> = (0..SECOND + 4321 * 2)
        .map(|n| to_i16(sine(230.0, 9000.0, n) + sine(1900.0, 3000.0, n)))
        .collect();
    let reply: Vec<i16> = (0..SECOND / 2)
        .map(|n| to_i16(sine(180.0, 7000.0, n) + sine(2600.0, 2000.0, n)))
        .collect();
    let encode = |mut encoder: Encoder, pcm: &[i16]| {
        let mut bytes = vec![0u8; pcm.len() / 2];
        assert_eq!(encoder.encode(pcm, &mut bytes), bytes.len());
        bytes
    };
    let earlier = encode(Encoder::after_silence(), &earlier);
    let reply = encode(Encoder::after_silence(), &reply);
    let fill = [SILENCE_BYTE; FRAME_BYTES];

    // What the reply plays as after `history` and 1 s of fill, by spandsp and by ours (which
    // must agree all along); and the number of frames decoded.
    let plays = |history: &[u8]| {
        let mut theirs = spandsp.decoder();
        let mut ours = Decoder::new();
        let mut frames = 0;
        let mut reply_played = Vec::new();
        let fills = std::iter::repeat_n(&fill[..], 50);
        for (k, frame) in history
            .chunks(FRAME_BYTES)
            .chain(fills)
            .chain(reply.chunks(FRAME_BYTES))
            .enumerate()
        {
            let expected = theirs.decode(frame);
            let mut pcm = vec![0i16; 2 * frame.len()];
            assert_eq!(ours.decode(frame, &mut pcm), pcm.len());
            assert_eq!(pcm, expected, "frame {k}");
            frames += 1;
            if k >= history.len().div_ceil(FRAME_BYTES) + 50 {
                reply_played.extend(expected);
            }
        }
        (frames, reply_played)
    };
    let (frames, fresh) = plays(&[]);
    assert_eq!(frames, 50 + 25);
    let (frames, heard) = plays(&earlier);
    assert_eq!(frames, 78 + 50 + 25);
    assert_eq!((fresh.len(), heard.len()), (SECOND / 2, SECOND / 2));
    let differing = fresh.iter().zip(&heard).filter(|(a, b)| a != b).count();
    let last = fresh.iter().zip(&heard).rposition(|(a, b)| a != b);
    eprintln!("the reply differs in {differing} samples, the last at {last:?}");
    // 2562 of the reply's 8000 samples differ, the last at 214 ms.
    assert_eq!((differing, last), (2562, Some(3429)));
}
