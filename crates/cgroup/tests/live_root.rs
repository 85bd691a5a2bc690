//! Live cgroup test: needs root and a writable CPU cgroup (this machine: v1 `cpu` at
//! `/sys/fs/cgroup/cpu`). Skips with a printed reason elsewhere. The child cgroup is removed by
//! its guard even when an assertion fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ontime_cgroup::{CgroupVersion, CpuCgroup, CpuQuota, Error};

/// This thread's id, from the `/proc/thread-self` link (`<pid>/task/<tid>`).
fn current_tid() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").expect("procfs");
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .expect("tid")
}

#[test]
fn child_cgroup_throttles_a_burning_thread_and_is_removed() {
    let parent = match CpuCgroup::current() {
        Ok(cg) => cg,
        Err(e) => {
            eprintln!("skip: no CPU cgroup for this process ({e})");
            return;
        }
    };
    let quota = CpuQuota::from_cores(0.2, Duration::from_millis(100)).expect("valid");
    let name = format!("ontime-live-test-{}", std::process::id());
    let rt = Some(Duration::from_millis(50));
    let child = match parent.create_child(&name, quota, rt) {
        Ok(child) => child,
        Err(e @ (Error::NotRoot { .. } | Error::PermissionDenied { .. })) => {
            eprintln!("skip: cannot create a child cgroup here ({e})");
            return;
        }
        Err(e) => panic!("creating a child cgroup failed: {e}"),
    };
    let dir = child.dir().to_owned();
    // Win the CPU against the rest of a shared machine, so the quota is what limits the burner.
    child.set_cpu_weight(10_000).expect("set weight");
    assert_eq!(child.cgroup().quota().expect("read back"), quota);
    if parent.has_rt_group_scheduling() {
        assert_eq!(
            child.cgroup().rt_runtime().expect("rt runtime"),
            Some(Duration::from_millis(50))
        );
    }

    // A thread that burns CPU for 600 ms of wall time inside the child.
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let go = Arc::new(AtomicBool::new(false));
    let go2 = Arc::clone(&go);
    let burner = std::thread::spawn(move || {
        tid_tx.send(current_tid()).expect("send tid");
        while !go2.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let end = Instant::now() + Duration::from_millis(600);
        let mut x = 0u64;
        while Instant::now() < end {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        x
    });
    let tid = tid_rx.recv().expect("tid");
    match child.cgroup().version() {
        CgroupVersion::V1 => child.add_thread(tid).expect("move thread"),
        CgroupVersion::V2 => {
            eprintln!("v2: a single thread cannot move; moving nothing, checking files only");
        }
    }
    let before = child.stat().expect("stat");
    go.store(true, Ordering::Release);
    let _ = burner.join();
    let delta = child.stat().expect("stat").since(&before);
    if child.cgroup().version() == CgroupVersion::V1 {
        assert!(
            delta.throttled > 0,
            "a thread burning 600 ms under a 0.2-core quota is throttled: {delta:?}"
        );
        println!(
            "live: {} periods, {} throttled, ratio {:?}",
            delta.periods,
            delta.throttled,
            delta.throttle_ratio()
        );
    }
    // A thread that has exited leaves the cgroup; move this thread in and let the guard move
    // it back.
    if child.cgroup().version() == CgroupVersion::V1 {
        let me = current_tid();
        child.add_thread(me).expect("move self");
        assert!(child.tasks().expect("tasks").contains(&me));
    }
    child.remove().expect("removed");
    assert!(!dir.exists(), "child cgroup directory removed");
    let own = std::fs::read_to_string("/proc/thread-self/cgroup").expect("procfs");
    assert!(
        !own.contains(&name),
        "thread moved back to the parent: {own}"
    );
}
