//! The calls' playout-tick deadlines on one kernel timer (`timerfd`) shared by every call,
//! instead of tokio's timer wheel.
//!
//! A call's task waits for its next 20 ms playout tick. While the caller's packets flow, each
//! packet runs the tick and pushes the deadline 25 ms out, so the deadline is moved 50 times a
//! second and almost never reached; it is reached when packets stop (DTX, hold, loss).
//!
//! On tokio's wheel such a deadline costs a wake for nothing every 64 ms: a deadline past the
//! current 64 ms block sits on the wheel's second level, whose slots expire at their *start*,
//! so the runtime wakes at every block boundary to move the entry down a level, whether or not
//! it will fire (`tokio` 1.x, `runtime/time/wheel/level.rs`, `next_expiration`). At one call
//! that was 15.6 of the I/O thread's 66–69 wakes a second.
//!
//! One `timerfd` per call removed those wakes at one call and cost more than it saved under
//! load (docs/capacity.md, *A call's tick on a kernel timer, tried and reverted*): while the
//! inference thread held the shared core, every call's deadline passed and each timer expired
//! on its own, an interrupt and an epoll event apiece. Here all calls share one kernel timer,
//! set to the earliest deadline of all: it is re-armed only when that earliest deadline moves,
//! and one expiry wakes every call that is due, as tokio's wheel does, without the boundary
//! wakes. Written here because tokio offers no timer without the wheel, and no maintained crate
//! offers a re-armable `timerfd` on tokio's `AsyncFd`; the system calls are three.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tracing::warn;

/// The calls' shared tick timer. [`TickAlarms::start`] it once, inside the runtime, and give
/// each call its own [`TickAlarm`].
#[derive(Debug)]
pub(crate) struct TickAlarms {
    shared: Arc<Shared>,
    /// The task that reads the timer's expiries, ended with the last reference to this.
    expiry: tokio::task::AbortHandle,
}

impl Drop for TickAlarms {
    fn drop(&mut self) {
        self.expiry.abort();
    }
}

#[derive(Debug)]
struct Shared {
    fd: AsyncFd<OwnedFd>,
    state: Mutex<State>,
    next_id: AtomicU64,
    /// The kernel timer failed once (it does not on Linux): every wait uses tokio's timer
    /// from then on, rather than missing ticks.
    failed: AtomicBool,
}

/// Who waits for what.
#[derive(Debug, Default)]
struct State {
    /// Each waiting call's deadline and task.
    waits: HashMap<u64, (Instant, Waker)>,
    /// The same deadlines, earliest first.
    order: BTreeSet<(Instant, u64)>,
    /// What the kernel timer is set to (`None`: disarmed, or expired and read).
    armed: Option<Instant>,
}

impl State {
    fn earliest(&self) -> Option<Instant> {
        self.order.first().map(|&(at, _)| at)
    }

    fn remove(&mut self, id: u64) {
        if let Some((at, _)) = self.waits.remove(&id) {
            self.order.remove(&(at, id));
        }
    }
}

impl TickAlarms {
    /// Creates the kernel timer and spawns the task that reads its expiries. Call inside a
    /// tokio runtime with I/O enabled.
    #[allow(unsafe_code)]
    pub(crate) fn start() -> io::Result<Arc<Self>> {
        // SAFETY: plain system call; the flags are valid for `timerfd_create`.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just created and owned by nothing else; from here the
        // `OwnedFd` is owned by the `AsyncFd` until it is dropped, and nothing closes or
        // replaces the descriptor meanwhile.
        let fd = unsafe {
            let owned = OwnedFd::from_raw_fd(raw);
            AsyncFd::register_with_interest(owned, Interest::READABLE)
        };
        let shared = Arc::new(Shared {
            fd: fd.map_err(io::Error::from)?,
            state: Mutex::new(State::default()),
            next_id: AtomicU64::new(0),
            failed: AtomicBool::new(false),
        });
        let expiry = tokio::spawn(expire(shared.clone())).abort_handle();
        Ok(Arc::new(Self { shared, expiry }))
    }

    /// A call's own alarm: one deadline at a time, forgotten when the alarm is dropped.
    pub(crate) fn alarm(self: &Arc<Self>) -> TickAlarm {
        TickAlarm {
            shared: self.shared.clone(),
            _alarms: self.clone(),
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// One call's deadline on the shared timer.
#[derive(Debug)]
pub(crate) struct TickAlarm {
    shared: Arc<Shared>,
    /// Keeps the expiry task running while the call waits.
    _alarms: Arc<TickAlarms>,
    id: u64,
}

impl TickAlarm {
    /// Waits until `deadline` (at once if it has passed). Cancel-safe (a `select!` arm): a
    /// dropped wait leaves its deadline registered, and the next wait replaces it, so a call
    /// that moves its deadline with every packet re-arms the kernel timer at most once per
    /// packet and only when its deadline is the earliest of all.
    pub(crate) async fn sleep_until(&self, deadline: Instant) {
        if self.shared.failed.load(Ordering::Relaxed) {
            return tokio::time::sleep_until(deadline.into()).await;
        }
        TickWait {
            alarm: self,
            deadline,
        }
        .await;
    }
}

impl Drop for TickAlarm {
    fn drop(&mut self) {
        // The kernel timer stays as it is: if it was set for this call, its expiry finds
        // nobody due and re-arms for the next.
        self.shared.lock().remove(self.id);
    }
}

struct TickWait<'a> {
    alarm: &'a TickAlarm,
    deadline: Instant,
}

impl Future for TickWait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let shared = &self.alarm.shared;
        let id = self.alarm.id;
        let mut state = shared.lock();
        if Instant::now() >= self.deadline || shared.failed.load(Ordering::Relaxed) {
            // Due (or the timer failed: the caller's next wait takes tokio's timer).
            state.remove(id);
            return Poll::Ready(());
        }
        match state.waits.get_mut(&id) {
            Some((at, waker)) if *at == self.deadline => {
                if !waker.will_wake(cx.waker()) {
                    waker.clone_from(cx.waker());
                }
            }
            _ => {
                state.remove(id);
                state.order.insert((self.deadline, id));
                state.waits.insert(id, (self.deadline, cx.waker().clone()));
            }
        }
        shared.arm_for_earliest(&mut state);
        Poll::Pending
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code under the lock panics; a poisoned lock still holds consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the kernel timer to the earliest deadline if it is set to anything else. A
    /// deadline that leaves the timer set later than needed is not possible; one that leaves
    /// it set earlier would cost an expiry for nobody, so it is re-armed either way.
    fn arm_for_earliest(&self, state: &mut State) {
        let Some(earliest) = state.earliest() else {
            return; // nobody waits: an expiry still set finds nobody and is not re-armed
        };
        if state.armed == Some(earliest) {
            return;
        }
        match self.set(earliest) {
            Ok(()) => state.armed = Some(earliest),
            Err(e) => self.fail(state, &e),
        }
    }

    /// Sets the kernel timer to `deadline`, relative to now; re-arming discards an expiry not
    /// yet read.
    #[allow(unsafe_code)]
    fn set(&self, deadline: Instant) -> io::Result<()> {
        // A zero `it_value` would disarm the timer: a deadline already passed expires in 1 ns.
        let after = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec; the old value is not asked for.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The kernel timer failed: wake every waiting call, whose next wait takes tokio's timer.
    fn fail(&self, state: &mut State, error: &io::Error) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            warn!(%error, "the calls' tick timer failed; their ticks use tokio's timer");
        }
        state.order.clear();
        for (_, (_, waker)) in state.waits.drain() {
            waker.wake();
        }
    }

    /// Reads one expiry: `false` if there was none (readiness left over from an expiry a
    /// re-arm discarded).
    #[allow(unsafe_code)]
    fn read_expiry(&self) -> io::Result<bool> {
        let mut expirations = [0u8; 8];
        // SAFETY: reads 8 bytes into an 8-byte buffer from a descriptor we own.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                expirations.as_mut_ptr().cast(),
                expirations.len(),
            )
        };
        if n >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            Ok(false)
        } else {
            Err(e)
        }
    }
}

/// The task that reads the timer's expiries and wakes the calls that are due, until the last
/// [`TickAlarms`] is dropped (which aborts it).
async fn expire(s: Arc<Shared>) {
    let mut due = Vec::new();
    loop {
        let ready = s.fd.readable().await;
        let mut guard = match ready {
            Ok(guard) => guard,
            Err(e) => {
                let mut state = s.lock();
                s.fail(&mut state, &e);
                return;
            }
        };
        match s.read_expiry() {
            Ok(true) => {}
            Ok(false) => {
                guard.clear_ready();
                continue;
            }
            Err(e) => {
                let mut state = s.lock();
                s.fail(&mut state, &e);
                return;
            }
        }
        {
            let now = Instant::now();
            let mut state = s.lock();
            state.armed = None; // a one-shot timer is disarmed by its expiry
            while let Some(&(at, id)) = state.order.first() {
                if at > now {
                    break;
                }
                state.order.pop_first();
                if let Some((_, waker)) = state.waits.remove(&id) {
                    due.push(waker);
                }
            }
            s.arm_for_earliest(&mut state);
        }
        for waker in due.drain(..) {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn wakes_at_the_deadline_and_not_before() {
        runtime().block_on(async {
            let alarms = TickAlarms::start().unwrap();
            let alarm = alarms.alarm();
            let deadline = Instant::now() + Duration::from_millis(30);
            alarm.sleep_until(deadline).await;
            assert!(Instant::now() >= deadline);
            assert_eq!(alarms.shared.lock().waits.len(), 0);
        });
    }

    #[test]
    fn a_past_deadline_returns_at_once_and_registers_nothing() {
        runtime().block_on(async {
            let alarms = TickAlarms::start().unwrap();
            let alarm = alarms.alarm();
            let past = Instant::now() - Duration::from_millis(5);
            alarm.sleep_until(past).await;
            alarm.sleep_until(past).await;
            let state = alarms.shared.lock();
            assert_eq!((state.waits.len(), state.order.len()), (0, 0));
            assert_eq!(state.armed, None);
        });
    }

    #[test]
    fn calls_wake_in_deadline_order_each_at_its_own() {
        runtime().block_on(async {
            let alarms = TickAlarms::start().unwrap();
            let start = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for (i, ms) in [(0u32, 45u64), (1, 15), (2, 30)] {
                let alarm = alarms.alarm();
                tasks.spawn(async move {
                    let deadline = start + Duration::from_millis(ms);
                    alarm.sleep_until(deadline).await;
                    (i, Instant::now() >= deadline, Instant::now())
                });
            }
            let mut woke = Vec::new();
            while let Some(r) = tasks.join_next().await {
                woke.push(r.unwrap());
            }
            woke.sort_by_key(|&(_, _, at)| at);
            let order: Vec<_> = woke.iter().map(|&(i, on_time, _)| (i, on_time)).collect();
            assert_eq!(order, [(1, true), (2, true), (0, true)]);
        });
    }

    #[test]
    fn a_moved_deadline_replaces_the_old_one() {
        runtime().block_on(async {
            let alarms = TickAlarms::start().unwrap();
            let alarm = alarms.alarm();
            let early = Instant::now() + Duration::from_millis(5);
            // A wait dropped before its deadline stays registered...
            tokio::select! {
                biased;
                () = alarm.sleep_until(early) => panic!("woke before a 5 ms deadline"),
                () = std::future::ready(()) => {}
            }
            {
                let state = alarms.shared.lock();
                assert_eq!(
                    state.order.iter().copied().collect::<Vec<_>>(),
                    [(early, 0)]
                );
                assert_eq!(state.armed, Some(early));
            }
            // ...until the next wait moves it; the stale expiry wakes nobody early.
            std::thread::sleep(Duration::from_millis(10));
            let later = Instant::now() + Duration::from_millis(20);
            alarm.sleep_until(later).await;
            assert!(
                Instant::now() >= later,
                "the stale deadline woke the wait early"
            );
        });
    }

    #[test]
    fn a_dropped_alarm_is_forgotten() {
        runtime().block_on(async {
            let alarms = TickAlarms::start().unwrap();
            let (a, b) = (alarms.alarm(), alarms.alarm());
            let soon = Instant::now() + Duration::from_millis(20);
            for alarm in [&a, &b] {
                tokio::select! {
                    biased;
                    () = alarm.sleep_until(soon) => panic!("woke before a 20 ms deadline"),
                    () = std::future::ready(()) => {}
                }
            }
            assert_eq!(alarms.shared.lock().waits.len(), 2);
            drop(a);
            let state = alarms.shared.lock();
            assert_eq!(state.waits.keys().copied().collect::<Vec<_>>(), [1]);
            assert_eq!(state.order.len(), 1);
        });
    }

    /// Times this thread blocked (`voluntary_ctxt_switches` of `/proc/thread-self/status`).
    fn blocks() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let field = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap();
        field.trim().parse().unwrap()
    }

    /// A call's loop on its own current-thread runtime: datagrams every 20 ms for 1 s, each
    /// moving the tick's deadline 25 ms ahead (the playout tick's fallback). Returns how often
    /// the thread blocked beyond the wakes that found a datagram or a due deadline (a datagram
    /// a busy machine delayed past 25 ms lets the deadline fire, as it should).
    fn blocks_beyond_packets(kernel_timer: bool) -> i64 {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let drain = rx.try_clone().unwrap();
        runtime().block_on(async move {
            let reader = crate::media_socket::MediaReader::new(rx).unwrap();
            let alarms = TickAlarms::start().unwrap();
            let alarm = alarms.alarm();
            let pacer = std::thread::spawn(move || {
                let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                for _ in 0..51 {
                    tx.send_to(&[0u8; 172], to).unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            let mut buf = [0u8; 1500];
            reader.recv_from(&mut buf).await.unwrap();
            let first_blocks = blocks();
            let (mut packet_wakes, mut fired, mut received) = (0i64, 0u32, 1);
            let mut wake = Instant::now() + Duration::from_millis(25);
            while received < 51 {
                tokio::select! {
                    r = reader.recv_from(&mut buf) => {
                        r.unwrap();
                        received += 1;
                        packet_wakes += 1;
                        // Datagrams that queued meanwhile came without a wake of their own.
                        while drain.recv_from(&mut buf).is_ok() {
                            received += 1;
                        }
                        wake = Instant::now() + Duration::from_millis(25);
                    }
                    () = alarm.sleep_until(wake), if kernel_timer => {
                        fired += 1;
                        wake += Duration::from_millis(20);
                    }
                    () = tokio::time::sleep_until(wake.into()), if !kernel_timer => {
                        fired += 1;
                        wake += Duration::from_millis(20);
                    }
                }
            }
            let blocked = (blocks() - first_blocks) as i64;
            pacer.join().unwrap();
            blocked - packet_wakes - i64::from(fired)
        })
    }

    #[test]
    fn a_deadline_kept_ahead_by_packets_wakes_nobody() {
        // The same loop on tokio's timer shows what the test catches.
        let tokio_extra = blocks_beyond_packets(false);
        let shared_extra = blocks_beyond_packets(true);
        eprintln!(
            "blocks beyond packet and deadline wakes over 1 s: tokio's timer {tokio_extra}, shared timerfd {shared_extra}"
        );
        // tokio wakes at each 64 ms boundary the deadline straddles: 15 in a second, fewer
        // only where a boundary and a datagram meet (a wake counts once).
        assert!(
            tokio_extra >= 5,
            "tokio's timer wheel woke {tokio_extra} times for nothing"
        );
        // At most zero: a datagram or deadline found without blocking counts below zero.
        assert!(
            shared_extra <= 0,
            "the shared kernel timer woke the thread {shared_extra} times for nothing"
        );
    }
}
