//! A hint to the processor to start loading what the next event will read.
//!
//! A simulated fleet's state outgrows the caches: with a hundred thousand
//! clients every event reads its thread and its strategy object from main
//! memory. The engine knows the next event before it handles the current
//! one, so it asks for that event's memory first and the two loads overlap
//! the current event's work. A hint changes no result, only when the bytes
//! arrive; elsewhere than on x86-64 it does nothing.

/// Starts loading the cache lines that hold `*r` (its first and last
/// byte: a value of up to 64 bytes spans at most two lines).
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    let first = (r as *const T).cast::<u8>();
    line(first);
    line(first.wrapping_add(std::mem::size_of::<T>().saturating_sub(1)));
}

#[inline(always)]
fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch reads nothing the program sees and never
        // faults, whatever the address; SSE (the intrinsic's target
        // feature) is part of the x86-64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
