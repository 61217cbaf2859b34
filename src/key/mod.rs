//! Key extractors: which client a request counts against.
//!
//! A [`KeyExtractor`] reads the request head and returns the key bytes, or
//! `None` when the request has no such key (the layer's missing-key policy
//! decides what happens then). Closures `Fn(&Parts) -> Option<K>` with
//! `K: Into<Vec<u8>>` are extractors too.
//!
//! | extractor | key | `None` when |
//! |---|---|---|
//! | [`PeerIp`](struct@PeerIp) | `ip:203.0.113.7`, `ip:2001:db8:1:2::/64` | no peer address recorded |
//! | [`ClientIp`] | the same, for the client behind trusted proxies | no peer address recorded |
//! | [`Header`] | `hdr:x-api-key:<hex digest>` | header absent |
//! | [`Path`] | `path:/users/1` | never |
//! | `MatchedPath` (feature `axum`) | `route:/users/{id}` | no route matched yet |
//! | [`Method`] | `method:GET` | never |
//! | [`Global`] | `global` | never |
//! | `(A, B)`, `(A, B, C)`, `(A, B, C, D)` | each part length-prefixed: `6:global,10:method:GET,` | any part is `None` |
//! | closures | what they return | they return `None` |
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
pub use forwarded::{Hop, parse_forwarded, parse_x_forwarded_for};
pub use ip::{DEFAULT_IPV6_PREFIX, PeerIp, peer_addr};
#[cfg(feature = "axum")]
pub use request::MatchedPath;
pub use request::{Header, Method, Path};

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
