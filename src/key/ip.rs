//! The peer address of a connection and the IP key format.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::request::Parts;

use super::KeyExtractor;

/// The IPv6 prefix length that [`PeerIp`](struct@PeerIp) and [`ClientIp`](super::ClientIp)
/// group addresses by unless told otherwise: one key per `/64`, the smallest
/// network a single site or host is usually given.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// The address of the connection's peer, read from the request extensions.
///
/// The sources are tried in this order; the first one present wins:
///
/// 1. axum's `ConnectInfo<SocketAddr>` (feature `axum`; serve the router
///    with `into_make_service_with_connect_info::<SocketAddr>()`), then
///    axum's `MockConnectInfo<SocketAddr>` (what that layer inserts in tests),
///    the same order as axum's own `ConnectInfo` extractor;
/// 2. tonic's `TcpConnectInfo` with a remote address (feature `tonic`; tonic
///    inserts it for plain TCP and for TLS connections);
/// 3. a plain [`SocketAddr`] extension, for any other server (insert it
///    yourself where the connection is accepted).
///
/// `None` when none of them is there: the server was not set up to record
/// peer addresses (for example axum's `serve` without connect info, or a
/// Unix socket).
pub fn peer_addr(parts: &Parts) -> Option<SocketAddr> {
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::connect_info::MockConnectInfo(addr)) =
        parts
            .extensions
            .get::<axum::extract::connect_info::MockConnectInfo<SocketAddr>>()
    {
        return Some(*addr);
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = parts
        .extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(tonic::transport::server::TcpConnectInfo::remote_addr)
    {
        return Some(addr);
    }
    parts.extensions.get::<SocketAddr>().copied()
}

/// Key: the address of the connection's peer, as `ip:<address>`.
///
/// Use it when clients connect directly; behind a proxy or load balancer
/// every request would share the proxy's address, so use
/// [`ClientIp`](super::ClientIp) there. The peer is found by [`peer_addr`];
/// without one the key is `None` (a misconfigured server, which the layer
/// reports).
///
/// IPv4-mapped IPv6 addresses (`::ffff:192.0.2.1`) count as the IPv4
/// address. IPv6 addresses are grouped by network, `/64` by default, so a
/// host cannot get a fresh limit by rotating through the addresses of its
/// subnet: `2001:db8:1:2::7` has the key `ip:2001:db8:1:2::/64`.
///
/// `PeerIp` is both a type and a constant of that type with the default
/// settings, so it can be passed as is:
///
/// ```
/// use std::net::SocketAddr;
/// use tower_redis_ratelimit::key::{KeyExtractor, PeerIp};
///
/// let (mut parts, ()) = http::Request::new(()).into_parts();
/// parts.extensions.insert("[2001:db8:1:2::7]:443".parse::<SocketAddr>()?);
/// assert_eq!(PeerIp.extract(&parts).as_deref(), Some(&b"ip:2001:db8:1:2::/64"[..]));
/// assert_eq!(
///     PeerIp.ipv6_prefix(48).extract(&parts).as_deref(),
///     Some(&b"ip:2001:db8:1::/48"[..]),
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerIp {
    ipv6_prefix: u8,
}

/// [`PeerIp`](struct@PeerIp) with the default settings (IPv6 grouped by `/64`).
#[allow(non_upper_case_globals)]
pub const PeerIp: PeerIp = PeerIp::new();

impl PeerIp {
    /// The peer address key with the default settings (IPv6 grouped by `/64`).
    pub const fn new() -> Self {
        PeerIp {
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// Groups IPv6 peers by networks of this prefix length (default `64`;
    /// `128` keys every address on its own; values above `128` count as `128`).
    pub const fn ipv6_prefix(mut self, len: u8) -> Self {
        self.ipv6_prefix = clamp_prefix(len);
        self
    }

    /// The key this extractor gives a peer at `ip` (`ip:<address>`, IPv6
    /// grouped by [`ipv6_prefix`](Self::ipv6_prefix)): what to pass to the
    /// limiter's [`block`](crate::RateLimiter::block),
    /// [`reset`](crate::RateLimiter::reset) or
    /// [`storage_keys`](crate::RateLimiter::storage_keys) for that client.
    ///
    /// ```
    /// use tower_redis_ratelimit::key::PeerIp;
    ///
    /// assert_eq!(PeerIp.key_of("192.0.2.1".parse()?), b"ip:192.0.2.1");
    /// assert_eq!(PeerIp.key_of("::ffff:192.0.2.1".parse()?), b"ip:192.0.2.1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_of(&self, ip: IpAddr) -> Vec<u8> {
        ip_key(ip, self.ipv6_prefix)
    }
}

impl Default for PeerIp {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyExtractor for PeerIp {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        peer_addr(parts).map(|addr| ip_key(addr.ip(), self.ipv6_prefix))
    }

    fn extract_into(&self, parts: &Parts, key: &mut Vec<u8>) -> bool {
        peer_addr(parts).is_some_and(|addr| {
            write_ip_key(addr.ip(), self.ipv6_prefix, key);
            true
        })
    }

    fn missing_hint(&self, _parts: &Parts) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed(concat!("PeerIp ", no_peer_hint!()))
    }

    fn missing_cause(&self, _parts: &Parts) -> super::MissingCause {
        super::MissingCause::Server
    }
}

/// What to do when an IP extractor finds no peer address.
macro_rules! no_peer_hint {
    () => {
        "found no peer address: serve with \
         `into_make_service_with_connect_info::<SocketAddr>()` (axum), use tonic's \
         server (feature `tonic`), or insert the `SocketAddr` as a request extension"
    };
}
pub(super) use no_peer_hint;

pub(super) const fn clamp_prefix(len: u8) -> u8 {
    if len > 128 { 128 } else { len }
}

/// The address a client is counted as: IPv4-mapped IPv6 becomes IPv4.
pub(super) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        IpAddr::V4(_) => ip,
    }
}

/// `ip:<v4>`, `ip:<v6 network>/<len>`, or `ip:<v6>` when `len` is 128.
/// Per octet: `.` and its decimal digits (zero-padded after), and how many
/// of those four bytes count.
const OCTETS: [([u8; 4], usize); 256] = {
    let mut table = [([0; 4], 0); 256];
    let mut i = 0;
    while i < 256 {
        let o = i as u8;
        table[i] = if o >= 100 {
            ([b'.', b'0' + o / 100, b'0' + o / 10 % 10, b'0' + o % 10], 4)
        } else if o >= 10 {
            ([b'.', b'0' + o / 10, b'0' + o % 10, 0], 3)
        } else {
            ([b'.', b'0' + o, 0, 0], 2)
        };
        i += 1;
    }
    table
};

pub(super) fn ip_key(ip: IpAddr, ipv6_prefix: u8) -> Vec<u8> {
    // (the longest: `ip:` and a full IPv6 address with `/128`)
    let mut key = Vec::with_capacity(46);
    write_ip_key(ip, ipv6_prefix, &mut key);
    key
}

/// Writes the key of `ip` (see [`ip_key`]) at the end of `key`.
pub(super) fn write_ip_key(ip: IpAddr, ipv6_prefix: u8, key: &mut Vec<u8>) {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            // `ip:` and four decimal octets, without the formatting machinery:
            // each octet's bytes (dot first) written whole, then counted
            let mut text = [0; 18];
            text[..3].copy_from_slice(b"ip:");
            let [a, b, c, d] = v4.octets();
            let (first, n) = OCTETS[usize::from(a)];
            text[3..6].copy_from_slice(&first[1..]);
            let mut len = 3 + n - 1;
            for octet in [b, c, d] {
                let (dotted, n) = OCTETS[usize::from(octet)];
                text[len..len + 4].copy_from_slice(&dotted);
                len += n;
            }
            key.extend_from_slice(&text[..len]);
        }
        IpAddr::V6(v6) => {
            use std::io::Write as _;
            let len = clamp_prefix(ipv6_prefix);
            // (writing to a Vec cannot fail)
            let _ = if len == 128 {
                write!(key, "ip:{v6}")
            } else {
                let mask = if len == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(len))
                };
                let net = Ipv6Addr::from(u128::from(v6) & mask);
                write!(key, "ip:{net}/{len}")
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> Parts {
        http::Request::new(()).into_parts().0
    }

    fn key(ip: &str, len: u8) -> String {
        let ip: IpAddr = ip.parse().unwrap();
        String::from_utf8(ip_key(ip, len)).unwrap()
    }

    #[test]
    fn ipv4_key_is_the_address() {
        assert_eq!(key("203.0.113.7", 64), "ip:203.0.113.7");
        for ip in ["0.0.0.0", "255.255.255.255", "10.0.100.9"] {
            assert_eq!(key(ip, 64), format!("ip:{ip}"));
        }
        // every octet value in every position, beside short and long ones
        for o in 0..=255u8 {
            for v4 in [
                [o, 1, 22, 255],
                [9, o, 100, 0],
                [255, 10, o, 7],
                [0, 99, 200, o],
            ] {
                let ip = std::net::Ipv4Addr::from(v4);
                assert_eq!(ip_key(IpAddr::V4(ip), 64), format!("ip:{ip}").into_bytes());
            }
        }
    }

    #[test]
    fn ipv4_mapped_ipv6_counts_as_ipv4() {
        assert_eq!(key("::ffff:203.0.113.7", 64), "ip:203.0.113.7");
        assert_eq!(key("::ffff:cb00:7107", 128), "ip:203.0.113.7");
    }

    #[test]
    fn ipv6_hosts_of_one_subnet_share_a_key() {
        assert_eq!(key("2001:db8:1:2::1", 64), "ip:2001:db8:1:2::/64");
        assert_eq!(
            key("2001:db8:1:2:ffff:ffff:ffff:ffff", 64),
            "ip:2001:db8:1:2::/64"
        );
        assert_ne!(key("2001:db8:1:3::1", 64), key("2001:db8:1:2::1", 64));
    }

    #[test]
    fn ipv6_prefix_is_configurable_and_clamped() {
        assert_eq!(key("2001:db8:1:2::1", 48), "ip:2001:db8:1::/48");
        assert_eq!(key("2001:db8:1:2::1", 128), "ip:2001:db8:1:2::1");
        assert_eq!(key("2001:db8:1:2::1", 200), "ip:2001:db8:1:2::1");
        assert_eq!(key("2001:db8:1:2::1", 0), "ip:::/0");
        assert_eq!(key("2001:db8:1:2::1", 1), "ip:::/1");
        assert_eq!(key("ffff::1", 1), "ip:8000::/1");
        assert_eq!(key("2001:db8::ff", 127), "ip:2001:db8::fe/127");
    }

    #[test]
    fn peer_ip_reads_a_socket_addr_extension() {
        let mut parts = parts();
        parts
            .extensions
            .insert(SocketAddr::from(([203, 0, 113, 7], 5000)));
        assert_eq!(PeerIp.extract(&parts).unwrap(), b"ip:203.0.113.7");
    }

    #[test]
    fn peer_ip_groups_ipv6_and_unmaps_ipv4() {
        let mut parts = parts();
        parts
            .extensions
            .insert("[2001:db8:1:2::99]:1".parse::<SocketAddr>().unwrap());
        assert_eq!(PeerIp.extract(&parts).unwrap(), b"ip:2001:db8:1:2::/64");
        assert_eq!(
            PeerIp.ipv6_prefix(56).extract(&parts).unwrap(),
            b"ip:2001:db8:1::/56"
        );
        parts
            .extensions
            .insert("[::ffff:198.51.100.1]:1".parse::<SocketAddr>().unwrap());
        assert_eq!(PeerIp::new().extract(&parts).unwrap(), b"ip:198.51.100.1");
    }

    #[test]
    fn peer_ip_without_a_peer_address_is_none() {
        assert_eq!(PeerIp.extract(&parts()), None);
        assert_eq!(peer_addr(&parts()), None);
    }

    #[cfg(feature = "axum")]
    #[test]
    fn peer_ip_prefers_axum_connect_info() {
        let mut parts = parts();
        parts
            .extensions
            .insert(SocketAddr::from(([192, 0, 2, 1], 1)));
        parts
            .extensions
            .insert(axum::extract::ConnectInfo(SocketAddr::from((
                [203, 0, 113, 9],
                2,
            ))));
        assert_eq!(PeerIp.extract(&parts).unwrap(), b"ip:203.0.113.9");
    }

    #[cfg(feature = "axum")]
    #[test]
    fn peer_ip_reads_axum_mock_connect_info_after_the_real_one() {
        use axum::extract::connect_info::MockConnectInfo;
        let mut parts = parts();
        parts
            .extensions
            .insert(MockConnectInfo(SocketAddr::from(([198, 51, 100, 1], 1))));
        assert_eq!(PeerIp.extract(&parts).unwrap(), b"ip:198.51.100.1");
        parts
            .extensions
            .insert(axum::extract::ConnectInfo(SocketAddr::from((
                [203, 0, 113, 9],
                2,
            ))));
        assert_eq!(PeerIp.extract(&parts).unwrap(), b"ip:203.0.113.9");
    }

    #[cfg(feature = "tonic")]
    #[test]
    fn peer_ip_reads_tonic_tcp_connect_info() {
        use tonic::transport::server::TcpConnectInfo;
        let mut parts = parts();
        parts.extensions.insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(SocketAddr::from(([203, 0, 113, 10], 3))),
        });
        assert_eq!(PeerIp.extract(&parts).unwrap(), b"ip:203.0.113.10");

        // Connect info without a remote address falls through to the next source.
        let mut parts = self::parts();
        parts.extensions.insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: None,
        });
        assert_eq!(PeerIp.extract(&parts), None);
        parts
            .extensions
            .insert(SocketAddr::from(([192, 0, 2, 2], 4)));
        assert_eq!(PeerIp.extract(&parts).unwrap(), b"ip:192.0.2.2");
    }
}
