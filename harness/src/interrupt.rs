//! SIGINT and SIGTERM. A run of many checks that is stopped should still say what it
//! found: the signal raises the checker's interrupt flag, the check in progress ends
//! inconclusive as a limit would end it, no further check starts, and the reports (table,
//! JSON lines, JUnit) are written for what finished. A second signal ends the process at
//! once, for a user who does not want to wait for even that.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

pub use signal_hook::consts::{SIGINT, SIGTERM};

/// The signals a run stops on, and which one came first.
pub struct Interrupt {
    raised: Arc<AtomicBool>,
    signal: Arc<AtomicUsize>,
}

impl Interrupt {
    /// Installs the handlers. Each signal records its number (the first one wins) and
    /// raises the flag; with the flag already raised it exits with 128 + the signal.
    pub fn install() -> std::io::Result<Interrupt> {
        let raised = Arc::new(AtomicBool::new(false));
        let signal = Arc::new(AtomicUsize::new(0));
        for number in [SIGINT, SIGTERM] {
            // Registered first, so it sees the flag as the previous signal left it.
            signal_hook::flag::register_conditional_shutdown(
                number,
                128 + number,
                Arc::clone(&raised),
            )?;
            let first = Arc::clone(&signal);
            let flag = Arc::clone(&raised);
            // SAFETY: the action only does atomic operations, which are
            // async-signal-safe.
            unsafe {
                signal_hook::low_level::register(number, move || {
                    let _ = first.compare_exchange(
                        0,
                        number as usize,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                    flag.store(true, Ordering::SeqCst);
                })?;
            }
        }
        Ok(Interrupt { raised, signal })
    }

    /// The flag the checker reads.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.raised)
    }

    /// The first signal received, if any.
    pub fn signal(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            n => Some(n as i32),
        }
    }
}

/// `SIGINT`, `SIGTERM`.
pub fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}
