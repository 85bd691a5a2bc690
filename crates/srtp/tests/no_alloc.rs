//! Proof that `protect`, `unprotect` and their SRTCP twins allocate and free nothing: a counting
//! global allocator around thousands of packets, errors included (tampered, replayed, short).
//! `harness = false` so no test-runner thread allocates while we count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ontime_srtp::{SrtpContext, Suite, MAX_SRTP_TAG_LEN, SRTCP_TRAILER_LEN};

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

fn rtp(buf: &mut [u8], seq: u16, ssrc: u32) -> usize {
    buf[0] = 0x80;
    buf[1] = 0;
    buf[2..4].copy_from_slice(&seq.to_be_bytes());
    buf[4..8].copy_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    buf[8..12].copy_from_slice(&ssrc.to_be_bytes());
    buf[12..172].fill(0xD5);
    172
}

fn main() {
    let key = [7u8; 16];
    let salt = [9u8; 14];
    for suite in Suite::ALL {
        // Contexts are made before counting: key derivation is set-up, not the media path.
        let mut tx = SrtpContext::new(suite, &key, &salt).expect("key");
        let mut rx = SrtpContext::new(suite, &key, &salt).expect("key");
        let mut buf = [0u8; 172 + MAX_SRTP_TAG_LEN];
        let mut rtcp = [0u8; 28 + SRTCP_TRAILER_LEN];
        let (allocs, frees) = (ALLOCATIONS.load(Relaxed), FREES.load(Relaxed));
        let mut accepted = 0u32;
        let mut refused = 0u32;
        // 70 000 packets: across a sequence-number rollover, on three SSRCs, with every kind
        // of refusal on the receive side.
        for n in 0..70_000u32 {
            let seq = (n + 60_000) as u16;
            let ssrc = n % 3;
            let len = rtp(&mut buf, seq, ssrc);
            let len = tx.protect(&mut buf, len).expect("protect");
            if n % 10 == 5 {
                buf[20] ^= 1;
                refused += u32::from(rx.unprotect(&mut buf[..len]).is_err());
                buf[20] ^= 1;
            }
            accepted += u32::from(rx.unprotect(&mut buf[..len]).is_ok());
            if n % 10 == 7 {
                refused += u32::from(rx.unprotect(&mut buf[..len]).is_err()); // replay
                refused += u32::from(rx.unprotect(&mut buf[..10]).is_err()); // short
            }
            if n % 250 == 0 {
                rtcp[0] = 0x80;
                rtcp[1] = 200;
                rtcp[4..8].copy_from_slice(&ssrc.to_be_bytes());
                let len = tx.protect_rtcp(&mut rtcp, 28).expect("protect_rtcp");
                accepted += u32::from(rx.unprotect_rtcp(&mut rtcp[..len]).is_ok());
                refused += u32::from(rx.unprotect_rtcp(&mut rtcp[..len]).is_err());
            }
        }
        let allocs = ALLOCATIONS.load(Relaxed) - allocs;
        let frees = FREES.load(Relaxed) - frees;
        assert_eq!(accepted, 70_000 + 280, "every genuine packet accepted");
        assert_eq!(refused, 7_000 + 14_000 + 280, "every bad packet refused");
        assert_eq!(allocs, 0, "{allocs} allocations");
        assert_eq!(frees, 0, "{frees} frees");
        println!(
            "{suite}: {accepted} packets protected and unprotected, {refused} refused, 0 allocations, 0 frees"
        );
    }
}
