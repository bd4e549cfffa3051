//! [`Switch`]: a serve gate a test opens and closes.
//!
//! A gated server asks its gate before serving each call (the store master's `ServeGate`, whose
//! elected implementation follows an etcd election). A test that plays the election itself
//! holds a `Switch` and hands the server a closure that asks it:
//!
//! ```
//! use std::sync::Arc;
//! use yuebing_testkit::Switch;
//!
//! let switch = Arc::new(Switch::new(true));
//! let asked = switch.clone();
//! let gate = move || asked.check(|| "not the leader");
//! assert_eq!(gate(), Ok(()));
//! switch.close();
//! assert_eq!(gate(), Err("not the leader"));
//! ```

use std::sync::atomic::{AtomicBool, Ordering};

/// Open or closed, changed by the test at any time, read by the server at each call. Opening
/// and closing are ordered with what the test did before (release), checks with what the
/// server does after (acquire).
#[derive(Debug, Default)]
pub struct Switch(AtomicBool);

impl Switch {
    /// A switch that starts `open` or closed.
    pub const fn new(open: bool) -> Switch {
        Switch(AtomicBool::new(open))
    }

    /// Opens it: calls are served.
    pub fn open(&self) {
        self.set(true);
    }

    /// Closes it: calls are refused.
    pub fn close(&self) {
        self.set(false);
    }

    /// Opens or closes it.
    pub fn set(&self, open: bool) {
        self.0.store(open, Ordering::Release);
    }

    /// Whether it is open.
    pub fn is_open(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// `Ok(())` while open, else the error `refusal` makes (what the server answers instead).
    pub fn check<E>(&self, refusal: impl FnOnce() -> E) -> Result<(), E> {
        if self.is_open() {
            Ok(())
        } else {
            Err(refusal())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_and_closes() {
        let s = Switch::new(false);
        assert_eq!(s.check(|| 1), Err(1));
        s.open();
        assert!(s.is_open());
        assert_eq!(s.check(|| 1), Ok(()));
        s.set(false);
        assert!(!Switch::default().is_open());
        assert!(!s.is_open());
    }
}
