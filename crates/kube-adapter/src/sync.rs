//! The one way this crate takes a `Mutex`: poisoning ignored.
//!
//! Every critical section in the crate is one push, retain, insert or a few field updates, so a
//! panic inside one cannot leave the guarded state half-written: a poisoned lock is still
//! consistent, and refusing it would only turn one panic into many.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking the guard of a poisoned lock too (see the module doc for why).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
