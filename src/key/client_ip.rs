//! The client address behind trusted proxies.

use std::fmt;
use std::net::IpAddr;
use std::ops::ControlFlow;

use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};
use http::request::Parts;
use ipnet::{IpNet, Ipv4Net};

use super::KeyExtractor;
use super::forwarded::{Hop, forwarded_rev, x_forwarded_for_rev};
use super::ip::{DEFAULT_IPV6_PREFIX, canonical, clamp_prefix, ip_key, peer_addr, write_ip_key};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// How many hops of a forwarding chain [`ClientIp`] examines unless told
/// otherwise.
pub const DEFAULT_MAX_HOPS: usize = 32;

/// A request header that carries the client address through proxies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`: each proxy appends the
    /// address it received the request from.
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711"`: each
    /// proxy appends an element; its `for=` parameter is the address.
    Forwarded,
    /// `X-Real-IP: client`: one address set by the proxy (read like
    /// `X-Forwarded-For`, so a list is accepted too).
    XRealIp,
}

impl ForwardedHeader {
    /// The header's name.
    pub fn name(self) -> HeaderName {
        match self {
            Self::XForwardedFor => X_FORWARDED_FOR,
            Self::Forwarded => FORWARDED,
            Self::XRealIp => X_REAL_IP,
        }
    }
}

/// Key: the client's address as `ip:<address>`, taken from a forwarding
/// header when the request came through a trusted proxy.
///
/// # How the address is found
///
/// 1. The peer address comes from the same sources as [`PeerIp`](struct@super::PeerIp)
///    (see [`peer_addr`](super::peer_addr)). **Without a peer address the key
///    is `None`**: headers cannot be believed when it is unknown who sent
///    them, and a missing peer is a server set-up error.
/// 2. If the peer is not in a trusted network (or none was configured),
///    the peer is the client. Headers are ignored, so a client connecting
///    directly cannot spoof its address.
/// 3. Otherwise the first header of [`headers`](Self::headers) that the
///    request carries decides (default: `X-Forwarded-For` only; see below).
///    Its hops are walked from the right (nearest) to the left, over every
///    occurrence of the header, last occurrence first:
///    - a trusted address is skipped and remembered;
///    - the first untrusted address is the client;
///    - an entry that is not an address (garbage, non-UTF-8, over 64 bytes,
///      `unknown`, an obfuscated identifier, a `Forwarded` element without
///      `for=` or with broken syntax) **stops the walk**: the client is the
///      last address remembered, that is the nearest trusted hop to the right
///      of the bad entry, or the peer itself when the bad entry is the
///      rightmost. Its clients then share one limit: stricter, never
///      spoofable, because nothing to the left of a bad entry is believed;
///    - if every hop is trusted, the client is the leftmost one;
///    - at most [`max_hops`](Self::max_hops) entries are examined (default
///      32); if all of them were trusted, the client is the leftmost examined.
///
///    Empty list entries (`a,,b`) are ignored; a header that is present but
///    holds no entry gives the peer.
/// 4. The address is normalised as in [`PeerIp`](struct@super::PeerIp):
///    IPv4-mapped IPv6 becomes IPv4 (for the trust check too) and IPv6 is
///    grouped by [`ipv6_prefix`](Self::ipv6_prefix) (default `/64`).
///
/// # Which header
///
/// Configure only the headers **your proxies set or overwrite**. A header a
/// proxy merely passes through is written by the client, and believing it
/// lets a client pick a new address for every request. For that reason the
/// default reads `X-Forwarded-For` alone (what nginx, HAProxy, Envoy, cloud
/// load balancers and CDNs maintain); behind a proxy that writes RFC 7239
/// `Forwarded`, say so with `.headers([ForwardedHeader::Forwarded])`. When
/// several are listed, the first one present on the request is used alone;
/// headers are never mixed, and a present header that yields nothing usable
/// does not fall through to the next one.
///
/// ```
/// use std::net::SocketAddr;
/// use tower_redis_ratelimit::key::{ClientIp, ForwardedHeader, KeyExtractor};
///
/// let client_ip = ClientIp::new()
///     .trust_cidrs(["10.0.0.0/8", "fd00::/8"])?
///     .headers([ForwardedHeader::Forwarded, ForwardedHeader::XForwardedFor]);
///
/// let (mut parts, ()) = http::Request::builder()
///     .header("forwarded", r#"for=192.0.2.1, for="[2001:db8:1:2::7]:4711", for=10.1.1.1"#)
///     .body(())?
///     .into_parts();
/// parts.extensions.insert(SocketAddr::from(([10, 0, 0, 2], 443))); // the proxy
/// assert_eq!(client_ip.extract(&parts).as_deref(), Some(&b"ip:2001:db8:1:2::/64"[..]));
///
/// // The same header from an untrusted peer is ignored.
/// parts.extensions.insert(SocketAddr::from(([203, 0, 113, 5], 443)));
/// assert_eq!(client_ip.extract(&parts).as_deref(), Some(&b"ip:203.0.113.5"[..]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIp {
    trusted: Vec<IpNet>,
    headers: Vec<ForwardedHeader>,
    ipv6_prefix: u8,
    max_hops: usize,
}

impl ClientIp {
    /// A client address key that trusts no proxy yet (so it behaves as
    /// [`PeerIp`](struct@super::PeerIp) until [`trust`](Self::trust) is called),
    /// reads `X-Forwarded-For`, groups IPv6 by `/64` and examines at most 32
    /// hops.
    pub fn new() -> Self {
        ClientIp {
            trusted: Vec::new(),
            headers: vec![ForwardedHeader::XForwardedFor],
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            max_hops: DEFAULT_MAX_HOPS,
        }
    }

    /// Trusts the proxies in this network: their forwarding headers are
    /// believed and their addresses skipped in the chain.
    pub fn trust(mut self, net: impl Into<IpNet>) -> Self {
        self.trusted.push(unmap_net(net.into()));
        self
    }

    /// Trusts every network in the list, each a CIDR (`10.0.0.0/8`,
    /// `fd00::/8`) or a single address (`192.0.2.10`).
    ///
    /// # Errors
    ///
    /// [`InvalidCidr`] naming the first entry that is neither.
    pub fn trust_cidrs<I>(mut self, cidrs: I) -> Result<Self, InvalidCidr>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        for cidr in cidrs {
            let text = cidr.as_ref().trim();
            let net = match text.parse::<IpNet>() {
                Ok(net) => net,
                Err(_) => match text.parse::<IpAddr>() {
                    Ok(ip) => IpNet::from(ip),
                    Err(_) => {
                        return Err(InvalidCidr {
                            input: cidr.as_ref().to_owned(),
                        });
                    }
                },
            };
            self.trusted.push(unmap_net(net));
        }
        Ok(self)
    }

    /// The headers to read, in order of preference (default:
    /// `[ForwardedHeader::XForwardedFor]`). The first one present on a
    /// request is used alone. An empty list ignores all headers.
    pub fn headers(mut self, order: impl IntoIterator<Item = ForwardedHeader>) -> Self {
        self.headers = Vec::new();
        for header in order {
            if !self.headers.contains(&header) {
                self.headers.push(header);
            }
        }
        self
    }

    /// Groups IPv6 clients by networks of this prefix length (default `64`;
    /// `128` keys every address on its own; values above `128` count as `128`).
    pub fn ipv6_prefix(mut self, len: u8) -> Self {
        self.ipv6_prefix = clamp_prefix(len);
        self
    }

    /// The key this extractor gives a client at `ip` (`ip:<address>`, IPv6
    /// grouped by [`ipv6_prefix`](Self::ipv6_prefix)): what to pass to the
    /// limiter's [`block`](crate::RateLimiter::block),
    /// [`reset`](crate::RateLimiter::reset) or
    /// [`storage_keys`](crate::RateLimiter::storage_keys) for that client.
    ///
    /// ```
    /// use tower_redis_ratelimit::key::ClientIp;
    ///
    /// let ip = "2001:db8:1:2::7".parse()?;
    /// assert_eq!(ClientIp::new().key_of(ip), b"ip:2001:db8:1:2::/64");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_of(&self, ip: std::net::IpAddr) -> Vec<u8> {
        ip_key(ip, self.ipv6_prefix)
    }

    /// Examines at most this many entries of a forwarding chain (default 32).
    /// `0` never reads a header: the key is the trusted peer.
    pub fn max_hops(mut self, max: usize) -> Self {
        self.max_hops = max;
        self
    }

    /// The client's address as described in the [type docs](Self),
    /// normalised (IPv4-mapped IPv6 as IPv4) but not grouped into a network.
    /// `None` without a peer address.
    pub fn client_addr(&self, parts: &Parts) -> Option<IpAddr> {
        let peer = canonical(peer_addr(parts)?.ip());
        Some(self.resolve(peer, &parts.headers))
    }

    /// Whether this address is in a trusted network.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.is_trusted(peer) {
            return peer;
        }
        let Some(header) = self
            .headers
            .iter()
            .copied()
            .find(|header| headers.contains_key(header.name()))
        else {
            return peer;
        };
        let mut walk = Walk {
            client: self,
            last: peer,
            budget: self.max_hops,
        };
        for line in headers.get_all(header.name()).iter().rev() {
            let line = line.as_bytes();
            let flow = match header {
                ForwardedHeader::Forwarded => {
                    forwarded_rev(line, walk.budget).try_for_each(|hop| walk.step(hop))
                }
                ForwardedHeader::XForwardedFor | ForwardedHeader::XRealIp => {
                    x_forwarded_for_rev(line).try_for_each(|hop| walk.step(hop))
                }
            };
            if let ControlFlow::Break(client) = flow {
                return client;
            }
        }
        walk.last
    }
}

impl Default for ClientIp {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyExtractor for ClientIp {
    fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        self.client_addr(parts)
            .map(|ip| ip_key(ip, self.ipv6_prefix))
    }

    fn extract_into(&self, parts: &Parts, key: &mut Vec<u8>) -> bool {
        self.client_addr(parts).is_some_and(|ip| {
            write_ip_key(ip, self.ipv6_prefix, key);
            true
        })
    }

    fn missing_hint(&self, _parts: &Parts) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed(concat!("ClientIp ", super::ip::no_peer_hint!()))
    }

    fn missing_cause(&self, _parts: &Parts) -> super::MissingCause {
        super::MissingCause::Server
    }
}

/// The right-to-left walk over a chain: `last` is the nearest trusted
/// address seen so far (the peer at first).
struct Walk<'a> {
    client: &'a ClientIp,
    last: IpAddr,
    budget: usize,
}

impl Walk<'_> {
    fn step(&mut self, hop: Hop) -> ControlFlow<IpAddr> {
        if self.budget == 0 {
            return ControlFlow::Break(self.last);
        }
        self.budget -= 1;
        match hop {
            Hop::Ip(ip) => {
                let ip = canonical(ip);
                if self.client.is_trusted(ip) {
                    self.last = ip;
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(ip)
                }
            }
            Hop::Unknown | Hop::Invalid => ControlFlow::Break(self.last),
        }
    }
}

/// A trusted network given as IPv4-mapped IPv6 (`::ffff:10.0.0.0/104`)
/// becomes the IPv4 network, since addresses are compared unmapped.
fn unmap_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net
        && let Some(v4) = v6.network().to_ipv4_mapped()
        && let Some(len) = v6.prefix_len().checked_sub(96)
        && let Ok(v4net) = Ipv4Net::new(v4, len)
    {
        return IpNet::V4(v4net);
    }
    net
}

/// A trusted network given to [`ClientIp::trust_cidrs`] that is neither a
/// CIDR nor an IP address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCidr {
    input: String,
}

impl InvalidCidr {
    /// The text that did not parse.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for InvalidCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid trusted proxy network `{}`: expected a CIDR such as `10.0.0.0/8` or an IP address",
            self.input
        )
    }
}

impl std::error::Error for InvalidCidr {}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use http::HeaderValue;

    use super::*;

    /// A request from `peer` with these headers (repeated names are separate lines).
    fn request(peer: &str, headers: &[(&str, &[u8])]) -> Parts {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        for (name, value) in headers {
            parts.headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        let peer: IpAddr = peer.parse().unwrap();
        parts.extensions.insert(SocketAddr::new(peer, 40000));
        parts
    }

    fn behind_proxies() -> ClientIp {
        ClientIp::new()
            .trust_cidrs(["10.0.0.0/8", "fd00::/8"])
            .unwrap()
    }

    fn key(client_ip: &ClientIp, parts: &Parts) -> String {
        String::from_utf8(client_ip.extract(parts).unwrap()).unwrap()
    }

    #[test]
    fn spoofed_xff_from_an_untrusted_peer_is_ignored() {
        let parts = request(
            "203.0.113.9",
            &[
                ("x-forwarded-for", b"1.1.1.1"),
                ("forwarded", b"for=1.1.1.1"),
            ],
        );
        let all = behind_proxies().headers([
            ForwardedHeader::Forwarded,
            ForwardedHeader::XForwardedFor,
            ForwardedHeader::XRealIp,
        ]);
        assert_eq!(key(&all, &parts), "ip:203.0.113.9");
    }

    #[test]
    fn without_trusted_proxies_headers_are_ignored() {
        let parts = request("10.0.0.1", &[("x-forwarded-for", b"1.1.1.1")]);
        assert_eq!(key(&ClientIp::new(), &parts), "ip:10.0.0.1");
    }

    #[test]
    fn missing_peer_is_none_even_with_headers() {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts
            .headers
            .insert(X_FORWARDED_FOR, HeaderValue::from_static("1.1.1.1"));
        assert_eq!(behind_proxies().extract(&parts), None);
        assert_eq!(behind_proxies().client_addr(&parts), None);
    }

    #[test]
    fn trusted_peer_without_header_is_the_client() {
        let parts = request("10.0.0.1", &[]);
        assert_eq!(key(&behind_proxies(), &parts), "ip:10.0.0.1");
    }

    #[test]
    fn xff_chain_skips_trusted_hops_from_the_right() {
        let parts = request(
            "10.0.0.1",
            &[(
                "x-forwarded-for",
                b"6.6.6.6, 198.51.100.4, 10.2.3.4, 10.9.9.9",
            )],
        );
        assert_eq!(key(&behind_proxies(), &parts), "ip:198.51.100.4");
    }

    #[test]
    fn xff_spoofed_prefix_behind_a_trusted_proxy_is_not_believed() {
        // The client sent "X-Forwarded-For: 10.0.0.7"; the proxy appended
        // the client's real address. Only the rightmost untrusted one counts.
        let parts = request(
            "10.0.0.1",
            &[("x-forwarded-for", b"10.0.0.7, 203.0.113.50")],
        );
        assert_eq!(key(&behind_proxies(), &parts), "ip:203.0.113.50");
    }

    #[test]
    fn xff_all_trusted_gives_the_leftmost() {
        let parts = request("10.0.0.1", &[("x-forwarded-for", b"10.0.0.3, 10.0.0.2")]);
        assert_eq!(key(&behind_proxies(), &parts), "ip:10.0.0.3");
    }

    #[test]
    fn xff_reads_every_occurrence_last_first() {
        let parts = request(
            "10.0.0.1",
            &[
                ("x-forwarded-for", b"192.0.2.1, 192.0.2.2"),
                ("x-forwarded-for", b"10.0.0.5"),
                ("x-forwarded-for", b""),
            ],
        );
        assert_eq!(key(&behind_proxies(), &parts), "ip:192.0.2.2");
    }

    #[test]
    fn xff_garbage_stops_the_walk_at_the_last_trusted_hop() {
        let parts = request(
            "10.0.0.1",
            &[("x-forwarded-for", b"192.0.2.1, not-an-ip, 10.0.0.8")],
        );
        assert_eq!(key(&behind_proxies(), &parts), "ip:10.0.0.8");
        let parts = request("10.0.0.1", &[("x-forwarded-for", b"192.0.2.1, garbage")]);
        assert_eq!(key(&behind_proxies(), &parts), "ip:10.0.0.1");
        let parts = request("10.0.0.1", &[("x-forwarded-for", b"192.0.2.1, unknown")]);
        assert_eq!(key(&behind_proxies(), &parts), "ip:10.0.0.1");
    }

    #[test]
    fn xff_non_utf8_entry_stops_the_walk() {
        let parts = request(
            "10.0.0.1",
            &[("x-forwarded-for", b"192.0.2.1, \xff\xfe1.2.3.4")],
        );
        assert_eq!(key(&behind_proxies(), &parts), "ip:10.0.0.1");
    }

    #[test]
    fn xff_64_kib_values_are_handled() {
        let huge_entry = [vec![b'9'; 64 * 1024], b", 192.0.2.77".to_vec()].concat();
        let parts = request("10.0.0.1", &[("x-forwarded-for", &huge_entry)]);
        assert_eq!(key(&behind_proxies(), &parts), "ip:192.0.2.77");

        let many_hops = "10.0.0.9, ".repeat(6 * 1024) + "10.0.0.10";
        let parts = request("10.0.0.1", &[("x-forwarded-for", many_hops.as_bytes())]);
        // 32 trusted hops examined, the rest never read.
        assert_eq!(key(&behind_proxies(), &parts), "ip:10.0.0.9");

        let commas = vec![b','; 64 * 1024];
        let parts = request("10.0.0.1", &[("x-forwarded-for", &commas)]);
        assert_eq!(key(&behind_proxies(), &parts), "ip:10.0.0.1");

        let forwarded = "for=10.0.0.9, ".repeat(4 * 1024) + "for=\"[fd00::1]:80\"";
        let parts = request("10.0.0.1", &[("forwarded", forwarded.as_bytes())]);
        let client_ip = behind_proxies().headers([ForwardedHeader::Forwarded]);
        assert_eq!(key(&client_ip, &parts), "ip:10.0.0.9");
    }

    #[test]
    fn max_hops_caps_the_walk() {
        let parts = request(
            "10.0.0.1",
            &[(
                "x-forwarded-for",
                b"192.0.2.1, 10.0.0.4, 10.0.0.3, 10.0.0.2",
            )],
        );
        assert_eq!(key(&behind_proxies().max_hops(3), &parts), "ip:10.0.0.4");
        assert_eq!(key(&behind_proxies().max_hops(4), &parts), "ip:192.0.2.1");
        assert_eq!(key(&behind_proxies().max_hops(0), &parts), "ip:10.0.0.1");
        let forwarded = request(
            "10.0.0.1",
            &[
                ("forwarded", b"for=192.0.2.1, for=10.0.0.4"),
                ("forwarded", b"for=10.0.0.3, for=10.0.0.2"),
            ],
        );
        let client_ip = behind_proxies().headers([ForwardedHeader::Forwarded]);
        assert_eq!(
            key(&client_ip.clone().max_hops(3), &forwarded),
            "ip:10.0.0.4"
        );
        assert_eq!(key(&client_ip.max_hops(4), &forwarded), "ip:192.0.2.1");
    }

    #[test]
    fn forwarded_with_quoted_ipv6_and_ports() {
        let parts = request(
            "10.0.0.1",
            &[(
                "forwarded",
                br#"for=192.0.2.1;proto=https, FOR="[2001:db8:aa:bb:1::9]:4711";by=_proxy, for="10.1.1.1:80""#,
            )],
        );
        let client_ip = behind_proxies().headers([ForwardedHeader::Forwarded]);
        assert_eq!(key(&client_ip, &parts), "ip:2001:db8:aa:bb::/64");
        assert_eq!(
            client_ip.clone().ipv6_prefix(128).client_addr(&parts),
            Some("2001:db8:aa:bb:1::9".parse().unwrap())
        );
    }

    #[test]
    fn forwarded_obfuscated_or_unknown_stops_the_walk() {
        let client_ip = behind_proxies().headers([ForwardedHeader::Forwarded]);
        for (value, expected) in [
            (
                &br#"for=192.0.2.1, for="_hidden", for=10.0.0.7"#[..],
                "ip:10.0.0.7",
            ),
            (b"for=192.0.2.1, for=unknown, for=10.0.0.7", "ip:10.0.0.7"),
            (b"for=192.0.2.1, proto=https, for=10.0.0.7", "ip:10.0.0.7"),
            // An unterminated quote swallows the rest: the rightmost element is broken.
            (b"for=192.0.2.1, for=\"oops, for=10.0.0.7", "ip:10.0.0.1"),
        ] {
            let parts = request("10.0.0.1", &[("forwarded", value)]);
            assert_eq!(
                key(&client_ip, &parts),
                expected,
                "{}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn header_order_picks_the_first_present_header_alone() {
        let parts = request(
            "10.0.0.1",
            &[
                ("x-forwarded-for", b"192.0.2.1"),
                ("forwarded", b"for=192.0.2.2"),
                ("x-real-ip", b"192.0.2.3"),
            ],
        );
        use ForwardedHeader::*;
        assert_eq!(key(&behind_proxies(), &parts), "ip:192.0.2.1");
        assert_eq!(
            key(
                &behind_proxies().headers([Forwarded, XForwardedFor]),
                &parts
            ),
            "ip:192.0.2.2"
        );
        assert_eq!(
            key(&behind_proxies().headers([XRealIp]), &parts),
            "ip:192.0.2.3"
        );
        assert_eq!(key(&behind_proxies().headers([]), &parts), "ip:10.0.0.1");

        // Absent headers are skipped; a present but useless one does not fall through.
        let only_real_ip = request("10.0.0.1", &[("x-real-ip", b"192.0.2.3")]);
        assert_eq!(
            key(
                &behind_proxies().headers([Forwarded, XRealIp]),
                &only_real_ip
            ),
            "ip:192.0.2.3"
        );
        let useless_forwarded = request(
            "10.0.0.1",
            &[("forwarded", b"proto=https"), ("x-real-ip", b"192.0.2.3")],
        );
        assert_eq!(
            key(
                &behind_proxies().headers([Forwarded, XRealIp]),
                &useless_forwarded
            ),
            "ip:10.0.0.1"
        );
    }

    #[test]
    fn x_real_ip_from_a_trusted_peer() {
        let client_ip = behind_proxies().headers([ForwardedHeader::XRealIp]);
        let parts = request("10.0.0.1", &[("x-real-ip", b" 198.51.100.23 ")]);
        assert_eq!(key(&client_ip, &parts), "ip:198.51.100.23");
        let parts = request("10.0.0.1", &[("x-real-ip", b"garbage")]);
        assert_eq!(key(&client_ip, &parts), "ip:10.0.0.1");
    }

    #[test]
    fn ipv4_mapped_addresses_are_unmapped_for_trust_and_key() {
        // A dual-stack listener reports IPv4 peers as ::ffff:a.b.c.d.
        let parts = request(
            "::ffff:10.0.0.1",
            &[("x-forwarded-for", b"::ffff:198.51.100.8, ::ffff:10.0.0.2")],
        );
        assert_eq!(key(&behind_proxies(), &parts), "ip:198.51.100.8");
        let direct = request("::ffff:203.0.113.1", &[("x-forwarded-for", b"1.1.1.1")]);
        assert_eq!(key(&behind_proxies(), &direct), "ip:203.0.113.1");
        // A trusted network written in mapped form matches plain IPv4.
        let mapped_trust = ClientIp::new()
            .trust_cidrs(["::ffff:10.0.0.0/104"])
            .unwrap();
        let parts = request("10.0.0.1", &[("x-forwarded-for", b"198.51.100.8")]);
        assert_eq!(key(&mapped_trust, &parts), "ip:198.51.100.8");
    }

    #[test]
    fn ipv6_clients_are_grouped_by_prefix() {
        let parts = request("fd00::1", &[("x-forwarded-for", b"2001:db8:1:2:3:4:5:6")]);
        assert_eq!(key(&behind_proxies(), &parts), "ip:2001:db8:1:2::/64");
        assert_eq!(
            key(&behind_proxies().ipv6_prefix(48), &parts),
            "ip:2001:db8:1::/48"
        );
        assert_eq!(
            key(&behind_proxies().ipv6_prefix(128), &parts),
            "ip:2001:db8:1:2:3:4:5:6"
        );
    }

    #[test]
    fn trust_cidrs_accepts_networks_and_addresses_and_rejects_garbage() {
        let client_ip = ClientIp::new()
            .trust_cidrs(["10.0.0.0/8", " 192.0.2.10 ", "2001:db8::/32", "::1"])
            .unwrap();
        for ip in [
            "10.255.0.1",
            "192.0.2.10",
            "2001:db8::5",
            "::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(client_ip.is_trusted(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["11.0.0.1", "192.0.2.11", "2001:db9::5", "::2"] {
            assert!(!client_ip.is_trusted(ip.parse().unwrap()), "{ip}");
        }
        let err = ClientIp::new()
            .trust_cidrs(["10.0.0.0/8", "10.0.0.0/33"])
            .unwrap_err();
        assert_eq!(err.input(), "10.0.0.0/33");
        assert!(err.to_string().contains("`10.0.0.0/33`"));
        assert!(ClientIp::new().trust_cidrs(["localhost"]).is_err());
        assert!(ClientIp::new().trust_cidrs([""]).is_err());
    }

    #[test]
    fn trust_takes_an_ipnet() {
        let client_ip = ClientIp::new().trust("10.0.0.0/8".parse::<IpNet>().unwrap());
        let parts = request("10.0.0.1", &[("x-forwarded-for", b"192.0.2.5")]);
        assert_eq!(key(&client_ip, &parts), "ip:192.0.2.5");
    }
}
