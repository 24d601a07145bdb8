//! Values every response shares (the `RateLimit-Policy` header, the refusal
//! body), kept for the life of the process so that handing one out touches
//! no shared counter.
//!
//! Why: a `Bytes` or `HeaderValue` made at run time is reference-counted,
//! so every clone and drop is an atomic read-modify-write on one cache line
//! that every worker thread shares, and a lock around a value that may
//! change adds two more. On a many-core server that line moves between
//! cores on every request. A value made from a `&'static` slice clones and
//! drops without touching memory at all, so these values are interned: each
//! distinct one is leaked once and reused by every layer that renders the
//! same bytes.
//!
//! Invariant: memory is bounded. At most [`SLOTS`] distinct header values
//! and [`BYTE_BUDGET`] bytes in all are ever interned; past either bound
//! [`intern_header`] and [`intern_bytes`] answer `None` and the caller keeps
//! its own reference-counted value (correct, only slower). Distinct values
//! come from distinct policy configurations, which a process has few of.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use bytes::Bytes;
use http::HeaderValue;

/// How many distinct header values can be interned.
pub(crate) const SLOTS: usize = 256;

/// How many bytes, header values and bodies together, may be interned.
pub(crate) const BYTE_BUDGET: usize = 1 << 20;

/// The interned header values, by slot; a slot once set never changes, so
/// a reader needs one acquiring load and no lock.
static HEADER_SLOTS: [OnceLock<HeaderValue>; SLOTS] = [const { OnceLock::new() }; SLOTS];

/// The index of interned values (taken only to intern, never to read).
#[derive(Default)]
struct Index {
    /// Slot of each interned header value.
    headers: HashMap<Box<[u8]>, usize>,
    /// Each interned byte string (bodies and header values alike).
    bytes: HashMap<Box<[u8]>, &'static [u8]>,
    /// Bytes leaked so far.
    spent: usize,
}

fn index() -> std::sync::MutexGuard<'static, Index> {
    static INDEX: OnceLock<Mutex<Index>> = OnceLock::new();
    INDEX
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

impl Index {
    /// `bytes`, leaked once: the copy made earlier, if any, else a new one
    /// while the byte budget allows.
    fn leak(&mut self, bytes: &[u8]) -> Option<&'static [u8]> {
        if let Some(s) = self.bytes.get(bytes) {
            return Some(s);
        }
        if self.spent.saturating_add(bytes.len()) > BYTE_BUDGET {
            return None;
        }
        self.spent += bytes.len();
        let s: &'static [u8] = Box::leak(bytes.to_vec().into_boxed_slice());
        self.bytes.insert(bytes.into(), s);
        Some(s)
    }

    /// The slot of `slots` that holds the header value `bytes`, filling
    /// the next free one first if need be.
    fn header(&mut self, bytes: &[u8], slots: &[OnceLock<HeaderValue>]) -> Option<usize> {
        if let Some(&slot) = self.headers.get(bytes) {
            return Some(slot);
        }
        let slot = self.headers.len();
        // Validated before anything is leaked.
        if slot >= slots.len() || HeaderValue::from_bytes(bytes).is_err() {
            return None;
        }
        let value = HeaderValue::from_maybe_shared(Bytes::from_static(self.leak(bytes)?)).ok()?;
        slots[slot].set(value).ok()?;
        self.headers.insert(bytes.into(), slot);
        Some(slot)
    }
}

/// `bytes` as a `Bytes` whose clones and drops are free, or `None` past the
/// byte budget.
pub(crate) fn intern_bytes(bytes: &[u8]) -> Option<Bytes> {
    index().leak(bytes).map(Bytes::from_static)
}

/// The slot of the interned header value `bytes` (interning it first), or
/// `None` when `bytes` is not a valid header value or a bound is reached.
pub(crate) fn intern_header(bytes: &[u8]) -> Option<usize> {
    #[cfg(test)]
    if tests::OFF.with(std::cell::Cell::get) {
        return None;
    }
    index().header(bytes, &HEADER_SLOTS)
}

/// The header value interned in `slot` (a clone that costs no atomic
/// operation), if any.
#[inline]
pub(crate) fn header(slot: usize) -> Option<HeaderValue> {
    HEADER_SLOTS.get(slot)?.get().cloned()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Interning off for this thread's header values: lets a test take
        /// the fallback path without exhausting the process-wide slots the
        /// other tests share.
        pub(crate) static OFF: Cell<bool> = const { Cell::new(false) };
    }

    #[test]
    fn equal_values_share_one_slot_and_one_copy() {
        let a = intern_header(b"\"interned-test\";q=5;w=1").expect("room");
        let b = intern_header(b"\"interned-test\";q=5;w=1").expect("room");
        assert_eq!(a, b);
        assert_eq!(
            header(a).expect("set").as_bytes(),
            b"\"interned-test\";q=5;w=1"
        );
        let c = intern_header(b"\"interned-test\";q=6;w=1").expect("room");
        assert_ne!(a, c);
        let x = intern_bytes(b"interned body").expect("room");
        let y = intern_bytes(b"interned body").expect("room");
        assert_eq!(x.as_ptr(), y.as_ptr(), "one copy for equal bytes");
    }

    #[test]
    fn an_invalid_header_value_is_not_interned() {
        assert_eq!(intern_header(b"bad\nvalue"), None);
        assert_eq!(header(SLOTS), None);
    }

    #[test]
    fn the_slots_and_the_byte_budget_are_bounds() {
        let slots: [OnceLock<HeaderValue>; 2] = [const { OnceLock::new() }; 2];
        let mut index = Index::default();
        assert_eq!(index.header(b"one", &slots), Some(0));
        assert_eq!(index.header(b"two", &slots), Some(1));
        assert_eq!(index.header(b"three", &slots), None, "no slot left");
        assert_eq!(index.header(b"one", &slots), Some(0), "still found");
        assert_eq!(slots[1].get().map(HeaderValue::as_bytes), Some(&b"two"[..]));
        let spent = index.spent;
        assert_eq!(index.leak(&vec![b'x'; BYTE_BUDGET]), None, "over budget");
        assert_eq!(index.spent, spent, "nothing spent on a refusal");
        assert!(index.leak(b"small").is_some());
    }
}
