//! Hot reload of a configuration directory: the files source
//! ([`source::files`](crate::source::files)), under the name it had before
//! the sources were cut.

pub use crate::source::files::{ConfigWatcher, Reload, ReloadError};
