//! tollgate's own pipelined connection, for standalone Redis (over TCP or
//! TLS) and for the master Sentinel names (Cluster goes through redis-rs).
//!
//! A general client pays, per command, for a command object, an encoder, a
//! channel message, a oneshot, a generic `Value` tree and its conversion;
//! the store's checks need none of that. Here:
//!
//! * A caller encodes its command straight into one shared write buffer
//!   (under a short lock) and takes a completion slot from a slab: no
//!   allocation per request.
//! * One driver task owns the socket. Woken by new requests, it first lets
//!   every other ready task queue theirs (one yield), then writes all of
//!   them with one `write`: under load, batches form by themselves. While
//!   one command is out unanswered, what is queued meanwhile waits for its
//!   reply and goes as one batch (a server whose requests arrive one by
//!   one from many connections would otherwise send batches of one); a
//!   second goes out only when a whole batch waits ([`MAX_COMMANDS_OUT`]).
//! * Single checks are queued as parts (a key and its pair arguments), not
//!   commands: the driver writes each run of up to [`MAX_BATCH`]
//!   consecutive ones at the same time (the server's, or the same explicit
//!   one) as ONE script run in batch mode (see `check.lua`), which decides
//!   them independently, in order, and answers one array. Redis's per-command and per-script costs, and ours to encode
//!   and parse, are paid once per batch, not per check. A lone check goes as
//!   the ordinary single-check command. Any other command (a multi-rule
//!   check, `PING`) goes as it is, between batches, in its place in the
//!   order.
//! * The driver parses replies in order (an array of integers, or an
//!   error), stores each in its slot (a batch's reply split among its
//!   checks) and, once every reply read is stored, wakes the callers.
//! * Every request fails after the configured timeout, counted from when
//!   the driver takes it (one scheduling round after the call, so no clock
//!   read per request), whether it writes it then or holds it back (to go
//!   with the next batch, or on the next connection). One timer serves the whole connection: requests
//!   time out in the order they were taken.
//!   When the oldest request times out and nothing at all arrived for a
//!   whole timeout, the connection is taken for dead (a hung server, a
//!   silent network partition) and dropped.
//! * A request that was written to a connection that then breaks fails
//!   with [`StoreErrorKind::Unavailable`]; it is never sent again, since it
//!   may have run (a repeated check counts twice). Requests not yet written
//!   wait for the next connection.
//! * Reconnection is lazy: after a loss, the next request opens a new
//!   connection; after a failed attempt, requests fail at once until a
//!   backoff (10 ms doubling to 1 s) has passed.
//! * Sentinel: the master is looked up on every (re)connection and its
//!   `ROLE` checked. The connection also follows every Sentinel's
//!   announcements (one subscription each, kept alive by a `PING` a
//!   second): a forced failover leaves the old master up and taking writes
//!   until the Sentinels demote it, about 10 s later, and then drops them
//!   when it resyncs, so waiting for a `READONLY` reply would lose every
//!   check admitted there; and `+switch-master` comes only once the
//!   promotion is confirmed, about a second after it. So on the leader's
//!   `+selected-slave`, writes to the connection stop; once its last reply
//!   is in, it is replaced by a connection to the chosen replica only,
//!   tried until it answers `ROLE` as master (at most [`PROMOTION_WAIT`](driver::PROMOTION_WAIT);
//!   meanwhile requests fail as unavailable). On `+switch-master`, as on a
//!   `READONLY` reply, the same towards the announced master first.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::encode::RuleCache;
use super::resp::Reply;
use super::scripts::{Scripts, Via};
use crate::error::{StoreError, StoreErrorKind};
use crate::store::url::{Credentials, HostPort};
use crate::time::Micros;

mod batch;
mod dial;
mod driver;
mod handshake;
mod sentinel;
mod stream;

use driver::Driver;
use handshake::open;
pub(super) use stream::Tls;

/// The first wait after a failed connection attempt.
const MIN_BACKOFF: Duration = Duration::from_millis(10);
/// The longest wait between connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Initial size of the read buffer (it grows for larger replies).
const READ_BUFFER: usize = 16 * 1024;
/// The largest reply read (unparsed bytes held at once): the largest a
/// check gets, a batch of [`MAX_BATCH`], is a few KiB.
const MAX_REPLY: usize = 1 << 20;
/// Buffers grown past this by a burst are given back once empty.
const KEEP_BUFFER: usize = 1 << 20;
/// A slot index meaning "already answered" (by a timeout).
const DONE: u32 = u32::MAX;
/// Most checks one batched script run carries (its reply is `1 + 4 *` this
/// integers; Redis runs the batch, atomically, while other clients wait).
pub(super) const MAX_BATCH: usize = 64;
// A batch names each check's argument tuple by a one-byte index
// (`Scripts::write_checks`): a batch has at most 255 distinct tuples.
const _: () = assert!(MAX_BATCH <= 255);
/// Most commands (script runs, batches) written and not yet answered.
/// Requests queued while one is out wait for its reply, unless a whole
/// batch ([`MAX_BATCH`]) is waiting: under load they pile up into one
/// batch instead of trickling out as batches of one, which would cost
/// Redis a script run each (and both sides a wake-up and a system call a
/// batch: waiting for the reply before sending the next made batches twice
/// as large as keeping two out, for less CPU a check on both sides; see
/// bench/README.md, "Redis path CPU"). A second one goes out when a
/// batch is full, so Redis has the next while we read the last.
const MAX_COMMANDS_OUT: usize = 2;

/// Where the connection goes.
#[derive(Debug, Clone)]
pub(super) enum Target {
    /// One server.
    Direct(HostPort),
    /// The master the sentinels name.
    Sentinel {
        /// The sentinels, asked in order.
        sentinels: Vec<HostPort>,
        /// The monitored master's name.
        master: String,
    },
}

/// How to connect.
#[derive(Debug, Clone)]
pub(super) struct Config {
    /// Where.
    pub(super) target: Target,
    /// `AUTH` with these on connect (not sent to sentinels).
    pub(super) credentials: Credentials,
    /// `SELECT` this database on connect, unless 0.
    pub(super) db: u32,
    /// TLS to data nodes (`rediss://`); sentinels are spoken to in the
    /// clear.
    pub(super) tls: Option<Tls>,
    /// Longest wait for a reply, and for each step of a connection.
    pub(super) timeout: Duration,
}

/// The state callers and the driver share.
struct Shared {
    state: Mutex<State>,
    config: Config,
    /// How checks are written.
    checks: Checks,
    /// Whether runs go as `FCALL` (the server has functions and lets us
    /// use them; set again on every new connection: see [`Conn::via`]).
    functions: AtomicBool,
    /// Held while the function library is loaded, with the number of
    /// loads made: the callers a flushed library fails together load it
    /// once, not each (a load compiles the whole library on the server).
    loads: tokio::sync::Mutex<u64>,
}

/// What the driver needs to write checks (see [`Conn::check`]).
#[derive(Debug, Clone)]
pub(super) struct Checks {
    /// The scripts they run.
    pub(super) scripts: Scripts,
    /// Extra TTL (ms) of checks at an explicit time (see `prelude.lua`).
    pub(super) margin_ms: u64,
}

struct State {
    /// Encoded requests the driver has not taken yet…
    out: Vec<u8>,
    /// …and their slots, in order.
    queued: Vec<Queued>,
    /// Completion slots (a slab: freed indices are reused).
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Wakes the driver; taken by the first caller that needs it.
    driver: Option<Waker>,
    link: Link,
    /// Encoded rules, for the callers' encoders (used under this lock).
    cache: RuleCache,
}

#[derive(Clone, Copy)]
struct Queued {
    slot: u32,
    len: u32,
    part: Part,
}

/// What a caller queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Part {
    /// One complete command.
    Whole,
    /// One single check (see [`Conn::check`]): its
    /// Redis key as a RESP bulk string (`key_len` bytes), then its six pair
    /// arguments; the driver wraps it in a script run, alone or batched.
    Check {
        /// Bytes of the key's bulk string.
        key_len: u32,
        /// The algorithm's script code (`scripts::code`).
        code: u8,
        /// How its run names the script (see [`Via`]).
        via: Via,
        /// Its explicit time, or `None` for the server's.
        at: Option<Micros>,
    },
}

enum Link {
    /// Connected, or about to be: requests are queued.
    Up,
    /// A connection attempt is under way: requests are queued.
    Connecting,
    /// No connection. Requests fail until `retry_at`; the first one after
    /// it starts a new attempt.
    Down {
        retry_at: Instant,
        cause: StoreError,
    },
    /// The driver is gone (store dropped, or its runtime shut down).
    Closed(StoreError),
}

enum Slot {
    Free,
    /// Not answered yet; wakes the caller.
    Waiting(Option<Waker>),
    /// Its caller gave up (dropped the future); freed when answered.
    Abandoned,
    Done(Result<Reply, StoreError>),
}

impl State {
    fn alloc(&mut self, slot: Slot) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = slot;
            return Some(i);
        }
        let i = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i != DONE)?;
        self.slots.push(slot);
        Some(i)
    }

    /// Changes the link's state, unless closed: that is final (the driver
    /// exits on it).
    fn set_link(&mut self, link: Link) {
        if !matches!(self.link, Link::Closed(_)) {
            self.link = link;
        }
    }

    fn release(&mut self, i: u32) {
        self.slots[i as usize] = Slot::Free;
        self.free.push(i);
    }

    /// Answers slot `i`; its caller's waker goes to `wakers`.
    fn complete(&mut self, i: u32, result: Result<Reply, StoreError>, wakers: &mut Vec<Waker>) {
        match std::mem::replace(&mut self.slots[i as usize], Slot::Done(result)) {
            Slot::Waiting(waker) => wakers.extend(waker),
            Slot::Abandoned => self.release(i),
            // Never happens (a slot is answered once, while in use); if it
            // did, leave the slot as it was rather than free it twice.
            other @ (Slot::Free | Slot::Done(_)) => {
                debug_assert!(false, "a request slot answered twice");
                self.slots[i as usize] = other;
            }
        }
    }
}

/// A handle on the connection; dropping it stops the driver.
pub(super) struct Conn {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("target", &self.shared.config.target)
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// Opens the first connection (so a wrong address or password is an
    /// error here, not at the first check) and spawns the driver on the
    /// current tokio runtime. With `lazy`, no connection is made here: the
    /// first request starts one.
    pub(super) async fn connect(
        config: Config,
        checks: Checks,
        lazy: bool,
    ) -> Result<Self, StoreError> {
        let opened = if lazy {
            None
        } else {
            Some(open(&config, None, false).await?)
        };
        let link = match opened {
            Some(_) => Link::Up,
            None => Link::Down {
                retry_at: io_now(),
                cause: unavailable("not connected yet"),
            },
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                out: Vec::new(),
                queued: Vec::new(),
                slots: Vec::new(),
                free: Vec::new(),
                driver: None,
                link,
                cache: RuleCache::default(),
            }),
            config,
            checks,
            functions: AtomicBool::new(true),
            loads: tokio::sync::Mutex::new(0),
        });
        tokio::spawn(Driver::new(shared.clone(), opened));
        Ok(Self { shared })
    }

    /// Sends the command `encode` appends to the buffer it is given (one
    /// complete RESP command; it may use the connection's [`RuleCache`])
    /// and waits for its reply, at most the timeout.
    /// Never resent: an error after it may have run says so by its kind.
    pub(super) fn call<E: FnOnce(&mut Vec<u8>, &mut RuleCache) + Unpin>(
        &self,
        encode: E,
    ) -> Call<'_, impl FnOnce(&mut Vec<u8>, &mut RuleCache) -> Part + Unpin> {
        Call {
            shared: &self.shared,
            encode: Some(move |out: &mut Vec<u8>, cache: &mut RuleCache| {
                encode(out, cache);
                Part::Whole
            }),
            slot: None,
        }
    }

    /// Sends one single check at `at` (or with `None` the server's time),
    /// of the algorithm whose script code is `code`: `encode` appends its
    /// Redis key (a RESP bulk
    /// string) and returns its length, then appends the six pair arguments
    /// (see `check.lua`). The driver runs it by itself or in a batch with
    /// its neighbours; the reply is the single-check reply either way: the
    /// time and four integers, or an error (of this check, or of its whole
    /// batch, e.g. `NOSCRIPT`). Never resent, as [`Conn::call`].
    pub(super) fn check<E: FnOnce(&mut Vec<u8>, &mut RuleCache) -> usize + Unpin>(
        &self,
        code: u8,
        via: Via,
        at: Option<Micros>,
        encode: E,
    ) -> Call<'_, impl FnOnce(&mut Vec<u8>, &mut RuleCache) -> Part + Unpin> {
        Call {
            shared: &self.shared,
            encode: Some(move |out: &mut Vec<u8>, cache: &mut RuleCache| {
                let key_len = encode(out, cache);
                Part::Check {
                    key_len: u32::try_from(key_len).unwrap_or(u32::MAX),
                    code,
                    via,
                    at,
                }
            }),
            slot: None,
        }
    }

    /// The number of function library loads made so far, or `None` while
    /// one is under way (see [`Conn::loading`]).
    pub(super) fn loads(&self) -> Option<u64> {
        self.shared.loads.try_lock().ok().map(|n| *n)
    }

    /// Waits for the right to load the function library; the guard holds
    /// the count of loads made, to be raised by one that loads.
    pub(super) async fn loading(&self) -> tokio::sync::MutexGuard<'_, u64> {
        self.shared.loads.lock().await
    }

    /// The longest a request waits for its reply.
    pub(super) fn timeout(&self) -> Duration {
        self.shared.config.timeout
    }

    /// How a run names its script now: as the library's function while
    /// this connection's server takes functions, else by hash.
    pub(super) fn via(&self) -> Via {
        if self.shared.functions.load(Ordering::Relaxed) {
            Via::Function
        } else {
            Via::Sha
        }
    }

    /// Runs go by hash on this connection from now on (until it
    /// reconnects): its server has no functions, or refuses them.
    pub(super) fn without_functions(&self) {
        self.shared.functions.store(false, Ordering::Relaxed);
    }

    /// Whether the master is found through Sentinel (a `READONLY` reply is
    /// then worth one retry: the store looks the master up again).
    pub(super) fn follows_sentinel(&self) -> bool {
        matches!(self.shared.config.target, Target::Sentinel { .. })
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let driver = {
            let mut st = self.shared.state.lock();
            st.link = Link::Closed(unavailable("the store was dropped"));
            st.driver.take()
        };
        if let Some(w) = driver {
            w.wake();
        }
    }
}

/// One request: queued on first poll, answered by the driver.
pub(super) struct Call<'a, E> {
    shared: &'a Shared,
    encode: Option<E>,
    slot: Option<u32>,
}

impl<E: FnOnce(&mut Vec<u8>, &mut RuleCache) -> Part + Unpin> Future for Call<'_, E> {
    type Output = Result<Reply, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let shared = this.shared;
        let mut st = shared.state.lock();
        let Some(i) = this.slot else {
            return match this.encode.take() {
                Some(encode) => this.queue(st, encode, cx),
                None => Poll::Ready(Err(protocol("a finished request was polled"))),
            };
        };
        match &mut st.slots[i as usize] {
            Slot::Waiting(waker) => {
                if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            Slot::Done(_) => {
                let slot = std::mem::replace(&mut st.slots[i as usize], Slot::Free);
                st.free.push(i);
                this.slot = None;
                match slot {
                    Slot::Done(result) => Poll::Ready(result),
                    _ => Poll::Ready(Err(protocol("lost track of a request"))),
                }
            }
            Slot::Free | Slot::Abandoned => {
                this.slot = None;
                Poll::Ready(Err(protocol("lost track of a request")))
            }
        }
    }
}

impl<E: FnOnce(&mut Vec<u8>, &mut RuleCache) -> Part> Call<'_, E> {
    fn queue(
        &mut self,
        mut st: parking_lot::MutexGuard<'_, State>,
        encode: E,
        cx: &Context<'_>,
    ) -> Poll<Result<Reply, StoreError>> {
        match &st.link {
            Link::Up | Link::Connecting => {}
            Link::Down { retry_at, cause } => {
                if io_now() < *retry_at {
                    return Poll::Ready(Err(unavailable(format!(
                        "not connected, next attempt in {:?} (last failure: {cause})",
                        retry_at.saturating_duration_since(io_now())
                    ))));
                }
                st.link = Link::Connecting;
            }
            Link::Closed(e) => return Poll::Ready(Err(e.clone())),
        }
        let start = st.out.len();
        let state = &mut *st;
        let part = encode(&mut state.out, &mut state.cache);
        let len = u32::try_from(st.out.len() - start)
            .ok()
            .filter(|&len| match part {
                Part::Whole => true,
                Part::Check { key_len, .. } => key_len < len,
            });
        let Some(len) = len else {
            st.out.truncate(start);
            return Poll::Ready(Err(protocol("a command of 4 GiB or more")));
        };
        let Some(slot) = st.alloc(Slot::Waiting(Some(cx.waker().clone()))) else {
            st.out.truncate(start);
            return Poll::Ready(Err(protocol("too many requests in flight")));
        };
        st.queued.push(Queued { slot, len, part });
        self.slot = Some(slot);
        let driver = st.driver.take();
        drop(st);
        if let Some(w) = driver {
            w.wake();
        }
        Poll::Pending
    }
}

impl<E> Drop for Call<'_, E> {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            let mut st = self.shared.state.lock();
            if matches!(st.slots[i as usize], Slot::Waiting(_)) {
                st.slots[i as usize] = Slot::Abandoned;
            } else {
                st.release(i);
            }
        }
    }
}

fn protocol(message: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::Protocol, message)
}

fn unavailable(message: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, message)
}

fn io_error(doing: &str, e: &io::Error) -> StoreError {
    let kind = if e.kind() == io::ErrorKind::TimedOut {
        StoreErrorKind::Timeout
    } else {
        StoreErrorKind::Unavailable
    };
    StoreError::new(kind, format!("{doing}: {e}"))
}

/// The kind of an error reply, as the store classifies redis-rs errors:
/// a server that cannot take writes now (a replica, loading its dataset,
/// cut from its master or cluster) is unavailable; anything else is a
/// protocol error.
pub(super) fn server_error(message: &str) -> StoreError {
    let code = message.split_ascii_whitespace().next().unwrap_or_default();
    let kind = match code {
        "READONLY" | "LOADING" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN" => {
            StoreErrorKind::Unavailable
        }
        _ => StoreErrorKind::Protocol,
    };
    StoreError::new(kind, message)
}

/// The real time, for the connection's I/O timers only (reconnect backoff,
/// read deadlines, how long a node stays a hint): they measure the network,
/// which a fake clock does not drive. Decisions never see it: a Redis store
/// takes its time from the server.
#[allow(
    clippy::disallowed_methods,
    reason = "I/O timers run on real time, not on the limiter's clock"
)]
pub(super) fn io_now() -> Instant {
    Instant::now()
}
