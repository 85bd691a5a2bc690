//! The 20 ms fast path allocates nothing: building a packet into a reused buffer, G.711-encoding
//! a frame and parsing the packet back are counted by a global allocator wrapper.
// The counting allocator must implement `GlobalAlloc`, an unsafe trait; it only forwards to the
// system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ontime_rtp::g711::Law;
use ontime_rtp::{parse_rtp, Packetizer, FRAME_BYTES, MAX_FRAME_PACKET_BYTES, PT_PCMA};

struct CountingAllocator;

thread_local! {
    // Counted per thread: the test harness allocates on its own threads while the loop runs.
    // Const-initialised cells without destructors: safe to touch from inside the allocator.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is the system allocator's.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged (see the impl comment).
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

#[test]
fn building_and_parsing_frames_allocates_nothing() {
    let mut packetizer = Packetizer::with_initial(PT_PCMA, 0xCAFE_F00D, 65000, 0);
    let mut buf = [0u8; MAX_FRAME_PACKET_BYTES];
    let samples = [1234i16; FRAME_BYTES];
    let mut frame = [0u8; FRAME_BYTES];
    let mut checksum = 0u64;

    // Count this thread's allocations around the loop only.
    COUNTING.with(|c| c.set(true));
    for tick in 0..1000u32 {
        if tick % 100 == 0 {
            packetizer.start_talkspurt();
        }
        if tick % 250 == 0 {
            packetizer.skip_frames(2);
        }
        Law::Alaw.encode_slice(&samples, &mut frame);
        let len = packetizer
            .write_frame(&frame, &mut buf)
            .expect("buffer fits a 20 ms frame");
        let view = parse_rtp(&buf[..len]).expect("own packet parses");
        checksum += u64::from(view.sequence_number) + u64::from(view.payload[0]);
    }
    COUNTING.with(|c| c.set(false));

    assert_eq!(
        ALLOCATIONS.with(Cell::get),
        0,
        "allocations on the 20 ms path"
    );
    // The wrap happened and every packet was really built.
    assert_eq!(packetizer.next_sequence(), (65000u32 + 1000 - 65536) as u16);
    assert!(checksum > 0);
}
