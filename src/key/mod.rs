//! Key extractors: which client a request counts against.
//!
//! A [`KeyExtractor`] reads the request head and returns the key bytes, or
//! `None` when the request has no such key (the layer's missing-key policy
//! decides what happens then). Closures `Fn(&Parts) -> Option<K>` with
//! `K: Into<Vec<u8>>` are extractors too.

use http::request::Parts;

/// Derives the rate-limit key of a request from its head.
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key of this request, or `None` if it has none.
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>>;
}

impl<F, K> KeyExtractor for F
where
    F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
    K: Into<Vec<u8>>,
{
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        self(parts).map(Into::into)
    }
}

/// One key for every request: a limit on the whole service.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _parts: &Parts) -> Option<Vec<u8>> {
        Some(b"global".to_vec())
    }
}
