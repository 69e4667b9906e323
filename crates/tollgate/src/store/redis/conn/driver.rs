//! The driver: the task that owns the connection, writes queued requests
//! in batches, reads and routes replies, times them out, and reconnects
//! (following the Sentinel's announcements).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::super::resp::{self, Ints, Reply};
use super::super::scripts::Via;
use super::batch::{member_reply, width};
use super::handshake::{Opened, open};
use super::sentinel::{Announce, watch};
use super::stream::Stream;
use super::{
    DONE, KEEP_BUFFER, Link, MAX_BACKOFF, MAX_BATCH, MAX_COMMANDS_OUT, MAX_REPLY, MIN_BACKOFF,
    Part, Queued, READ_BUFFER, Shared, Slot, State, Target, io_error, io_now, protocol,
    unavailable,
};
use crate::error::{StoreError, StoreErrorKind};
use crate::store::url::HostPort;

/// A request the driver has taken.
#[derive(Clone, Copy)]
pub(super) struct Sent {
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

/// How long a connection waits for a replica chosen for promotion to
/// become master before it goes back to asking the Sentinels (a failover
/// can be aborted).
pub(super) const PROMOTION_WAIT: Duration = Duration::from_secs(5);

pub(super) enum Phase {
    /// No connection.
    Idle,
    Connecting(Pin<Box<dyn Future<Output = Result<Opened, StoreError>> + Send>>),
    Up(Stream),
}

/// The task that owns the socket.
pub(super) struct Driver {
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
    pub(super) fn new(shared: Arc<Shared>, opened: Option<Opened>) -> Self {
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
                    // its checks (each its time and its integers: see
                    // `width`), no reply tree.
                    let len = 1 + self
                        .inflight
                        .iter()
                        .take(batch)
                        .map(|s| width(s.part))
                        .sum::<usize>();
                    if let Some(used) = resp::int_array_of(buf, len, &mut self.ints) {
                        self.rstart += used;
                        self.last_reply = now;
                        self.commands_out = self.commands_out.saturating_sub(1);
                        let t = self.ints[0];
                        let mut at = 1;
                        for sent in self.inflight.drain(..batch) {
                            let w = width(sent.part);
                            if sent.slot != DONE {
                                let mut five = [t, 0, 0, 0, 0];
                                five[1..=w].copy_from_slice(&self.ints[at..at + w]);
                                // w <= 4
                                #[allow(clippy::cast_possible_truncation)]
                                let ints = Ints::Inline(1 + w as u8, five);
                                st.complete(sent.slot, Ok(Reply::Ints(ints)), &mut self.wakers);
                            }
                            at += w;
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
                let widths: Vec<usize> = std::iter::once(&sent)
                    .chain(self.inflight.iter().take(n - 1))
                    .map(|s| width(s.part))
                    .collect();
                let mut at = 1;
                for (j, &w) in widths.iter().enumerate() {
                    let slot = if j == 0 {
                        sent.slot
                    } else {
                        self.inflight.pop_front().map_or(DONE, |s| s.slot)
                    };
                    answer(slot, member_reply(&reply, at, w, &widths));
                    at += w;
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
        // TLS: the records a write left in the session go out (a no-op on
        // TCP); pending, the socket wakes the driver, whose next poll
        // comes back here.
        if let Poll::Ready(Err(e)) = Pin::new(&mut *stream).poll_flush(cx) {
            return Err(io_error("writing to the server", &e));
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
    /// connected (after any held before them), else to wait for a
    /// connection.
    fn take(&mut self, st: &mut State, now: Instant) {
        if !matches!(self.phase, Phase::Up(_)) || self.draining.is_some() {
            self.hold(st, now);
        } else if self.unsent.is_empty() {
            let mut taking = std::mem::take(&mut self.taking);
            taking.extend(sent(&st.queued, 0, now));
            self.emit(&st.out, &taking);
            taking.clear();
            self.taking = taking;
            st.out.clear();
            st.queued.clear();
        } else {
            self.hold(st, now);
            self.emit_unsent(st);
        }
    }

    /// Moves the requests callers queued to `unsent`, on the clock from
    /// `now` as if written: they wait for a connection, or (corked: see
    /// `poll`) for a reply before they go, and either way fail by the
    /// timeout of their call, not of when they are written at last.
    fn hold(&mut self, st: &mut State, now: Instant) {
        let base = u32::try_from(self.unsent_bytes.len()).unwrap_or(u32::MAX);
        self.unsent_bytes.extend_from_slice(&st.out);
        self.unsent.extend(sent(&st.queued, base, now));
        st.out.clear();
        st.queued.clear();
    }

    /// Writes the requests in `unsent`, except those already answered
    /// (timed out) or given up.
    fn emit_unsent(&mut self, st: &mut State) {
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
        let bytes = std::mem::take(&mut self.unsent_bytes);
        self.emit(&bytes, &taking);
        self.unsent_bytes = bytes;
        self.unsent_bytes.clear();
        taking.clear();
        self.taking = taking;
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
            let via = batch
                .iter()
                .map(|s| match s.part {
                    Part::Check { via, .. } => via,
                    Part::Whole => Via::Source,
                })
                .min()
                .unwrap_or(Via::Source);
            let checks = &self.shared.checks;
            checks.scripts.write_checks(
                &mut self.wbuf,
                same.then(|| code(first)),
                via,
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
        // A new server may take functions (see `Conn::via`).
        self.shared.functions.store(true, Ordering::Relaxed);
        self.last_reply = now;
        self.rstart = 0;
        self.rend = 0;
        self.wbuf.clear();
        self.wpos = 0;
        let shared = Arc::clone(&self.shared);
        let mut st = shared.state.lock();
        st.set_link(Link::Up);
        self.emit_unsent(&mut st);
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
            // Nothing at all for a whole timeout while a reply is owed
            // (with two commands out, the older's reply may have come
            // after the newer was written: "nothing since it was sent"
            // would keep a silently dead path for good).
            stalled = late(oldest)
                && self
                    .last_reply
                    .checked_add(timeout)
                    .is_some_and(|quiet| quiet <= now);
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

/// The requests `queued`, their bytes from `start` on in their buffer, as
/// sent (or held) at `now`.
fn sent(queued: &[Queued], mut start: u32, now: Instant) -> impl Iterator<Item = Sent> + '_ {
    queued.iter().map(move |q| {
        let s = Sent {
            slot: q.slot,
            start,
            len: q.len,
            part: q.part,
            at: now,
            replies_to: 1,
        };
        start = start.saturating_add(q.len);
        s
    })
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
            // Requests waiting to be written: queued by callers, and, while
            // connected, held back (corked) before.
            let up = matches!(this.phase, Phase::Up(_));
            let held = if up && this.draining.is_none() {
                this.unsent.len()
            } else {
                0
            };
            let waiting = st.queued.len() + held;
            let corked = up
                && (this.commands_out >= MAX_COMMANDS_OUT
                    || (this.commands_out > 0 && waiting < MAX_BATCH));
            if corked {
                // Their timeout runs from now, not from when they go.
                if !st.queued.is_empty() {
                    this.hold(&mut st, now);
                }
            } else if waiting > 0 {
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
