//! tollgate's own pipelined connection, for standalone Redis and for the
//! master Sentinel names, over plain TCP (Cluster and TLS go through
//! redis-rs).
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
//!   them with one `write`: under load, batches form by themselves. At
//!   most two commands are out unanswered; what is queued meanwhile waits
//!   for the next reply and goes as one batch (a server whose requests
//!   arrive one by one from many connections would otherwise send batches
//!   of one).
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
//!   read per request). One timer serves the whole connection: requests
//!   time out in the order they were taken.
//!   When the oldest request times out and nothing at all arrived since it
//!   was sent, the connection is taken for dead (a hung server, a silent
//!   network partition) and dropped.
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
//!   tried until it answers `ROLE` as master (at most [`PROMOTION_WAIT`];
//!   meanwhile requests fail as unavailable). On `+switch-master`, as on a
//!   `READONLY` reply, the same towards the announced master first.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use super::RuleCache;
use super::resp::{self, Ints, Reply, Value};
use super::scripts::Scripts;
use crate::error::{StoreError, StoreErrorKind};
use crate::store::url::{Credentials, HostPort};
use crate::time::Micros;

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
/// Requests queued while this many are out wait for the next reply: under
/// load they pile up into one batch instead of trickling out as batches
/// of one, which would cost Redis a script run each. Two, so Redis always
/// has the next batch while we read the last.
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
    /// Longest wait for a reply, and for each step of a connection.
    pub(super) timeout: Duration,
}

/// The state callers and the driver share.
struct Shared {
    state: Mutex<State>,
    config: Config,
    /// How checks are written.
    checks: Checks,
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
        /// Run by hash (else by source: the server lost its scripts).
        by_sha: bool,
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
        by_sha: bool,
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
                    by_sha,
                    at,
                }
            }),
            slot: None,
        }
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

/// A request the driver has taken.
#[derive(Clone, Copy)]
struct Sent {
    /// Its slot, or [`DONE`] once answered by a timeout.
    slot: u32,
    /// Where its bytes start (in the buffer they were taken from) and
    /// their length.
    start: u32,
    len: u32,
    part: Part,
    /// When the driver took it; it times out `timeout` later.
    at: Instant,
    /// In flight: how many requests the next reply answers, this one and
    /// the ones after it (a batch), or 0 for a batch's later checks.
    replies_to: u32,
}

impl Sent {
    fn bytes<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        let start = self.start as usize;
        &buf[start..start + self.len as usize]
    }
}

/// A new connection and the node it is to.
type Opened = (TcpStream, HostPort);

/// What a Sentinel told (see [`watch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Announce {
    /// `+switch-master`: the master is this node.
    Master(HostPort),
    /// `+selected-slave`: the failover leader chose this replica and is
    /// about to promote it. The old master takes writes until the
    /// Sentinels demote it, about 10 s on, and drops them then; and the
    /// switch is announced only once the promotion is confirmed, about a
    /// second after it: checks written to the old master meanwhile would
    /// be lost.
    Promoting(HostPort),
}

/// How long a connection waits for a replica chosen for promotion to
/// become master before it goes back to asking the Sentinels (a failover
/// can be aborted).
const PROMOTION_WAIT: Duration = Duration::from_secs(5);

enum Phase {
    /// No connection.
    Idle,
    Connecting(Pin<Box<dyn Future<Output = Result<Opened, StoreError>> + Send>>),
    Up(TcpStream),
}

/// The task that owns the socket.
struct Driver {
    shared: Arc<Shared>,
    timeout: Duration,
    phase: Phase,
    /// Stop writing: the master was demoted or moved (Sentinel). Once every
    /// written request is answered, the connection is replaced; the reason.
    draining: Option<&'static str>,
    /// The node the connection is to (Sentinel: the master it found).
    node: Option<HostPort>,
    /// Sentinel: the master last announced, tried first on reconnection.
    hint: Option<HostPort>,
    /// Sentinel (and only then `Some`): follows the Sentinels' announcements
    /// (see [`watch`]), polled with the driver; what it learns arrives in
    /// `announced`.
    watch: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    announced: Arc<Mutex<Option<Announce>>>,
    /// Sentinel: until then, connect only to `hint` (a replica being
    /// promoted), never to the node the Sentinels still name.
    only_hint_until: Option<Instant>,
    /// Requests written (or being written) to the connection, oldest first:
    /// the order replies come in.
    inflight: VecDeque<Sent>,
    /// Requests waiting for a connection, and their bytes.
    unsent: VecDeque<Sent>,
    unsent_bytes: Vec<u8>,
    /// Requests being written (kept to reuse its allocation).
    taking: Vec<Sent>,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Fires at the deadline of the oldest unanswered request.
    timer: Pin<Box<Sleep>>,
    timer_armed: bool,
    /// Whether the driver already yielded once for the queued requests.
    yielded: bool,
    /// Commands written to the connection and not answered yet.
    commands_out: usize,
    backoff: Duration,
    /// When the connection last delivered a reply (or opened).
    last_reply: Instant,
    /// Callers to wake once the lock is released.
    wakers: Vec<Waker>,
    /// A batch's reply, parsed (kept to reuse its allocation).
    ints: Vec<i64>,
}

impl Driver {
    fn new(shared: Arc<Shared>, opened: Option<Opened>) -> Self {
        let timeout = shared.config.timeout;
        let announced = Arc::new(Mutex::new(None));
        let watch = match &shared.config.target {
            Target::Sentinel { sentinels, master } if !sentinels.is_empty() => {
                let w = watch(
                    sentinels.clone(),
                    master.clone(),
                    timeout,
                    Arc::clone(&announced),
                );
                Some(Box::pin(w) as Pin<Box<dyn Future<Output = ()> + Send>>)
            }
            _ => None,
        };
        let (phase, node) = match opened {
            Some((stream, node)) => (Phase::Up(stream), Some(node)),
            None => (Phase::Idle, None),
        };
        Self {
            shared,
            timeout,
            phase,
            draining: None,
            node,
            hint: None,
            watch,
            announced,
            only_hint_until: None,
            inflight: VecDeque::new(),
            unsent: VecDeque::new(),
            unsent_bytes: Vec::new(),
            taking: Vec::new(),
            wbuf: Vec::new(),
            wpos: 0,
            rbuf: vec![0; READ_BUFFER],
            rstart: 0,
            rend: 0,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            timer_armed: false,
            yielded: false,
            commands_out: 0,
            backoff: MIN_BACKOFF,
            last_reply: io_now(),
            wakers: Vec::new(),
            ints: Vec::new(),
        }
    }

    fn wake_callers(&mut self) {
        for w in self.wakers.drain(..) {
            w.wake();
        }
    }

    /// Reads and dispatches every reply available.
    fn read(&mut self, cx: &mut Context<'_>, now: Instant) -> Result<(), StoreError> {
        let Phase::Up(stream) = &mut self.phase else {
            return Ok(());
        };
        loop {
            if self.rend == self.rbuf.len() {
                if self.rstart > 0 {
                    self.rbuf.copy_within(self.rstart..self.rend, 0);
                    self.rend -= self.rstart;
                    self.rstart = 0;
                } else if self.rbuf.len() >= MAX_REPLY {
                    // No reply to a check comes near this; a peer that
                    // streams one without end must not take our memory.
                    return Err(protocol(format!(
                        "a reply over {MAX_REPLY} bytes: connection dropped"
                    )));
                } else {
                    let len = self.rbuf.len() * 2;
                    self.rbuf.resize(len, 0);
                }
            }
            let mut buf = ReadBuf::new(&mut self.rbuf[self.rend..]);
            let n = match Pin::new(&mut *stream).poll_read(cx, &mut buf) {
                Poll::Pending => return Ok(()),
                Poll::Ready(Err(e)) => return Err(io_error("reading from the server", &e)),
                Poll::Ready(Ok(())) => buf.filled().len(),
            };
            if n == 0 {
                return Err(unavailable("the server closed the connection"));
            }
            self.rend += n;
            let mut st = self.shared.state.lock();
            loop {
                let buf = &self.rbuf[self.rstart..self.rend];
                let batch = self.inflight.front().map_or(0, |s| s.replies_to as usize);
                if batch > 1 && self.inflight.len() >= batch {
                    // The usual reply to a batch, all integers: straight to
                    // its checks (five integers each), no reply tree.
                    if let Some(used) = resp::int_array_of(buf, 1 + 4 * batch, &mut self.ints) {
                        self.rstart += used;
                        self.last_reply = now;
                        self.commands_out = self.commands_out.saturating_sub(1);
                        let t = self.ints[0];
                        for (sent, four) in self
                            .inflight
                            .drain(..batch)
                            .zip(self.ints[1..].chunks_exact(4))
                        {
                            if sent.slot != DONE {
                                let five = [t, four[0], four[1], four[2], four[3]];
                                st.complete(
                                    sent.slot,
                                    Ok(Reply::Ints(Ints::Inline(5, five))),
                                    &mut self.wakers,
                                );
                            }
                        }
                        continue;
                    }
                }
                let (reply, used) = match resp::parse(buf) {
                    Ok(Some(parsed)) => parsed,
                    Ok(None) => break,
                    Err(bad) => return Err(protocol(format!("unreadable reply: {}", bad.0))),
                };
                self.rstart += used;
                self.last_reply = now;
                self.commands_out = self.commands_out.saturating_sub(1);
                let Some(sent) = self.inflight.pop_front() else {
                    return Err(protocol("a reply to no request"));
                };
                let n = sent.replies_to as usize;
                let mut answer = |slot: u32, reply: Result<Reply, StoreError>| {
                    if self.watch.is_some()
                        && matches!(&reply, Ok(Reply::Error(e)) if e.starts_with("READONLY"))
                    {
                        self.draining = Some("the master was demoted to a replica");
                    }
                    if slot != DONE {
                        st.complete(slot, reply, &mut self.wakers);
                    }
                };
                if n <= 1 {
                    answer(sent.slot, Ok(reply));
                    continue;
                }
                // A batch: split its reply among its checks.
                if self.inflight.len() < n - 1 {
                    return Err(protocol("a batch's reply to fewer checks"));
                }
                answer(sent.slot, member_reply(&reply, 0, n));
                for j in 1..n {
                    let slot = self.inflight.pop_front().map_or(DONE, |s| s.slot);
                    answer(slot, member_reply(&reply, j, n));
                }
            }
            drop(st);
            if self.rstart == self.rend {
                self.rstart = 0;
                self.rend = 0;
                if self.rbuf.len() > KEEP_BUFFER {
                    // After a reply larger than the usual buffer.
                    self.rbuf = vec![0; READ_BUFFER];
                }
            }
            // Loop until `Pending` even after a short read: that one costs
            // no system call (the short read cleared the socket's
            // readiness), and only a `Pending` registers this task to be
            // woken by the next bytes. Returning after a short read lost
            // that wakeup (a reply then waited for the next timer).
        }
    }

    /// Writes what is buffered, as far as the socket takes it.
    fn write(&mut self, cx: &mut Context<'_>) -> Result<(), StoreError> {
        let Phase::Up(stream) = &mut self.phase else {
            return Ok(());
        };
        while self.wpos < self.wbuf.len() {
            match Pin::new(&mut *stream).poll_write(cx, &self.wbuf[self.wpos..]) {
                Poll::Pending => return Ok(()),
                Poll::Ready(Ok(0)) => {
                    return Err(unavailable("the connection accepts no more bytes"));
                }
                Poll::Ready(Ok(n)) => self.wpos += n,
                Poll::Ready(Err(e)) => return Err(io_error("writing to the server", &e)),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        if self.wbuf.capacity() > KEEP_BUFFER {
            // After a burst (e.g. every caller falling back to EVAL).
            self.wbuf = Vec::new();
        }
        Ok(())
    }

    /// Takes the requests callers queued: straight to the write buffer when
    /// connected, else to wait for a connection.
    fn take(&mut self, st: &mut State, now: Instant) {
        let mut start = 0;
        let mut sent = |q: &Queued| {
            let s = Sent {
                slot: q.slot,
                start,
                len: q.len,
                part: q.part,
                at: now,
                replies_to: 1,
            };
            start += q.len;
            s
        };
        if matches!(self.phase, Phase::Up(_)) && self.draining.is_none() {
            let mut taking = std::mem::take(&mut self.taking);
            taking.extend(st.queued.iter().map(sent));
            self.emit(&st.out, &taking);
            taking.clear();
            self.taking = taking;
        } else {
            let base = u32::try_from(self.unsent_bytes.len()).unwrap_or(u32::MAX);
            self.unsent_bytes.extend_from_slice(&st.out);
            self.unsent.extend(st.queued.iter().map(|q| {
                let s = sent(q);
                Sent {
                    start: s.start.saturating_add(base),
                    ..s
                }
            }));
        }
        st.out.clear();
        st.queued.clear();
    }

    /// Appends `requests` (their bytes in `bytes`) to the write buffer and
    /// the in-flight list, each run of consecutive checks as batches of at
    /// most [`MAX_BATCH`].
    fn emit(&mut self, bytes: &[u8], requests: &[Sent]) {
        let mut rest = requests;
        while let Some(first) = rest.first() {
            self.commands_out += 1;
            if first.part == Part::Whole {
                self.wbuf.extend_from_slice(first.bytes(bytes));
                self.inflight.push_back(Sent {
                    replies_to: 1,
                    ..*first
                });
                rest = &rest[1..];
                continue;
            }
            let at = |s: &Sent| match s.part {
                Part::Check { at, .. } => Some(at),
                Part::Whole => None,
            };
            let n = rest
                .iter()
                .take(MAX_BATCH)
                .take_while(|s| at(s) == at(first))
                .count();
            let (batch, after) = rest.split_at(n);
            let split = |s: &Sent| {
                let b = s.bytes(bytes);
                let key_len = match s.part {
                    Part::Check { key_len, .. } => (key_len as usize).min(b.len()),
                    Part::Whole => 0,
                };
                b.split_at(key_len)
            };
            let code = |s: &Sent| match s.part {
                Part::Check { code, .. } => code,
                Part::Whole => 0,
            };
            let same = batch.iter().all(|s| code(s) == code(first));
            let by_sha = batch
                .iter()
                .all(|s| matches!(s.part, Part::Check { by_sha: true, .. }));
            let checks = &self.shared.checks;
            checks.scripts.write_checks(
                &mut self.wbuf,
                same.then(|| code(first)),
                by_sha,
                at(first).flatten().map(|t| (t, checks.margin_ms)),
                batch.iter().map(|s| split(s).0),
                batch.iter().map(|s| split(s).1),
            );
            // n <= MAX_BATCH
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            for (j, s) in batch.iter().enumerate() {
                self.inflight.push_back(Sent {
                    replies_to: if j == 0 { n } else { 0 },
                    ..*s
                });
            }
            rest = after;
        }
    }

    fn start_connecting(&mut self) {
        self.shared.state.lock().set_link(Link::Connecting);
        let shared = self.shared.clone();
        let hint = self.hint.clone();
        let only_hint = self.only_hint_until.is_some_and(|until| io_now() < until);
        self.phase = Phase::Connecting(Box::pin(async move {
            open(&shared.config, hint.as_ref(), only_hint).await
        }));
    }

    /// A Sentinel announced `node` as the master, or as the replica it is
    /// promoting: if the connection is to another node, it is replaced once
    /// its replies are in (an attempt under way starts again, towards
    /// `node` first; towards `node` only while it is being promoted).
    fn master_announced(&mut self, announce: Announce, now: Instant) {
        let (node, what) = match announce {
            Announce::Master(node) => {
                self.only_hint_until = None;
                (node, "announced the master")
            }
            Announce::Promoting(node) => {
                self.only_hint_until = Some(now + PROMOTION_WAIT);
                (node, "chose a replica to promote")
            }
        };
        if self.node.as_ref() == Some(&node) && !matches!(self.phase, Phase::Connecting(_)) {
            return;
        }
        tracing::info!(
            "Sentinel {what}: {node}; the store's connection moves there{}",
            self.node
                .as_ref()
                .map(|old| format!(" from {old}"))
                .unwrap_or_default()
        );
        self.hint = Some(node);
        match self.phase {
            Phase::Up(_) => {
                if self.draining.is_none() {
                    self.draining = Some("the Sentinels announced another master");
                }
            }
            Phase::Connecting(_) => self.start_connecting(),
            Phase::Idle => {}
        }
    }

    /// A new connection is up: the requests that waited for it go first,
    /// except those already answered (timed out) or given up.
    fn up(&mut self, (stream, node): Opened, now: Instant) {
        self.phase = Phase::Up(stream);
        if self.hint.as_ref() == Some(&node) {
            // The promoted replica answers as master.
            self.only_hint_until = None;
        }
        self.node = Some(node);
        self.commands_out = 0;
        self.backoff = MIN_BACKOFF;
        self.last_reply = now;
        self.rstart = 0;
        self.rend = 0;
        self.wbuf.clear();
        self.wpos = 0;
        let mut st = self.shared.state.lock();
        st.set_link(Link::Up);
        let mut taking = std::mem::take(&mut self.taking);
        for s in self.unsent.drain(..) {
            if s.slot == DONE {
                continue;
            }
            if matches!(st.slots[s.slot as usize], Slot::Abandoned) {
                st.release(s.slot);
                continue;
            }
            taking.push(s);
        }
        drop(st);
        let bytes = std::mem::take(&mut self.unsent_bytes);
        self.emit(&bytes, &taking);
        self.unsent_bytes = bytes;
        self.unsent_bytes.clear();
        taking.clear();
        self.taking = taking;
    }

    /// A connection attempt failed: so do the requests waiting for it, and
    /// the next attempt waits for the backoff.
    fn connect_failed(&mut self, cause: StoreError, now: Instant) {
        self.phase = Phase::Idle;
        let mut st = self.shared.state.lock();
        for s in self.unsent.drain(..) {
            if s.slot != DONE {
                st.complete(s.slot, Err(cause.clone()), &mut self.wakers);
            }
        }
        self.unsent_bytes.clear();
        for q in std::mem::take(&mut st.queued) {
            st.complete(q.slot, Err(cause.clone()), &mut self.wakers);
        }
        st.out.clear();
        st.set_link(Link::Down {
            retry_at: now + self.backoff,
            cause,
        });
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// The connection is gone: what was written to it fails (it may have
    /// run, so it is never resent); what was not waits for the next one.
    fn lose(&mut self, cause: StoreError, now: Instant) {
        self.phase = Phase::Idle;
        self.node = None;
        self.commands_out = 0;
        self.draining = None;
        self.rstart = 0;
        self.rend = 0;
        self.wbuf.clear();
        self.wpos = 0;
        let mut st = self.shared.state.lock();
        for s in self.inflight.drain(..) {
            if s.slot != DONE {
                st.complete(s.slot, Err(cause.clone()), &mut self.wakers);
            }
        }
        st.set_link(Link::Down {
            retry_at: now,
            cause,
        });
    }

    /// Fails the requests past their deadline.
    fn expire(&mut self, now: Instant) {
        let timeout = self.timeout;
        let late = |s: &Sent| s.at.checked_add(timeout).is_some_and(|d| d <= now);
        let mut stalled = false;
        let mut st = self.shared.state.lock();
        for s in self.inflight.iter_mut().chain(self.unsent.iter_mut()) {
            if !late(s) {
                break;
            }
            if s.slot != DONE {
                let e = StoreError::new(
                    StoreErrorKind::Timeout,
                    format!("no reply within {timeout:?}"),
                );
                st.complete(s.slot, Err(e), &mut self.wakers);
                s.slot = DONE;
            }
        }
        if let Some(oldest) = self.inflight.front() {
            stalled = late(oldest) && self.last_reply < oldest.at;
        }
        drop(st);
        if stalled {
            self.lose(
                unavailable(format!(
                    "no reply within {timeout:?}: connection dropped as dead"
                )),
                now,
            );
        }
    }

    /// Sets the timer to the oldest unanswered request's deadline.
    fn arm_timer(&mut self, cx: &mut Context<'_>) {
        if self.timer_armed {
            return;
        }
        let oldest = self
            .inflight
            .iter()
            .chain(self.unsent.iter())
            .find(|s| s.slot != DONE);
        let Some(deadline) = oldest.and_then(|s| s.at.checked_add(self.timeout)) else {
            return;
        };
        self.timer
            .as_mut()
            .reset(tokio::time::Instant::from_std(deadline));
        self.timer_armed = true;
        if self.timer.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let now = io_now();
        if let Some(w) = &mut this.watch {
            // Never ends (it reconnects by itself); woken with the driver.
            let _ = w.as_mut().poll(cx);
            let announced = this.announced.lock().take();
            if let Some(announce) = announced {
                this.master_announced(announce, now);
            }
        }
        // Connection first, then replies: a new connection's socket must be
        // read (to `Pending`) in this very poll, or its replies would wake
        // nobody.
        if let Phase::Connecting(attempt) = &mut this.phase {
            match attempt.as_mut().poll(cx) {
                Poll::Ready(Ok(stream)) => this.up(stream, now),
                Poll::Ready(Err(e)) => this.connect_failed(e, now),
                Poll::Pending => {}
            }
        }
        if let Err(e) = this.read(cx, now) {
            this.lose(e, now);
        }
        if this.timer_armed && this.timer.as_mut().poll(cx).is_ready() {
            this.timer_armed = false;
            this.expire(now);
        }
        {
            let shared = Arc::clone(&this.shared);
            let mut st = shared.state.lock();
            if matches!(st.link, Link::Closed(_)) {
                drop(st);
                this.wake_callers();
                return Poll::Ready(());
            }
            let corked =
                matches!(this.phase, Phase::Up(_)) && this.commands_out >= MAX_COMMANDS_OUT;
            if !st.queued.is_empty() && !corked {
                if !this.yielded {
                    // Let the other ready tasks queue their requests too:
                    // one write will carry them all.
                    this.yielded = true;
                    drop(st);
                    this.wake_callers();
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                this.yielded = false;
                this.take(&mut st, now);
            }
            if !st.driver.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                st.driver = Some(cx.waker().clone());
            }
        }
        if matches!(this.phase, Phase::Idle) && !this.unsent.is_empty() {
            this.start_connecting();
            cx.waker().wake_by_ref();
        }
        if let Err(e) = this.write(cx) {
            this.lose(e, now);
            cx.waker().wake_by_ref();
        }
        if let Some(why) = this.draining
            && matches!(this.phase, Phase::Up(_))
            && this.inflight.is_empty()
            && this.wbuf.is_empty()
        {
            // Every reply from the old master is in: look the master up
            // again for whatever waits.
            this.lose(unavailable(why), now);
            cx.waker().wake_by_ref();
        }
        this.arm_timer(cx);
        this.wake_callers();
        Poll::Pending
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let cause = unavailable("the connection task stopped (its runtime shut down?)");
        let mut st = self.shared.state.lock();
        for s in self.inflight.drain(..).chain(self.unsent.drain(..)) {
            if s.slot != DONE {
                st.complete(s.slot, Err(cause.clone()), &mut self.wakers);
            }
        }
        for q in std::mem::take(&mut st.queued) {
            st.complete(q.slot, Err(cause.clone()), &mut self.wakers);
        }
        st.out.clear();
        if !matches!(st.link, Link::Closed(_)) {
            st.link = Link::Closed(cause);
        }
        drop(st);
        self.wake_callers();
    }
}

/// Check `j`'s reply out of the reply to a batch of `n`: the time and its
/// four integers, or its error (its own, or the whole batch's).
fn member_reply(reply: &Reply, j: usize, n: usize) -> Result<Reply, StoreError> {
    let at = 1 + 4 * j;
    let bad = || protocol(format!("a batch of {n} checks answered {reply:?}"));
    match reply {
        Reply::Error(e) => Ok(Reply::Error(e.clone())),
        Reply::Ints(ints) => {
            let ints = ints.as_slice();
            if ints.len() != 1 + 4 * n {
                return Err(bad());
            }
            Ok(Reply::Ints(Ints::Inline(
                5,
                [ints[0], ints[at], ints[at + 1], ints[at + 2], ints[at + 3]],
            )))
        }
        // Some check failed: its error text stands in its first integer.
        Reply::Other(Value::Array(items)) if items.len() == 1 + 4 * n => {
            if let Value::Text(e) = &items[at] {
                return Ok(Reply::Error(String::from_utf8_lossy(e).into_owned()));
            }
            let mut five = [0; 5];
            for (v, item) in five
                .iter_mut()
                .zip(std::iter::once(&items[0]).chain(&items[at..at + 4]))
            {
                match item {
                    Value::Int(i) => *v = *i,
                    _ => return Err(bad()),
                }
            }
            Ok(Reply::Ints(Ints::Inline(5, five)))
        }
        Reply::Other(_) => Err(bad()),
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

/// Opens a connection as `config` says: to the server, or to the master the
/// first answering sentinel names (a replica refuses).
async fn open(
    config: &Config,
    hint: Option<&HostPort>,
    only_hint: bool,
) -> Result<Opened, StoreError> {
    match &config.target {
        Target::Direct(node) => Ok((handshake(node, config, false).await?, node.clone())),
        Target::Sentinel { sentinels, master } => {
            let mut failures = Vec::new();
            let mut kind = StoreErrorKind::Unavailable;
            if let Some(node) = hint {
                // The master the Sentinels announced last: ahead of a
                // Sentinel that has not heard of it yet.
                match handshake(node, config, true).await {
                    Ok(stream) => return Ok((stream, node.clone())),
                    Err(e) if only_hint => {
                        return Err(StoreError::new(
                            e.kind(),
                            format!("waiting for the promotion of {node} ({e})"),
                        ));
                    }
                    Err(e) => failures.push(format!("announced master {node}: {e}")),
                }
            }
            for sentinel in sentinels {
                let failure = match master_of(sentinel, master, config.timeout).await {
                    Ok(node) => match handshake(&node, config, true).await {
                        Ok(stream) => return Ok((stream, node)),
                        Err(e) => (e, format!("master {node} (from sentinel {sentinel})")),
                    },
                    Err(e) => (e, format!("sentinel {sentinel}")),
                };
                kind = failure.0.kind();
                failures.push(format!("{}: {}", failure.1, failure.0));
            }
            Err(StoreError::new(
                kind,
                format!("no master {master:?} reachable: {}", failures.join("; ")),
            ))
        }
    }
}

/// A TCP connection to `node`, `TCP_NODELAY` set.
async fn tcp(node: &HostPort, timeout: Duration) -> Result<TcpStream, StoreError> {
    let connect = TcpStream::connect((node.host.as_str(), node.port));
    let stream = tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| {
            StoreError::new(
                StoreErrorKind::Timeout,
                format!("connecting to {node}: no answer within {timeout:?}"),
            )
        })?
        .map_err(|e| io_error(&format!("connecting to {node}"), &e))?;
    stream
        .set_nodelay(true)
        .map_err(|e| io_error(&format!("connecting to {node}"), &e))?;
    Ok(stream)
}

/// Writes `request` (`n` commands) and reads their `n` replies.
async fn exchange(
    stream: &mut TcpStream,
    node: &HostPort,
    request: &[u8],
    n: usize,
    timeout: Duration,
) -> Result<Vec<Reply>, StoreError> {
    let run = async {
        stream.write_all(request).await?;
        let mut buf = Vec::with_capacity(512);
        let mut replies = Vec::with_capacity(n);
        let mut at = 0;
        while replies.len() < n {
            match resp::parse(&buf[at..]) {
                Ok(Some((reply, used))) => {
                    replies.push(reply);
                    at += used;
                }
                Ok(None) => {
                    if stream.read_buf(&mut buf).await? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the server closed the connection",
                        ));
                    }
                }
                Err(bad) => return Err(io::Error::new(io::ErrorKind::InvalidData, bad.0)),
            }
        }
        Ok(replies)
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(replies)) => Ok(replies),
        Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
            Err(protocol(format!("{node} answered garbage: {e}")))
        }
        Ok(Err(e)) => Err(io_error(&node.to_string(), &e)),
        Err(_) => Err(StoreError::new(
            StoreErrorKind::Timeout,
            format!("{node}: no answer within {timeout:?}"),
        )),
    }
}

/// Connects to a data node: `AUTH`, `SELECT`, with `check_role` a `ROLE`
/// that must say master, and a `PING`, in one round trip.
async fn handshake(
    node: &HostPort,
    config: &Config,
    check_role: bool,
) -> Result<TcpStream, StoreError> {
    let mut stream = tcp(node, config.timeout).await?;
    let mut request = Vec::new();
    let mut steps = Vec::new();
    if let Some(password) = &config.credentials.password {
        match &config.credentials.username {
            Some(user) => resp::command(
                &mut request,
                &[b"AUTH", user.as_bytes(), password.as_bytes()],
            ),
            None => resp::command(&mut request, &[b"AUTH", password.as_bytes()]),
        }
        steps.push("AUTH");
    }
    if config.db != 0 {
        let db = config.db.to_string();
        resp::command(&mut request, &[b"SELECT", db.as_bytes()]);
        steps.push("SELECT");
    }
    if check_role {
        resp::command(&mut request, &[b"ROLE"]);
        steps.push("ROLE");
    }
    resp::command(&mut request, &[b"PING"]);
    steps.push("PING");
    let replies = exchange(&mut stream, node, &request, steps.len(), config.timeout).await?;
    for (step, reply) in steps.iter().zip(&replies) {
        match reply {
            Reply::Error(e) => {
                let e = server_error(e);
                return Err(StoreError::new(e.kind(), format!("{node}: {step}: {e}")));
            }
            Reply::Other(Value::Array(role)) if *step == "ROLE" => {
                let role = role.first().and_then(Value::text).unwrap_or("unknown");
                if role != "master" {
                    return Err(unavailable(format!(
                        "{node} is a {role}, not the master (failover in progress?)"
                    )));
                }
            }
            _ if *step == "ROLE" => {
                return Err(protocol(format!("{node}: ROLE answered {reply:?}")));
            }
            _ => {}
        }
    }
    Ok(stream)
}

/// Asks one sentinel where `master` is.
async fn master_of(
    sentinel: &HostPort,
    master: &str,
    timeout: Duration,
) -> Result<HostPort, StoreError> {
    let mut stream = tcp(sentinel, timeout).await?;
    let mut request = Vec::new();
    resp::command(
        &mut request,
        &[b"SENTINEL", b"get-master-addr-by-name", master.as_bytes()],
    );
    let mut replies = exchange(&mut stream, sentinel, &request, 1, timeout).await?;
    match replies.pop() {
        Some(Reply::Other(Value::Array(addr))) if addr.len() == 2 => {
            let host = addr[0].text();
            let port = addr[1].text().and_then(|p| p.parse::<u16>().ok());
            match (host, port) {
                (Some(host), Some(port)) => Ok(HostPort {
                    host: host.to_owned(),
                    port,
                }),
                _ => Err(protocol(format!("unreadable master address {addr:?}"))),
            }
        }
        Some(Reply::Other(Value::Nil)) => Err(unavailable(format!(
            "sentinel {sentinel} knows no master named {master:?}"
        ))),
        Some(Reply::Error(e)) => Err(server_error(&e)),
        other => Err(protocol(format!(
            "get-master-addr-by-name answered {other:?}"
        ))),
    }
}

/// Follows every Sentinel's announcements for `master`, forever: one
/// subscription per Sentinel (a failover's leader is the first to know,
/// and only it tells `+selected-slave`), each re-made after a failure with
/// the connection's backoff and kept alive by a `PING` after each quiet
/// second (a Sentinel that stopped answering is left). What they tell
/// goes to `announced`, the latest winning.
async fn watch(
    sentinels: Vec<HostPort>,
    master: String,
    timeout: Duration,
    announced: Arc<Mutex<Option<Announce>>>,
) {
    let each = sentinels.into_iter().map(|sentinel| {
        let (master, announced) = (master.clone(), Arc::clone(&announced));
        async move {
            let mut backoff = MIN_BACKOFF;
            loop {
                if let Ok(mut stream) = subscribe(&sentinel, timeout).await {
                    backoff = MIN_BACKOFF;
                    follow(&mut stream, &master, timeout, &announced).await;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    });
    futures_util::future::join_all(each).await;
}

/// The channels [`watch`] follows.
const CHANNELS: [&[u8]; 2] = [b"+switch-master", b"+selected-slave"];

/// A connection to `sentinel` subscribed to [`CHANNELS`].
async fn subscribe(sentinel: &HostPort, timeout: Duration) -> Result<TcpStream, StoreError> {
    let mut stream = tcp(sentinel, timeout).await?;
    let mut request = Vec::new();
    resp::command(&mut request, &[b"SUBSCRIBE", CHANNELS[0], CHANNELS[1]]);
    let replies = exchange(&mut stream, sentinel, &request, CHANNELS.len(), timeout).await?;
    for reply in replies {
        match reply {
            Reply::Other(Value::Array(a))
                if a.first().and_then(Value::text) == Some("subscribe") => {}
            other => return Err(protocol(format!("SUBSCRIBE answered {other:?}"))),
        }
    }
    Ok(stream)
}

/// Reads announcements until the Sentinel fails: closes, answers garbage,
/// or leaves a `PING` unanswered for a second and the timeout.
async fn follow(
    stream: &mut TcpStream,
    master: &str,
    timeout: Duration,
    announced: &Mutex<Option<Announce>>,
) {
    const QUIET: Duration = Duration::from_secs(1);
    let mut buf = Vec::with_capacity(512);
    let mut pinged = false;
    loop {
        let wait = if pinged { QUIET + timeout } else { QUIET };
        match tokio::time::timeout(wait, stream.read_buf(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) => pinged = false,
            Err(_) if pinged => return,
            Err(_) => {
                let mut ping = Vec::new();
                resp::command(&mut ping, &[b"PING"]);
                if stream.write_all(&ping).await.is_err() {
                    return;
                }
                pinged = true;
                continue;
            }
        }
        let mut at = 0;
        loop {
            match resp::parse(&buf[at..]) {
                Ok(Some((reply, used))) => {
                    at += used;
                    if let Some(announce) = announcement(&reply, master) {
                        *announced.lock() = Some(announce);
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        buf.drain(..at);
        if buf.len() > MAX_REPLY {
            return;
        }
    }
}

/// What a Sentinel's message says of `master`, if anything:
/// `+switch-master` "NAME OLD-IP OLD-PORT NEW-IP NEW-PORT", or
/// `+selected-slave` "slave IP:PORT IP PORT @ NAME MASTER-IP MASTER-PORT".
fn announcement(reply: &Reply, master: &str) -> Option<Announce> {
    let Reply::Other(Value::Array(m)) = reply else {
        return None;
    };
    let [kind, channel, payload] = m.as_slice() else {
        return None;
    };
    if kind.text() != Some("message") {
        return None;
    }
    let words: Vec<&str> = payload.text()?.split_whitespace().collect();
    let node = |host: &str, port: &str| {
        Some(HostPort {
            host: host.to_owned(),
            port: port.parse().ok()?,
        })
    };
    match (channel.text()?, words.as_slice()) {
        ("+switch-master", [name, _, _, host, port]) if *name == master => {
            node(host, port).map(Announce::Master)
        }
        ("+selected-slave", ["slave", _, host, port, "@", name, _, _]) if *name == master => {
            node(host, port).map(Announce::Promoting)
        }
        _ => None,
    }
}

/// The real time, for the connection's I/O timers only (reconnect backoff,
/// read deadlines, how long a node stays a hint): they measure the network,
/// which a fake clock does not drive. Decisions never see it: a Redis store
/// takes its time from the server.
#[allow(
    clippy::disallowed_methods,
    reason = "I/O timers run on real time, not on the limiter's clock"
)]
fn io_now() -> Instant {
    Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(channel: &str, payload: &str) -> Reply {
        let mut raw = Vec::new();
        resp::command(
            &mut raw,
            &[b"message", channel.as_bytes(), payload.as_bytes()],
        );
        resp::parse(&raw).expect("RESP").expect("complete").0
    }

    fn node(host: &str, port: u16) -> HostPort {
        HostPort {
            host: host.to_owned(),
            port,
        }
    }

    #[test]
    fn announcements_about_our_master_only() {
        let switch = message("+switch-master", "mymaster 127.0.0.1 7001 127.0.0.2 7002");
        assert_eq!(
            announcement(&switch, "mymaster"),
            Some(Announce::Master(node("127.0.0.2", 7002)))
        );
        let selected = message(
            "+selected-slave",
            "slave 127.0.0.3:7003 127.0.0.3 7003 @ mymaster 127.0.0.1 7001",
        );
        assert_eq!(
            announcement(&selected, "mymaster"),
            Some(Announce::Promoting(node("127.0.0.3", 7003)))
        );
        // Another master's, a short or unreadable payload, another
        // channel, or a pong: nothing.
        assert_eq!(announcement(&switch, "other"), None);
        assert_eq!(announcement(&selected, "other"), None);
        for (channel, payload) in [
            ("+switch-master", "mymaster 127.0.0.1 7001 127.0.0.2"),
            (
                "+switch-master",
                "mymaster 127.0.0.1 7001 127.0.0.2 notaport",
            ),
            ("+switch-master", ""),
            (
                "+selected-slave",
                "slave 127.0.0.3:7003 127.0.0.3 7003 mymaster 127.0.0.1 7001",
            ),
            ("+sdown", "master mymaster 127.0.0.1 7001"),
        ] {
            assert_eq!(
                announcement(&message(channel, payload), "mymaster"),
                None,
                "{channel} {payload:?}"
            );
        }
        let mut raw = Vec::new();
        resp::command(&mut raw, &[b"pong", b""]);
        let pong = resp::parse(&raw).expect("RESP").expect("complete").0;
        assert_eq!(announcement(&pong, "mymaster"), None);
    }
}
