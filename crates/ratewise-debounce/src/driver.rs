//! The tokio drivers: one generic worker that owns the timer and runs the
//! actions, and three thin public handles over it.
//!
//! Why it is built this way:
//! * **One worker per primitive, only while there is work.** A call that
//!   arms a timer or queues a fire spawns the worker if none is running; the
//!   worker exits as soon as nothing is queued and no timer is armed. An idle
//!   primitive therefore holds no task and no timer.
//! * **Actions run one at a time, on the worker**, in the order they were
//!   decided — leading fires included, so `call` never runs user code and
//!   never blocks. The state lock is never held across an action, which is
//!   what makes every method re-entrant from inside the action.
//! * **Panics are caught** around both the creation and each poll of the
//!   action's future; the value was already taken out of the state machine,
//!   so the state stays consistent and the worker carries on.
//! * **Waiting methods know when they are inside their own action** (a
//!   task-local set by the worker): `flush` and `stop` called from there
//!   return at once instead of waiting for themselves.
//! * Time is tokio's clock only ([`TokioClock`], whose origin is the
//!   primitive's creation), so tests on a paused runtime see exact virtual
//!   timestamps.

use std::collections::VecDeque;
use std::future::Future;
use std::hash::Hash;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::core::{
    Batch, CoalesceConfig, CoalesceCore, DebounceConfig, DebounceCore, EventThrottleConfig,
    EventThrottleCore,
};
use super::{ActionPanic, DebounceError, FlushOutcome, StopError, StopMode, StopOutcome, Stopped};
use ratewise::time::{Clock, Timestamp};
use ratewise::wait::TokioClock;

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
type ActionFn<O> = Box<dyn Fn(O) -> BoxFuture + Send + Sync + 'static>;
type PanicHook = Box<dyn Fn(ActionPanic) + Send + Sync + 'static>;

tokio::task_local! {
    /// The address of the primitive whose action the current task is running.
    static RUNNING_ACTION_OF: usize;
}

/// What the generic worker needs from a state machine.
pub(crate) trait Machine: Send + 'static {
    type Out: Send + 'static;
    fn settle(&mut self, now: Timestamp, out: &mut Ready<Self::Out>);
    fn on_timer(&mut self, now: Timestamp, out: &mut Ready<Self::Out>);
    fn deadline(&self) -> Option<Timestamp>;
    fn flush(&mut self, now: Timestamp, out: &mut Ready<Self::Out>);
    fn clear(&mut self);
}

/// [`DebounceCore`] and [`EventThrottleCore`] have the same shape (each
/// input yields at most one value), so one forwarding impl serves both.
macro_rules! value_machine {
    ($core:ident) => {
        impl<T: Send + 'static> Machine for $core<T> {
            type Out = T;
            fn settle(&mut self, now: Timestamp, out: &mut Ready<T>) {
                out.extend($core::settle(self, now));
            }
            fn on_timer(&mut self, now: Timestamp, out: &mut Ready<T>) {
                out.extend($core::on_timer(self, now));
            }
            fn deadline(&self) -> Option<Timestamp> {
                $core::deadline(self)
            }
            fn flush(&mut self, now: Timestamp, out: &mut Ready<T>) {
                out.extend($core::flush(self, now));
            }
            fn clear(&mut self) {
                self.cancel();
            }
        }
    };
}

value_machine!(DebounceCore);
value_machine!(EventThrottleCore);

impl<K, V> Machine for CoalesceCore<K, V>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Send + 'static,
{
    type Out = Batch<K, V>;
    fn settle(&mut self, now: Timestamp, out: &mut Ready<Batch<K, V>>) {
        CoalesceCore::settle(self, now, out);
    }
    fn on_timer(&mut self, now: Timestamp, out: &mut Ready<Batch<K, V>>) {
        CoalesceCore::on_timer(self, now, out);
    }
    fn deadline(&self) -> Option<Timestamp> {
        CoalesceCore::deadline(self)
    }
    fn flush(&mut self, _now: Timestamp, out: &mut Ready<Batch<K, V>>) {
        self.drain(out);
    }
    fn clear(&mut self) {
        CoalesceCore::clear(self);
    }
}

/// Fires decided but not yet started, oldest first, each marked with
/// whether it must respect the primitive's minimum spacing (fires decided by
/// calls and timers do; explicit flushes and drains do not).
pub(crate) struct Ready<O> {
    items: VecDeque<(O, bool)>,
    spaced: bool,
}

impl<O> Ready<O> {
    fn len(&self) -> usize {
        self.items.len()
    }
}

impl<O> Extend<O> for Ready<O> {
    fn extend<I: IntoIterator<Item = O>>(&mut self, iter: I) {
        let spaced = self.spaced;
        self.items.extend(iter.into_iter().map(|o| (o, spaced)));
    }
}

struct State<M: Machine> {
    machine: M,
    ready: Ready<M::Out>,
    /// When the last action started.
    last_start: Option<Timestamp>,
    /// The latest time handed to the machine. Callers read the clock before
    /// taking the lock, so under contention a reading can be older than one
    /// already used; it is raised to this, so the machine never sees time
    /// run backwards (which it would treat as an edge).
    last_now: Timestamp,
    worker: bool,
    /// The deadline the worker is sleeping towards, if it is sleeping.
    sleeping_until: Option<Timestamp>,
    stopped: bool,
    /// Fires ever queued, and fires finished (run, panicked or discarded).
    enqueued: u64,
    finished: u64,
}

impl<M: Machine> State<M> {
    /// Runs `f` on the machine, queueing what it fires; returns `f`'s result
    /// and how many fires it queued.
    fn queue<R>(&mut self, f: impl FnOnce(&mut M, &mut Ready<M::Out>) -> R) -> (R, usize) {
        let before = self.ready.len();
        let r = f(&mut self.machine, &mut self.ready);
        let queued = self.ready.len() - before;
        self.enqueued += queued as u64;
        (r, queued)
    }

    /// Queues an overdue timer's fire and then everything pending, the
    /// latter exempt from the spacing (flush and drain); returns how many
    /// fires were queued.
    fn deliver_now(&mut self, now: Timestamp) -> usize {
        let (_, settled) = self.queue(|m, out| m.settle(now, out));
        self.ready.spaced = false;
        let (_, flushed) = self.queue(|m, out| m.flush(now, out));
        self.ready.spaced = true;
        settled + flushed
    }
}

struct Shared<M: Machine> {
    state: Mutex<State<M>>,
    wake: Notify,
    progress: Notify,
    clock: TokioClock,
    /// The least time between the starts of two spaced actions.
    spacing: Duration,
    handle: Handle,
    action: ActionFn<M::Out>,
    on_panic: Option<PanicHook>,
    panics: AtomicU64,
}

impl<M: Machine> Shared<M> {
    fn new(
        machine: M,
        spacing: Duration,
        action: ActionFn<M::Out>,
        on_panic: Option<PanicHook>,
    ) -> Result<Arc<Self>, DebounceError> {
        let handle = Handle::try_current().map_err(|_| DebounceError::NoRuntime)?;
        Ok(Arc::new(Shared {
            state: Mutex::new(State {
                machine,
                ready: Ready {
                    items: VecDeque::new(),
                    spaced: true,
                },
                last_start: None,
                last_now: Timestamp::ZERO,
                worker: false,
                sleeping_until: None,
                stopped: false,
                enqueued: 0,
                finished: 0,
            }),
            wake: Notify::new(),
            progress: Notify::new(),
            clock: TokioClock::new(),
            spacing,
            handle,
            action,
            on_panic,
            panics: AtomicU64::new(0),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State<M>> {
        // The lock is never held across user code, and every update below
        // leaves the state consistent between statements.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Reads the clock, then locks; the reading is raised to the latest time
    /// already handed to the machine.
    fn lock_now(&self) -> (MutexGuard<'_, State<M>>, Timestamp) {
        let read = self.now();
        let mut st = self.lock();
        st.last_now = st.last_now.max(read);
        let now = st.last_now;
        (st, now)
    }

    fn id(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as *const () as usize
    }

    fn inside_own_action(self: &Arc<Self>) -> bool {
        let me = self.id();
        RUNNING_ACTION_OF.try_with(|id| *id == me).unwrap_or(false)
    }

    /// Applies `f` to the machine at `now` (after settling an overdue timer),
    /// queues what it fires, and makes sure the worker will see the change.
    /// Returns `None`, without calling `f`, once stopped.
    fn update<R>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut M, Timestamp, &mut Ready<M::Out>) -> R,
    ) -> Option<R> {
        let (mut st, now) = self.lock_now();
        let st = &mut *st;
        if st.stopped {
            return None;
        }
        let (_, settled) = st.queue(|m, out| m.settle(now, out));
        let (r, queued) = st.queue(|m, out| f(m, now, out));
        self.kick(st, settled + queued > 0);
        Some(r)
    }

    /// Wakes or spawns the worker if it would otherwise miss new work.
    fn kick(self: &Arc<Self>, st: &mut State<M>, queued: bool) {
        let deadline = st.machine.deadline();
        if !st.worker {
            if queued || deadline.is_some() {
                st.worker = true;
                self.handle.spawn(worker(Arc::clone(self)));
            }
        } else if let Some(sleeping) = st.sleeping_until {
            if queued || deadline.is_some_and(|d| d < sleeping) {
                self.wake.notify_one();
            }
        }
    }

    /// Drops what the machine holds and forgets history, including when the
    /// last action started (so a following leading fire is not spaced).
    fn cancel(self: &Arc<Self>) {
        let (mut st, now) = self.lock_now();
        let st = &mut *st;
        if st.stopped {
            return;
        }
        let (_, queued) = st.queue(|m, out| m.settle(now, out));
        st.machine.clear();
        st.last_start = None;
        self.kick(st, queued > 0);
    }

    /// Waits until every fire queued so far has finished.
    async fn wait_finished(self: &Arc<Self>, target: u64) {
        loop {
            let mut notified = pin!(self.progress.notified());
            notified.as_mut().enable();
            if self.lock().finished >= target {
                return;
            }
            notified.await;
        }
    }

    async fn run(self: &Arc<Self>, item: M::Out) {
        let id = self.id();
        let result = RUNNING_ACTION_OF
            .scope(id, async {
                let fut = catch_unwind(AssertUnwindSafe(|| (self.action)(item)));
                match fut {
                    Ok(fut) => CatchUnwind(fut).await,
                    Err(p) => Err(p),
                }
            })
            .await;
        if let Err(payload) = result {
            self.panics.fetch_add(1, Ordering::Relaxed);
            if let Some(hook) = &self.on_panic {
                let message = panic_message(payload.as_ref());
                // A panicking hook must not take the worker down either.
                let _ = catch_unwind(AssertUnwindSafe(|| hook(ActionPanic { message })));
            }
        }
    }

    async fn flush(self: &Arc<Self>) -> FlushOutcome {
        let (queued, target) = {
            let (mut st, now) = self.lock_now();
            let st = &mut *st;
            let queued = st.deliver_now(now);
            self.kick(st, queued > 0);
            (queued, st.enqueued)
        };
        if queued == 0 {
            return FlushOutcome::Idle;
        }
        if self.inside_own_action() {
            return FlushOutcome::Scheduled;
        }
        self.wait_finished(target).await;
        FlushOutcome::Delivered
    }

    async fn stop(
        self: &Arc<Self>,
        mode: StopMode,
        timeout: Duration,
    ) -> Result<StopOutcome, StopError<M::Out>> {
        let target = {
            let (mut st, now) = self.lock_now();
            let st = &mut *st;
            if !st.stopped {
                st.stopped = true;
                let queued = match mode {
                    StopMode::Drain => st.deliver_now(now),
                    StopMode::Abort => {
                        st.finished += st.ready.len() as u64;
                        st.ready.items.clear();
                        0
                    }
                };
                st.machine.clear();
                self.kick(st, queued > 0);
            }
            st.enqueued
        };
        if self.inside_own_action() {
            return Ok(StopOutcome::NotAwaited);
        }
        if tokio::time::timeout(timeout, self.wait_finished(target))
            .await
            .is_ok()
        {
            return Ok(StopOutcome::Completed);
        }
        let undelivered: Vec<M::Out> = {
            let mut st = self.lock();
            let taken: Vec<M::Out> = st.ready.items.drain(..).map(|(o, _)| o).collect();
            st.finished += taken.len() as u64;
            taken
        };
        self.progress.notify_waiters();
        Err(StopError::TimedOut { undelivered })
    }

    fn is_stopped(&self) -> bool {
        self.lock().stopped
    }
}

enum Next<O> {
    Run(O),
    Sleep(Timestamp),
}

async fn worker<M: Machine>(shared: Arc<Shared<M>>) {
    loop {
        let next = {
            let (mut st, now) = shared.lock_now();
            let st = &mut *st;
            st.sleeping_until = None;
            if st.machine.deadline().is_some_and(|d| d <= now) {
                st.queue(|m, out| m.on_timer(now, out));
            }
            let spacing = shared.spacing;
            let front_at = st
                .ready
                .items
                .front()
                .map(|(_, spaced)| match st.last_start {
                    Some(last) if *spaced => last + spacing,
                    _ => now,
                });
            match front_at {
                Some(at) if at <= now => match st.ready.items.pop_front() {
                    Some((item, _)) => {
                        st.last_start = Some(now);
                        Next::Run(item)
                    }
                    None => continue,
                },
                // The front fire (if any) is too soon after the last action:
                // wake for it or for the machine's own timer, whichever is
                // first; with neither, the worker exits.
                _ => match front_at.into_iter().chain(st.machine.deadline()).min() {
                    Some(d) => {
                        st.sleeping_until = Some(d);
                        Next::Sleep(d)
                    }
                    None => {
                        st.worker = false;
                        return;
                    }
                },
            }
        };
        match next {
            Next::Run(item) => {
                shared.run(item).await;
                shared.lock().finished += 1;
                shared.progress.notify_waiters();
            }
            Next::Sleep(d) => {
                // Armed at `d` itself, so it never wakes before `d`; a
                // deadline too far to represent parks the task until woken.
                let mut sleep = pin!(match shared.clock.instant_at(d) {
                    Some(at) => tokio::time::sleep_until(at),
                    None => tokio::time::sleep(Duration::MAX),
                });
                let mut woken = pin!(shared.wake.notified());
                std::future::poll_fn(|cx| {
                    if sleep.as_mut().poll(cx).is_ready() || woken.as_mut().poll(cx).is_ready() {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .await;
            }
        }
    }
}

/// A future that turns a panic while polling into an `Err`.
struct CatchUnwind(BoxFuture);

impl Future for CatchUnwind {
    type Output = Result<(), Box<dyn std::any::Any + Send>>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let fut = &mut self.0;
        match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Ready(())) => Poll::Ready(Ok(())),
            Ok(Poll::Pending) => Poll::Pending,
            Err(p) => Poll::Ready(Err(p)),
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

fn boxed<O, F, Fut>(action: F) -> ActionFn<O>
where
    F: Fn(O) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Box::new(move |o| Box::pin(action(o)) as BoxFuture)
}

macro_rules! common_controls {
    ($out:ty) => {
        /// Delivers everything pending now and waits until those actions
        /// have finished. Called from inside this primitive's own action it
        /// queues the delivery and returns [`FlushOutcome::Scheduled`]
        /// without waiting (waiting there would deadlock).
        pub async fn flush(&self) -> FlushOutcome {
            self.shared.flush().await
        }

        /// Stops the primitive. [`StopMode::Drain`] (the default choice)
        /// delivers what is pending at once; [`StopMode::Abort`] drops it.
        /// Waits up to `timeout` for queued and running actions to finish;
        /// past it, fires that have not started are dropped and returned in
        /// [`StopError::TimedOut`] (an action already running is left to
        /// finish on its own). Idempotent: later calls only wait (their mode
        /// is ignored). From inside the primitive's own action it returns
        /// [`StopOutcome::NotAwaited`] at once.
        pub async fn stop(
            &self,
            mode: StopMode,
            timeout: Duration,
        ) -> Result<StopOutcome, StopError<$out>> {
            self.shared.stop(mode, timeout).await
        }

        /// True once [`stop`](Self::stop) has been called.
        pub fn is_stopped(&self) -> bool {
            self.shared.is_stopped()
        }

        /// How many actions have panicked so far.
        pub fn panics(&self) -> u64 {
            self.shared.panics.load(Ordering::Relaxed)
        }
    };
}

/// The parts [`Debouncer`] and [`EventThrottle`] share: `Clone`, the
/// constructors, `call` and the common controls. `$spacing` is the least
/// time between the starts of two timer- or call-decided actions.
macro_rules! value_handle {
    ($name:ident, $core:ident, $config:ty, $new_doc:literal, spacing = |$c:ident| $spacing:expr) => {
        impl<T: Send + 'static> Clone for $name<T> {
            fn clone(&self) -> Self {
                $name {
                    shared: Arc::clone(&self.shared),
                }
            }
        }

        impl<T: Send + 'static> $name<T> {
            #[doc = $new_doc]
            pub fn new<F, Fut>(config: $config, action: F) -> Result<Self, DebounceError>
            where
                F: Fn(T) -> Fut + Send + Sync + 'static,
                Fut: Future<Output = ()> + Send + 'static,
            {
                Self::build(config, action, None)
            }

            /// As [`new`](Self::new), reporting action panics to `on_panic`.
            pub fn with_panic_hook<F, Fut, H>(
                config: $config,
                action: F,
                on_panic: H,
            ) -> Result<Self, DebounceError>
            where
                F: Fn(T) -> Fut + Send + Sync + 'static,
                Fut: Future<Output = ()> + Send + 'static,
                H: Fn(ActionPanic) + Send + Sync + 'static,
            {
                Self::build(config, action, Some(Box::new(on_panic)))
            }

            fn build<F, Fut>(
                config: $config,
                action: F,
                hook: Option<PanicHook>,
            ) -> Result<Self, DebounceError>
            where
                F: Fn(T) -> Fut + Send + Sync + 'static,
                Fut: Future<Output = ()> + Send + 'static,
            {
                let spacing = {
                    let $c = &config;
                    $spacing
                };
                Ok($name {
                    shared: Shared::new($core::new(config), spacing, boxed(action), hook)?,
                })
            }

            /// Offers `value`. Never blocks and never runs the action itself
            /// (a leading fire is handed to the worker at once). After
            /// [`stop`](Self::stop) the value is handed back in [`Stopped`].
            pub fn call(&self, value: T) -> Result<(), Stopped<T>> {
                let mut slot = Some(value);
                self.shared.update(|m, now, out| {
                    if let Some(v) = slot.take() {
                        out.extend(m.call(now, v));
                    }
                });
                slot.map_or(Ok(()), |v| Err(Stopped(v)))
            }

            common_controls!(T);
        }
    };
}

/// A trailing/leading/both-edge debouncer with max-wait, driven by tokio.
///
/// Cloning gives another handle to the same debouncer. See the
/// [module docs](super) for semantics and [`DebounceCore`] for the state
/// machine. Dropping every handle does not cancel a pending value: it fires
/// at its deadline and the worker then exits; call [`stop`](Self::stop) to
/// choose.
pub struct Debouncer<T: Send + 'static> {
    shared: Arc<Shared<DebounceCore<T>>>,
}

value_handle!(
    Debouncer,
    DebounceCore,
    DebounceConfig,
    "A debouncer running `action` on the current tokio runtime.",
    spacing = |_config| Duration::ZERO
);

impl<T: Send + 'static> Debouncer<T> {
    /// Drops the pending value; the next call behaves like the first.
    pub fn cancel(&self) {
        self.shared.cancel();
    }

    /// True iff a trailing fire is scheduled (false in leading-only mode).
    pub fn is_pending(&self) -> bool {
        self.shared.lock().machine.is_pending()
    }
}

/// An event throttle: at most one action per `wait`, leading and/or
/// trailing, and never two actions closer than `wait` (RxJS semantics).
///
/// Named to stay apart from the client-side request throttle of the
/// `ratewise-client` crate: this one thins a stream of *events*.
/// [`EventThrottleCore`] is the state machine. The spacing is also enforced
/// where the actions *start*: if a slow action delays the start of the next
/// fire, the one after it still waits until `wait` after that start. Only
/// an explicit [`flush`](Self::flush) or a draining [`stop`](Self::stop)
/// skips the wait (they deliver now by definition).
pub struct EventThrottle<T: Send + 'static> {
    shared: Arc<Shared<EventThrottleCore<T>>>,
}

value_handle!(
    EventThrottle,
    EventThrottleCore,
    EventThrottleConfig,
    "An event throttle running `action` on the current tokio runtime.",
    spacing = |config| config.wait()
);

impl<T: Send + 'static> EventThrottle<T> {
    /// Drops the held value and closes the window: the next call behaves
    /// like the first (a leading fire happens at once).
    pub fn cancel(&self) {
        self.shared.cancel();
    }

    /// True iff a trailing fire is scheduled.
    pub fn is_pending(&self) -> bool {
        self.shared.lock().machine.is_pending()
    }
}

/// A per-key batcher: values pushed under one key are delivered together as
/// a [`Batch`], at the latest when the key's window ends, at once when the
/// batch reaches `max_batch`. See [`CoalesceCore`] for the invariants.
pub struct Coalescer<K, V>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Send + 'static,
{
    shared: Arc<Shared<CoalesceCore<K, V>>>,
}

impl<K, V> Clone for Coalescer<K, V>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Send + 'static,
{
    fn clone(&self) -> Self {
        Coalescer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K, V> Coalescer<K, V>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Send + 'static,
{
    /// A coalescer running `action(key, items)` on the current tokio runtime.
    pub fn new<F, Fut>(config: CoalesceConfig, action: F) -> Result<Self, DebounceError>
    where
        F: Fn(K, Vec<V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self::build(config, action, None)
    }

    /// As [`new`](Self::new), reporting action panics to `on_panic`.
    pub fn with_panic_hook<F, Fut, H>(
        config: CoalesceConfig,
        action: F,
        on_panic: H,
    ) -> Result<Self, DebounceError>
    where
        F: Fn(K, Vec<V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
        H: Fn(ActionPanic) + Send + Sync + 'static,
    {
        Self::build(config, action, Some(Box::new(on_panic)))
    }

    fn build<F, Fut>(
        config: CoalesceConfig,
        action: F,
        hook: Option<PanicHook>,
    ) -> Result<Self, DebounceError>
    where
        F: Fn(K, Vec<V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let action = boxed(move |b: Batch<K, V>| action(b.key, b.items));
        Ok(Coalescer {
            shared: Shared::new(CoalesceCore::new(config), Duration::ZERO, action, hook)?,
        })
    }

    /// Adds `value` to `key`'s batch. After [`stop`](Self::stop) the value is
    /// handed back in [`Stopped`].
    pub fn push(&self, key: K, value: V) -> Result<(), Stopped<V>> {
        self.push_weighted(key, value, 1)
    }

    /// Adds `value` weighing `weight` units (0 counts as 1) to `key`'s batch;
    /// `max_batch` then caps the total weight.
    pub fn push_weighted(&self, key: K, value: V, weight: u64) -> Result<(), Stopped<V>> {
        let mut slot = Some((key, value));
        self.shared.update(|m, now, out| {
            if let Some((k, v)) = slot.take() {
                m.push_weighted(now, k, v, weight, out);
            }
        });
        slot.map_or(Ok(()), |(_, v)| Err(Stopped(v)))
    }

    /// True iff some key has a batch waiting.
    pub fn is_pending(&self) -> bool {
        self.shared.lock().machine.is_pending()
    }

    common_controls!(Batch<K, V>);
}
