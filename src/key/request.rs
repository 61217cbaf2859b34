//! Keys from the request line and headers.

use std::borrow::Cow;

use http::HeaderName;
use http::header::InvalidHeaderName;
use http::request::Parts;

use super::{KeyExtractor, MissingCause};

/// Key: a hash of a request header's value, as `hdr:<name>:<hex>`, for
/// limits per API key, token or tenant.
///
/// The value never reaches the store: the key holds the first 128 bits of
/// its SHA-256 digest in hex (32 characters), so a read of Redis does not
/// reveal API keys. The raw bytes are hashed as sent (no trimming, any
/// bytes). The first occurrence of the header is used; a request without
/// the header has no key (`None`), and neither has one whose value is empty
/// or only spaces and tabs (`x-api-key:` sent blank is no credential, not
/// the key of the empty string that every such request would share).
///
/// A request without the header (or with it blank) is taken for one without
/// its credential:
/// the middleware answers it `401 Unauthorized` by default (gRPC
/// `UNAUTHENTICATED`; see [`MissingCause`]). For a header that is not a
/// credential (a tenant or client name), say
/// [`.when_missing(MissingCause::Request)`](Self::when_missing) to answer 400.
/// [`key_of`](Self::key_of) gives a value's key, for admin code.
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
    missing: MissingCause,
}

impl Header {
    /// Keys requests by the value of this header (a credential: a request
    /// without it is answered 401 by default).
    pub fn new(name: HeaderName) -> Self {
        Header {
            name,
            missing: MissingCause::Credential,
        }
    }

    /// Says whose mistake a request without the header is (default
    /// [`MissingCause::Credential`], answered 401): `MissingCause::Request`
    /// for a header that is not a credential (400), `MissingCause::Server`
    /// for one a proxy of yours must always set (500, logged).
    pub fn when_missing(mut self, cause: MissingCause) -> Self {
        self.missing = cause;
        self
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

    /// The key this extractor gives a request whose header holds `value`
    /// (the raw bytes, as sent): `hdr:<name>:<32 hex digits>`. What to pass
    /// to the limiter's [`block`](crate::RateLimiter::block),
    /// [`reset`](crate::RateLimiter::reset) or
    /// [`storage_keys`](crate::RateLimiter::storage_keys) for that API key.
    ///
    /// ```
    /// use tower_redis_ratelimit::key::{Header, KeyExtractor};
    ///
    /// let api_key = Header::parse("x-api-key")?;
    /// let (parts, ()) = http::Request::builder()
    ///     .header("x-api-key", "sk_live_secret")
    ///     .body(())?
    ///     .into_parts();
    /// assert_eq!(api_key.extract(&parts), Some(api_key.key_of("sk_live_secret")));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_of(&self, value: impl AsRef<[u8]>) -> Vec<u8> {
        let digest = crate::digest::hash_hex(value.as_ref());
        format!("hdr:{}:{digest}", self.name).into_bytes()
    }
}

impl KeyExtractor for Header {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        let value = parts.headers.get(&self.name)?.as_bytes();
        if value.iter().all(|b| matches!(b, b' ' | b'\t')) {
            return None; // blank: no credential
        }
        Some(self.key_of(value))
    }

    fn missing_hint(&self, _parts: &Parts) -> Cow<'static, str> {
        Cow::Owned(format!(
            "Header: the request has no `{}` header, or an empty one",
            self.name
        ))
    }

    fn missing_cause(&self, _parts: &Parts) -> MissingCause {
        self.missing
    }
}

/// Key: the request path, as `path:<path>` (no query string), exactly as
/// sent: `/a` and `/a/` differ, and so do `/users/1` and `/users/2` (see
/// [`MatchedPath`] to share a limit per route). Always present.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Path;

impl Path {
    /// The key this extractor gives a request for `path` (without the
    /// query): `path:<path>`.
    ///
    /// ```
    /// assert_eq!(tower_redis_ratelimit::key::Path.key_of("/login"), b"path:/login");
    /// ```
    pub fn key_of(&self, path: &str) -> Vec<u8> {
        [b"path:", path.as_bytes()].concat()
    }
}

impl KeyExtractor for Path {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        Some(self.key_of(parts.uri.path()))
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
impl MatchedPath {
    /// The key this extractor gives a request that matched the route
    /// `template` (as written in the router): `route:<template>`.
    ///
    /// ```
    /// use tower_redis_ratelimit::key::MatchedPath;
    ///
    /// assert_eq!(MatchedPath.key_of("/users/{id}"), b"route:/users/{id}");
    /// ```
    pub fn key_of(&self, template: &str) -> Vec<u8> {
        [b"route:", template.as_bytes()].concat()
    }
}

// A request no route matched is taken for the client's mistake (a path the
// router does not have): the default `MissingCause::Request`, answered 400.
// A layer around the router, where no request ever has a route, shows
// itself at once: every request is answered so.
#[cfg(feature = "axum")]
impl KeyExtractor for MatchedPath {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        let matched = parts.extensions.get::<axum::extract::MatchedPath>()?;
        Some(self.key_of(matched.as_str()))
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

impl Method {
    /// The key this extractor gives a request of `method`: `method:<METHOD>`.
    ///
    /// ```
    /// use tower_redis_ratelimit::key::Method;
    ///
    /// assert_eq!(Method.key_of(&http::Method::POST), b"method:POST");
    /// ```
    pub fn key_of(&self, method: &http::Method) -> Vec<u8> {
        [b"method:", method.as_str().as_bytes()].concat()
    }
}

impl KeyExtractor for Method {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        Some(self.key_of(&parts.method))
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
    fn header_missing_or_blank_is_none() {
        let extractor = Header::new(http::header::AUTHORIZATION);
        assert_eq!(extractor.extract(&parts(http::Request::builder())), None);
        for blank in ["", " ", "\t", " \t  "] {
            let p = parts(http::Request::builder().header("authorization", blank));
            assert_eq!(extractor.extract(&p), None, "{blank:?}");
        }
        let p = parts(http::Request::builder().header("authorization", " k "));
        assert_eq!(extractor.extract(&p), Some(extractor.key_of(" k ")));
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
