//! Locking a mutex the way every part of the daemon does: poisoning is
//! ignored. A leaf module: it uses nothing from the rest of the crate, so
//! any module may import [`lock`] (`use crate::locking::lock;`) without
//! making a cycle.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks a mutex, ignoring poisoning: no critical section in this crate
/// leaves its data half-changed, and a panic in one connection must not
/// stop the others.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mutex_poisoned_by_a_panic_still_gives_its_data() {
        let mutex = std::sync::Arc::new(Mutex::new(7));
        let held = std::sync::Arc::clone(&mutex);
        let panicked = std::thread::spawn(move || {
            let _guard = held.lock().unwrap();
            panic!("poison the mutex");
        })
        .join();
        assert!(panicked.is_err() && mutex.is_poisoned());
        assert_eq!(*lock(&mutex), 7);
    }
}
