//! Capturing the `tracing` output of the current test.
//!
//! A test that asserts on log lines calls [`capture()`] and reads
//! [`Capture::text`]. One global subscriber, installed once per test binary,
//! formats the events of threads that are capturing into that thread's
//! buffer and ignores every other thread. (A per-test `set_default`
//! subscriber is not enough: `tracing` caches each callsite's interest
//! globally, so a test running in parallel that registers a callsite first can
//! leave the capturing test's subscriber blind to it.)
//!
//! Events are captured on the thread that called [`capture()`]: use it from a
//! `current_thread` runtime, where every task of the test runs on that thread.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Once;
use std::time::Duration;

use tracing_subscriber::filter::{LevelFilter, dynamic_filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, Registry};

thread_local! {
    /// The current thread's capture buffer, while a [`Capture`] lives.
    static BUFFER: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Captures, until dropped, every event at `DEBUG` or above that the current
/// thread emits, formatted as plain text (no colours), one line per event.
pub(crate) fn capture() -> Capture {
    install();
    BUFFER.with(|b| {
        let mut b = b.borrow_mut();
        assert!(b.is_none(), "this thread is capturing already");
        *b = Some(Vec::new());
    });
    Capture {
        _this_thread: PhantomData,
    }
}

/// The log lines of the current thread since [`capture()`]; stops capturing when dropped.
#[must_use = "capturing stops when the guard is dropped"]
pub(crate) struct Capture {
    _this_thread: PhantomData<*const ()>,
}

impl Capture {
    /// Everything captured so far.
    pub(crate) fn text(&self) -> String {
        BUFFER.with(|b| {
            String::from_utf8_lossy(b.borrow().as_deref().unwrap_or_default()).into_owned()
        })
    }

    /// The captured lines that contain `needle`.
    pub(crate) fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = BUFFER.try_with(|b| b.borrow_mut().take());
    }
}

fn capturing() -> bool {
    BUFFER.try_with(|b| b.borrow().is_some()).unwrap_or(false)
}

/// Appends to the current thread's buffer, if it has one.
struct ThreadBuffer;

impl std::io::Write for ThreadBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = BUFFER.try_with(|b| {
            if let Some(out) = b.borrow_mut().as_mut() {
                out.extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Asked on every event: whether the emitting thread is capturing. (A
        // dynamic filter: a plain `filter_fn` is asked once per callsite and
        // its answer cached, whichever thread asked.)
        let only_capturing_threads =
            dynamic_filter_fn(|meta, _| LevelFilter::DEBUG >= *meta.level() && capturing());
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(|| ThreadBuffer)
            .with_filter(only_capturing_threads);
        tracing::subscriber::set_global_default(Registry::default().with(layer))
            .expect("no other global tracing subscriber in the test binary");
        // A callsite registering on another thread while the subscriber was
        // installed may have cached the old "no subscriber" interest: ask again,
        // once such a registration has surely finished.
        std::thread::sleep(Duration::from_millis(20));
        tracing::callsite::rebuild_interest_cache();
    });
}
