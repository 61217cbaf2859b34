//! Where the limits come from: a configuration source gives parsed
//! [`Document`]s, each named by where it came from (a file's path, an xDS
//! resource), and every source hands them to the same step, [`load`],
//! which checks them as one configuration (the same errors, naming the
//! document and the path inside it) before the service swaps it in
//! atomically ([`RlsService::reload`](crate::service::RlsService::reload)).
//!
//! * [`files`]: a directory of envoyproxy/ratelimit's YAML files, polled
//!   ([`files::ConfigWatcher`]);
//! * [`xds`]: an xDS management server's `RateLimitConfig` resources over
//!   ADS, state of the world, as envoyproxy/ratelimit's
//!   `CONFIG_TYPE=GRPC_XDS_SOTW` subscribes ([`xds::XdsClient`]).

pub mod files;
pub mod xds;

use crate::config::{Config, ConfigError, Document, LoadOptions};

/// Checks and loads the documents of one configuration, in order: the
/// first error (a document that could not be parsed or translated, or one
/// that does not check) stops the load and is returned as it is.
pub fn load(
    documents: impl IntoIterator<Item = Result<Document, ConfigError>>,
    options: LoadOptions,
) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    for doc in documents {
        config.add_document(&doc?, options)?;
    }
    Ok(config)
}
