//! [`Inline`]: a future wrapper that polls its future again at once when
//! the future woke itself while being polled, instead of a round trip
//! through the runtime's scheduler.
//!
//! Why: hyper's request-body channel wakes the connection's task every time
//! the handler takes the body (it wakes the sender, which has already gone
//! by then), so every request with a body cost a second scheduling of the
//! connection task: the scheduler's queues, its clock reads, the task's
//! state changes. Measured with callgrind on `POST /v1/check`, about 8% of
//! the instructions of a check went to that second pass.
//!
//! A wake from anywhere else (the I/O driver, a timer, another thread)
//! while the future is *not* being polled goes to the task's own waker as
//! usual. At most [`MAX_INLINE`] polls in a row are made inline; then the
//! wake is handed to the scheduler, so a future that keeps waking itself
//! (tokio's cooperative budget does, on purpose) still yields.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use atomic_waker::AtomicWaker;
use std::task::{Context, Poll, Wake, Waker};

/// The most polls made in a row without going back to the scheduler.
pub const MAX_INLINE: usize = 3;

/// What the wrapper's waker shares with the wrapper.
#[derive(Debug, Default)]
struct Shared {
    /// The task's own waker, as last seen.
    task: AtomicWaker,
    /// True while the inner future is being polled.
    polling: AtomicBool,
    /// Set by every wake.
    woken: AtomicBool,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Dekker-style, both sides SeqCst: either the poller, after its
        // poll, sees `woken`, or this sees `polling` false and wakes the
        // task (or both: one spare wake, which is harmless). A wake is
        // never lost.
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            // Takes the waker out: the task, once polled, registers again,
            // and a second wake before that poll has nothing to add.
            self.task.wake();
        }
    }
}

/// A future polled again at once when it wakes itself during a poll.
#[derive(Debug)]
pub struct Inline<F> {
    inner: F,
    shared: Arc<Shared>,
    waker: Waker,
}

impl<F> Inline<F> {
    /// Wraps `inner` (one allocation, for the shared waker state).
    pub fn new(inner: F) -> Self {
        let shared = Arc::new(Shared::default());
        let waker = Waker::from(Arc::clone(&shared));
        Self {
            inner,
            shared,
            waker,
        }
    }
}

impl<F: Future + Unpin> Future for Inline<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // A no-op when the task's waker is the one already held.
        this.shared.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..MAX_INLINE {
            this.shared.woken.store(false, Ordering::SeqCst);
            this.shared.polling.store(true, Ordering::SeqCst);
            let polled = Pin::new(&mut this.inner).poll(&mut inner_cx);
            this.shared.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !this.shared.woken.swap(false, Ordering::SeqCst) {
                // Nothing woke it meanwhile: a later wake reaches the task.
                return Poll::Pending;
            }
        }
        // It keeps waking itself: let the scheduler run others first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Pending `pending` times, waking itself each time; then ready.
    struct SelfWaking {
        pending: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            let polls = self.polls.fetch_add(1, Ordering::SeqCst) + 1;
            if self.pending == 0 {
                return Poll::Ready(polls);
            }
            self.pending -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wakes that reach the task.
    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The task's wake counter and its waker.
    fn task() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        (count, waker)
    }

    /// An [`Inline`] around a [`SelfWaking`] pending `pending` times, and
    /// its poll counter.
    fn self_waking(pending: usize) -> (Inline<SelfWaking>, Arc<AtomicUsize>) {
        let polls = Arc::new(AtomicUsize::new(0));
        let f = Inline::new(SelfWaking {
            pending,
            polls: Arc::clone(&polls),
        });
        (f, polls)
    }

    #[test]
    fn a_self_wake_is_polled_again_without_the_scheduler() {
        let (count, waker) = task();
        let mut cx = Context::from_waker(&waker);
        let (mut f, polls) = self_waking(1);
        assert_eq!(Pin::new(&mut f).poll(&mut cx), Poll::Ready(2));
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "no wake reached the task"
        );
    }

    #[test]
    fn a_future_that_keeps_waking_itself_still_yields() {
        let (count, waker) = task();
        let mut cx = Context::from_waker(&waker);
        let (mut f, polls) = self_waking(100);
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), MAX_INLINE);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "handed to the scheduler");
    }

    #[test]
    fn a_wake_after_the_poll_reaches_the_task() {
        struct Parked(Option<Waker>);
        impl Future for Parked {
            type Output = ();
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                if self.0.is_some() {
                    return Poll::Ready(());
                }
                self.0 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
        let (count, waker) = task();
        let mut cx = Context::from_waker(&waker);
        let mut f = Inline::new(Parked(None));
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        // Woken later, from another thread: the task hears of it.
        let stored = f.inner.0.clone().expect("registered");
        std::thread::spawn(move || stored.wake())
            .join()
            .expect("thread");
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(Pin::new(&mut f).poll(&mut cx), Poll::Ready(()));
    }
}
