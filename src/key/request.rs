//! Keys from the request line and headers.

use std::borrow::Cow;

use http::HeaderName;
use http::header::InvalidHeaderName;
use http::request::Parts;

use super::KeyExtractor;

/// Key: a hash of a request header's value, as `hdr:<name>:<hex>`, for
/// limits per API key, token or tenant.
///
/// The value never reaches the store: the key holds the first 128 bits of
/// its SHA-256 digest in hex (32 characters), so a read of Redis does not
/// reveal API keys. The raw bytes are hashed as sent (no trimming, any
/// bytes). The first occurrence of the header is used; a request without
/// the header has no key (`None`), and one with an empty value has the key
/// of the empty value.
///
/// ```
/// use tower_redis_ratelimit::key::{Header, KeyExtractor};
///
/// let api_key = Header::new(http::HeaderName::from_static("x-api-key"));
/// let (parts, ()) = http::Request::builder()
///     .header("x-api-key", "sk_live_secret")
///     .body(())?
///     .into_parts();
/// let key = String::from_utf8(api_key.extract(&parts).unwrap_or_default())?;
/// assert!(key.starts_with("hdr:x-api-key:"));
/// assert!(!key.contains("sk_live_secret"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    name: HeaderName,
}

impl Header {
    /// Keys requests by the value of this header.
    pub fn new(name: HeaderName) -> Self {
        Header { name }
    }

    /// Keys requests by the value of the header of this name (any case).
    ///
    /// # Errors
    ///
    /// When `name` is not a valid header name.
    pub fn parse(name: &str) -> Result<Self, InvalidHeaderName> {
        HeaderName::from_bytes(name.as_bytes()).map(Self::new)
    }

    /// The header read.
    pub fn name(&self) -> &HeaderName {
        &self.name
    }
}

impl KeyExtractor for Header {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        let value = parts.headers.get(&self.name)?;
        let digest = crate::digest::hash_hex(value.as_bytes());
        Some(format!("hdr:{}:{digest}", self.name).into_bytes())
    }

    fn missing_hint(&self, _parts: &Parts) -> Cow<'static, str> {
        Cow::Owned(format!("Header: the request has no `{}` header", self.name))
    }
}

/// Key: the request path, as `path:<path>` (no query string), exactly as
/// sent: `/a` and `/a/` differ, and so do `/users/1` and `/users/2` (see
/// [`MatchedPath`] to share a limit per route). Always present.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Path;

impl KeyExtractor for Path {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        Some([b"path:", parts.uri.path().as_bytes()].concat())
    }
}

/// Key: the axum route template that matched, as `route:<template>`, so
/// `/users/1` and `/users/2` share the key `route:/users/{id}`.
///
/// axum records the template in the request extensions when a route
/// matches, before the route's layers run, so this works in a layer added
/// with `Router::layer`, `Router::route_layer` or on a single route. It is
/// absent (the key is `None`) when no route matched (the fallback) and in a
/// layer wrapped around the whole router from outside, which runs before
/// routing.
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MatchedPath;

#[cfg(feature = "axum")]
impl KeyExtractor for MatchedPath {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        let matched = parts.extensions.get::<axum::extract::MatchedPath>()?;
        Some([b"route:", matched.as_str().as_bytes()].concat())
    }

    fn missing_hint(&self, _parts: &Parts) -> Cow<'static, str> {
        Cow::Borrowed(
            "MatchedPath: no axum route matched; add the layer with `Router::layer` or \
             `route_layer` (inside the router), not around it",
        )
    }
}

/// Key: the request method, as `method:<METHOD>`. Always present.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Method;

impl KeyExtractor for Method {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        Some([b"method:", parts.method.as_str().as_bytes()].concat())
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn parts(req: http::request::Builder) -> Parts {
        req.body(()).unwrap().into_parts().0
    }

    fn key_str(key: Option<Vec<u8>>) -> String {
        String::from_utf8(key.unwrap()).unwrap()
    }

    #[test]
    fn header_key_is_a_digest_that_never_contains_the_secret() {
        let secret = "sk_live_0123456789abcdef";
        let p = parts(http::Request::builder().header("X-Api-Key", secret));
        let key = key_str(Header::parse("X-API-Key").unwrap().extract(&p));
        assert!(!key.contains(secret));
        assert!(!key.contains("0123456789abcdef"));
        let hex = key.strip_prefix("hdr:x-api-key:").unwrap();
        assert_eq!(hex.len(), 32);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(hex, crate::digest::hash_hex(secret.as_bytes()));
    }

    #[test]
    fn header_keys_differ_per_value_and_are_stable() {
        let a = parts(http::Request::builder().header("x-api-key", "a"));
        let b = parts(http::Request::builder().header("x-api-key", "b"));
        let extractor = Header::new(HeaderName::from_static("x-api-key"));
        assert_ne!(extractor.extract(&a), extractor.extract(&b));
        assert_eq!(extractor.extract(&a), extractor.extract(&a));
    }

    #[test]
    fn header_missing_is_none_and_empty_is_a_key() {
        let extractor = Header::new(http::header::AUTHORIZATION);
        assert_eq!(extractor.extract(&parts(http::Request::builder())), None);
        let empty = parts(http::Request::builder().header("authorization", ""));
        assert!(extractor.extract(&empty).is_some());
    }

    #[test]
    fn header_hashes_raw_non_utf8_and_64_kib_values() {
        let extractor = Header::new(http::header::AUTHORIZATION);
        let mut p = parts(http::Request::builder());
        p.headers.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_bytes(b"\xff\xfe secret").unwrap(),
        );
        let key = key_str(extractor.extract(&p));
        assert_eq!(key.len(), "hdr:authorization:".len() + 32);
        let huge = vec![b'k'; 64 * 1024];
        p.headers.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_bytes(&huge).unwrap(),
        );
        assert_eq!(key_str(extractor.extract(&p)).len(), key.len());
    }

    #[test]
    fn header_uses_the_first_occurrence() {
        let p = parts(
            http::Request::builder()
                .header("x-api-key", "first")
                .header("x-api-key", "second"),
        );
        let only_first = parts(http::Request::builder().header("x-api-key", "first"));
        let extractor = Header::parse("x-api-key").unwrap();
        assert_eq!(extractor.extract(&p), extractor.extract(&only_first));
    }

    #[test]
    fn header_parse_rejects_invalid_names() {
        assert!(Header::parse("bad header").is_err());
        assert!(Header::parse("").is_err());
        assert_eq!(Header::parse("X-Tenant").unwrap().name(), "x-tenant");
    }

    #[test]
    fn path_is_the_path_without_query() {
        let p = parts(http::Request::builder().uri("https://example.com/users/1?page=2"));
        assert_eq!(key_str(Path.extract(&p)), "path:/users/1");
        let root = parts(http::Request::builder().uri("*"));
        assert_eq!(key_str(Path.extract(&root)), "path:*");
    }

    #[test]
    fn method_is_the_method_name() {
        let p = parts(http::Request::builder().method("PATCH"));
        assert_eq!(key_str(Method.extract(&p)), "method:PATCH");
        let custom = parts(http::Request::builder().method("PURGE"));
        assert_eq!(key_str(Method.extract(&custom)), "method:PURGE");
    }

    #[cfg(feature = "axum")]
    #[test]
    fn matched_path_is_none_outside_a_matched_route() {
        let p = parts(http::Request::builder().uri("/users/1"));
        assert_eq!(MatchedPath.extract(&p), None);
    }
}
