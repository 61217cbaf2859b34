//! Key extractors: which client a request counts against.
//!
//! A [`KeyExtractor`] reads the request head and returns the key bytes, or
//! `None` when the request has no such key (the layer's missing-key policy
//! decides what happens then). Closures `Fn(&Parts) -> Option<K>` with
//! `K: Into<Vec<u8>>` are extractors too.
//!
//! The extractors are [`PeerIp`](struct@PeerIp), [`ClientIp`], [`Header`],
//! [`Path`], `MatchedPath` (feature `axum`), [`Method`], [`Global`], tuples
//! of them and closures; the [keys chapter](crate::guide::keys) of the guide
//! has the table of each one's key, an example, and when it finds none (its
//! [`MissingCause`]).
//!
//! Each extractor has a `key_of` giving the key it would find for a given
//! value (an address, a header value, a path...), for admin code that
//! blocks, resets or inspects a client:
//! [`PeerIp::key_of`](struct@PeerIp), [`ClientIp::key_of`],
//! [`Header::key_of`], [`Path::key_of`], `MatchedPath::key_of`,
//! [`Method::key_of`], [`Global::key_of`] and [`tuple_key`] for tuples.
//!
//! Peer addresses come from axum's `ConnectInfo<SocketAddr>` or `MockConnectInfo` (feature
//! `axum`), tonic's `TcpConnectInfo` (feature `tonic`) or a plain
//! [`SocketAddr`](std::net::SocketAddr) extension; see [`peer_addr`].
//!
//! ```
//! use std::net::SocketAddr;
//! use tower_redis_ratelimit::key::{ClientIp, KeyExtractor, Method, PeerIp};
//!
//! // Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For.
//! let client_ip = ClientIp::new().trust_cidrs(["10.0.0.0/8"])?;
//!
//! let (mut parts, ()) = http::Request::builder()
//!     .header("x-forwarded-for", "198.51.100.9, 10.1.2.3")
//!     .body(())?
//!     .into_parts();
//! parts.extensions.insert(SocketAddr::from(([10, 0, 0, 1], 443))); // the balancer
//!
//! assert_eq!(client_ip.extract(&parts).as_deref(), Some(&b"ip:198.51.100.9"[..]));
//! assert_eq!(PeerIp.extract(&parts).as_deref(), Some(&b"ip:10.0.0.1"[..]));
//! assert_eq!(
//!     (client_ip, Method).extract(&parts).as_deref(),
//!     Some(&b"15:ip:198.51.100.9,10:method:GET,"[..]),
//! );
//!
//! // Any closure over the request head is an extractor.
//! let tenant = |parts: &http::request::Parts| {
//!     parts.headers.get("x-tenant").map(|v| v.as_bytes().to_vec())
//! };
//! assert_eq!(tenant.extract(&parts), None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Cow;

use http::request::Parts;

mod client_ip;
mod compose;
mod forwarded;
mod ip;
mod request;

pub use client_ip::{ClientIp, DEFAULT_MAX_HOPS, ForwardedHeader, InvalidCidr};
pub use compose::tuple_key;
pub use forwarded::{Hop, parse_forwarded, parse_x_forwarded_for};
pub use ip::{DEFAULT_IPV6_PREFIX, PeerIp, peer_addr};
#[cfg(feature = "axum")]
pub use request::MatchedPath;
pub use request::{Header, Method, Path};

/// Why a request has no key: whose mistake it is, which decides the
/// middleware's default answer (see
/// [`MissingKey`](crate::middleware::MissingKey)).
///
/// A request the client could have sent with its key (it left out its API
/// key) is the client's mistake, answered with a 4xx; a request no client
/// could have given a key (the server records no peer address) is the
/// server's, answered with a 500 and logged. Ordered by gravity:
/// `Request < Credential < Server`.
///
/// ```
/// use http::StatusCode;
/// use tower_redis_ratelimit::key::MissingCause;
///
/// assert_eq!(MissingCause::Credential.status(), StatusCode::UNAUTHORIZED);
/// assert_eq!(MissingCause::Request.status(), StatusCode::BAD_REQUEST);
/// assert_eq!(MissingCause::Server.status(), StatusCode::INTERNAL_SERVER_ERROR);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum MissingCause {
    /// The request lacks something the key is made of, other than a
    /// credential (a tenant header, a route): `400 Bad Request`, gRPC
    /// `INVALID_ARGUMENT`. The default of extractors that do not say.
    Request,
    /// The request lacks the credential the key is made of (an API key or
    /// `Authorization` header): `401 Unauthorized`, gRPC `UNAUTHENTICATED`.
    /// The 401 carries no `WWW-Authenticate` challenge: the limiter does
    /// not know the application's scheme (add it in the deny response of
    /// an authentication layer in front if clients need it).
    Credential,
    /// The server is set up so that no request has a key (no peer address
    /// recorded for [`PeerIp`](struct@PeerIp) or [`ClientIp`]): `500
    /// Internal Server Error`, gRPC `INTERNAL`, logged at ERROR once per layer.
    Server,
}

impl MissingCause {
    /// The HTTP status the middleware answers this cause with by default.
    pub fn status(self) -> http::StatusCode {
        match self {
            Self::Request => http::StatusCode::BAD_REQUEST,
            Self::Credential => http::StatusCode::UNAUTHORIZED,
            Self::Server => http::StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Derives the rate-limit key of a request from its head.
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key of this request, or `None` if it has none.
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>>;

    /// Writes the key of this request into `key` (empty on entry), or
    /// returns false if it has none (what it wrote is then ignored). The
    /// middleware calls this instead of [`extract`](Self::extract), with a
    /// buffer it reuses from request to request; the default moves
    /// `extract`'s key in. An extractor that can write its key in place
    /// overrides it, so that a request's key costs no allocation; the two
    /// must give the same key.
    fn extract_into(&self, parts: &Parts, key: &mut Vec<u8>) -> bool {
        match self.extract(parts) {
            Some(k) => {
                *key = k;
                true
            }
            None => false,
        }
    }

    /// Why [`extract`](Self::extract) found no key in this request, and
    /// what would fix it: the middleware puts it in the body of its
    /// rejection and in its log. Only called after `extract` returned `None`.
    ///
    /// The default names the extractor's type; [`PeerIp`](struct@PeerIp) and
    /// [`ClientIp`] say how to serve with connect info, [`Header`] names its
    /// header.
    fn missing_hint(&self, parts: &Parts) -> Cow<'static, str> {
        let _ = parts;
        Cow::Owned(format!(
            "the key extractor `{}` found no key in this request",
            std::any::type_name::<Self>()
        ))
    }

    /// Whose mistake it is that [`extract`](Self::extract) found no key in
    /// this request: the middleware's default answer follows from it
    /// (401, 400 or 500, see [`MissingCause`]). Only called after `extract`
    /// returned `None`.
    ///
    /// The default is [`MissingCause::Request`] (400): the request lacks
    /// what the key is made of. An extractor that can miss a key because of
    /// how the server is set up says [`MissingCause::Server`], as
    /// [`PeerIp`](struct@PeerIp) and [`ClientIp`] do.
    fn missing_cause(&self, parts: &Parts) -> MissingCause {
        let _ = parts;
        MissingCause::Request
    }
}

impl<F, K> KeyExtractor for F
where
    F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
    K: Into<Vec<u8>>,
{
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        self(parts).map(Into::into)
    }

    fn missing_hint(&self, _parts: &Parts) -> Cow<'static, str> {
        Cow::Borrowed("the key extractor (a closure) returned no key for this request")
    }
}

/// One key for every request: a limit on the whole service.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl Global {
    /// The key this extractor gives every request, `global`: what to pass
    /// to the limiter's [`reset`](crate::RateLimiter::reset) or
    /// [`get`](crate::RateLimiter::get).
    pub fn key_of(&self) -> Vec<u8> {
        b"global".to_vec()
    }
}

impl KeyExtractor for Global {
    fn extract(&self, _parts: &Parts) -> Option<Vec<u8>> {
        Some(b"global".to_vec())
    }

    fn extract_into(&self, _parts: &Parts, key: &mut Vec<u8>) -> bool {
        key.extend_from_slice(b"global");
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_is_one_key_for_every_request() {
        let a = http::Request::get("/a").body(()).unwrap().into_parts().0;
        let b = http::Request::post("/b").body(()).unwrap().into_parts().0;
        assert_eq!(Global.extract(&a).unwrap(), b"global");
        assert_eq!(Global.extract(&a), Global.extract(&b));
    }

    #[test]
    fn closures_are_extractors() {
        let parts = http::Request::get("/a").body(()).unwrap().into_parts().0;
        let by_path = |p: &Parts| Some(p.uri.path().to_owned());
        assert_eq!(by_path.extract(&parts).unwrap(), b"/a");
        let never = |_: &Parts| None::<&'static str>;
        assert_eq!(never.extract(&parts), None);
    }

    #[test]
    fn extractors_are_object_safe() {
        let boxed: Vec<Box<dyn KeyExtractor>> = vec![Box::new(Global), Box::new(PeerIp)];
        let parts = http::Request::get("/").body(()).unwrap().into_parts().0;
        assert_eq!(boxed[0].extract(&parts).unwrap(), b"global");
        assert_eq!(boxed[1].extract(&parts), None);
    }

    #[test]
    fn extract_into_gives_what_extract_gives() {
        let extractors: Vec<(&str, Box<dyn KeyExtractor>)> = vec![
            ("global", Box::new(Global)),
            ("peer", Box::new(PeerIp)),
            ("peer /48", Box::new(PeerIp::new().ipv6_prefix(48))),
            (
                "client",
                Box::new(ClientIp::new().trust_cidrs(["10.0.0.0/8"]).unwrap()),
            ),
            ("method", Box::new(Method)),
            ("pair", Box::new((PeerIp, Method))),
            (
                "closure",
                Box::new(|p: &Parts| p.headers.get("x-k").map(|v| v.as_bytes().to_vec())),
            ),
        ];
        let peers: [Option<&str>; 5] = [
            None,
            Some("203.0.113.7:1"),
            Some("10.0.0.1:2"),
            Some("[2001:db8:1:2:3:4:5:6]:3"),
            Some("[::ffff:192.0.2.1]:4"),
        ];
        for peer in peers {
            for forwarded in [None, Some("198.51.100.9, 10.1.2.3"), Some("2001:db8::9")] {
                let mut b = http::Request::get("/").header("x-k", "k1");
                if let Some(f) = forwarded {
                    b = b.header("x-forwarded-for", f);
                }
                let (mut parts, ()) = b.body(()).unwrap().into_parts();
                if let Some(p) = peer {
                    parts
                        .extensions
                        .insert(p.parse::<std::net::SocketAddr>().unwrap());
                }
                for (name, e) in &extractors {
                    let mut key = Vec::new();
                    let found = e.extract_into(&parts, &mut key);
                    assert_eq!(
                        found.then_some(key),
                        e.extract(&parts),
                        "{name}, peer {peer:?}, forwarded {forwarded:?}"
                    );
                }
            }
        }
    }
}
