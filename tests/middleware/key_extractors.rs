//! Property tests of the key extractors: the `X-Forwarded-For` and
//! `Forwarded` parsers never panic, a proxy chain resolves to exactly the
//! rightmost untrusted address, formatted chains parse back, and IP keys
//! group IPv6 the way `ipnet` computes networks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::request::Parts;
use http::{HeaderName, HeaderValue};
use ipnet::{IpNet, Ipv6Net};
use proptest::prelude::*;
use tower_redis_ratelimit::key::{
    ClientIp, ForwardedHeader, Hop, KeyExtractor, PeerIp, parse_forwarded, parse_x_forwarded_for,
};

const TRUSTED: [&str; 3] = ["10.0.0.0/8", "172.16.0.0/12", "fd00::/8"];

fn trusted_nets() -> Vec<IpNet> {
    TRUSTED.iter().map(|cidr| cidr.parse().unwrap()).collect()
}

/// The test's own notion of the address a client counts as.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// The test's own trust check, independent of `ClientIp::is_trusted`.
fn is_trusted(ip: IpAddr) -> bool {
    let ip = unmapped(ip);
    trusted_nets().iter().any(|net| net.contains(&ip))
}

fn client_ip() -> ClientIp {
    ClientIp::new().trust_cidrs(TRUSTED).unwrap()
}

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|o| IpAddr::V4(Ipv4Addr::from(o))),
        any::<[u8; 16]>().prop_map(|o| IpAddr::V6(Ipv6Addr::from(o))),
        // IPv4-mapped IPv6, as dual-stack sockets report IPv4 peers.
        any::<[u8; 4]>().prop_map(|o| IpAddr::V6(Ipv4Addr::from(o).to_ipv6_mapped())),
    ]
}

fn trusted_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 3]>().prop_map(|[b, c, d]| IpAddr::V4(Ipv4Addr::new(10, b, c, d))),
        (0u8..16, any::<[u8; 2]>()).prop_map(|(b, [c, d])| IpAddr::V4(Ipv4Addr::new(
            172,
            16 + b,
            c,
            d
        ))),
        any::<[u8; 15]>().prop_map(|rest| {
            let mut octets = [0xfd; 16];
            octets[1..].copy_from_slice(&rest);
            IpAddr::V6(Ipv6Addr::from(octets))
        }),
        any::<[u8; 3]>()
            .prop_map(|[b, c, d]| IpAddr::V6(Ipv4Addr::new(10, b, c, d).to_ipv6_mapped())),
    ]
}

fn untrusted_ip() -> impl Strategy<Value = IpAddr> {
    any_ip().prop_filter("untrusted", |ip| !is_trusted(*ip))
}

/// How one address is written in a chain.
#[derive(Debug, Clone, Copy)]
struct Written {
    ip: IpAddr,
    port: Option<u16>,
    /// IPv6 without a port: bracketed or bare (X-Forwarded-For only).
    brackets: bool,
}

fn written(ip: impl Strategy<Value = IpAddr>) -> impl Strategy<Value = Written> {
    (ip, proptest::option::of(any::<u16>()), any::<bool>())
        .prop_map(|(ip, port, brackets)| Written { ip, port, brackets })
}

impl Written {
    /// The node as `X-Forwarded-For` writes it; also valid unquoted-free
    /// RFC 7239 node text (IPv6 always bracketed there).
    fn node(&self, force_brackets: bool) -> String {
        match (self.ip, self.port) {
            (IpAddr::V4(v4), None) => v4.to_string(),
            (IpAddr::V4(v4), Some(port)) => format!("{v4}:{port}"),
            (IpAddr::V6(v6), None) if self.brackets || force_brackets => format!("[{v6}]"),
            (IpAddr::V6(v6), None) => v6.to_string(),
            (IpAddr::V6(v6), Some(port)) => format!("[{v6}]:{port}"),
        }
    }
}

/// Optional whitespace as senders write it around list separators.
fn ows() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just(""), Just(" "), Just("  "), Just("\t"), Just(" \t")]
}

fn format_xff(entries: &[(String, &str, &str)]) -> String {
    entries
        .iter()
        .map(|(node, before, after)| format!("{before}{node}{after}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A quoted string holding `text`, with a random choice of bytes escaped.
fn quote(text: &str, escape_mask: u64) -> String {
    let mut out = String::from("\"");
    for (i, c) in text.chars().enumerate() {
        if escape_mask >> (i % 64) & 1 == 1 {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// One RFC 7239 element for this node, with other parameters around it.
fn format_forwarded_element(node: &str, style: &ElementStyle) -> String {
    let token_ok = node
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    let value = if token_ok && !style.quote_anyway {
        node.to_owned()
    } else {
        quote(node, style.escape_mask)
    };
    let name = match style.for_case {
        0 => "for",
        1 => "For",
        _ => "FOR",
    };
    let mut pairs = vec![format!("{name}={value}")];
    if style.proto {
        pairs.push("proto=https".to_owned());
    }
    if style.by {
        pairs.push("by=\"[2001:db8::99]:443\"".to_owned());
    }
    if style.host {
        pairs.push("host=\"example.com, other; x=y\"".to_owned());
    }
    let shift = style.rotate % pairs.len();
    pairs.rotate_left(shift);
    pairs.join(&format!("{};", style.ows))
}

#[derive(Debug, Clone)]
struct ElementStyle {
    quote_anyway: bool,
    escape_mask: u64,
    for_case: u8,
    proto: bool,
    by: bool,
    host: bool,
    rotate: usize,
    ows: &'static str,
}

fn element_style() -> impl Strategy<Value = ElementStyle> {
    (
        any::<bool>(),
        any::<u64>(),
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        0usize..4,
        prop_oneof![Just(""), Just(" ")],
    )
        .prop_map(
            |(quote_anyway, escape_mask, for_case, proto, by, host, rotate, ows)| ElementStyle {
                quote_anyway,
                escape_mask,
                for_case,
                proto,
                by,
                host,
                rotate,
                ows,
            },
        )
}

/// Splits one list into several header lines at random element boundaries.
fn split_lines(elements: &[String], cuts: &[usize]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        let cut = cut.min(elements.len());
        if cut > start {
            lines.push(elements[start..cut].join(", "));
            start = cut;
        }
    }
    lines.push(elements[start..].join(", "));
    lines
}

fn request(peer: IpAddr, name: &str, lines: &[String]) -> Parts {
    let (mut parts, ()) = http::Request::new(()).into_parts();
    let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
    for line in lines {
        parts
            .headers
            .append(name.clone(), HeaderValue::from_str(line).unwrap());
    }
    parts.extensions.insert(SocketAddr::new(peer, 443));
    parts
}

/// Bytes a header value may hold (visible ASCII, space, tab, obs-text).
fn header_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![0x20u8..0x7f, 0x80u8..=0xff, Just(b'\t')],
        0..max,
    )
}

/// Text made of the bytes the parsers care about, to reach deep states.
fn parser_soup() -> impl Strategy<Value = String> {
    "[0-9a-fA-F:.\\[\\]\",;= _\\\\\tforFORunknw-]{0,160}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn xff_parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let hops = parse_x_forwarded_for(&bytes);
        let entries = bytes
            .split(|&b| b == b',')
            .filter(|e| e.iter().any(|&b| b != b' ' && b != b'\t'))
            .count();
        prop_assert_eq!(hops.len(), entries);
    }

    #[test]
    fn forwarded_parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let hops = parse_forwarded(&bytes);
        prop_assert!(hops.len() <= bytes.split(|&b| b == b',').count());
    }

    #[test]
    fn parsers_never_panic_on_header_like_soup(soup in parser_soup()) {
        let xff = parse_x_forwarded_for(soup.as_bytes());
        let forwarded = parse_forwarded(soup.as_bytes());
        prop_assert!(xff.len() <= soup.len() / 2 + 1);
        prop_assert!(forwarded.len() <= soup.len() / 2 + 1);
    }

    #[test]
    fn client_ip_never_panics_and_answers_some_address(
        peer in prop_oneof![trusted_ip(), untrusted_ip()],
        xff in header_bytes(300),
        forwarded in header_bytes(300),
        real_ip in header_bytes(60),
        soup in parser_soup(),
    ) {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        for (name, value) in [
            ("x-forwarded-for", &xff[..]),
            ("x-forwarded-for", soup.as_bytes()),
            ("forwarded", &forwarded[..]),
            ("forwarded", soup.as_bytes()),
            ("x-real-ip", &real_ip[..]),
        ] {
            if let Ok(value) = HeaderValue::from_bytes(value) {
                parts.headers.append(HeaderName::from_static(name), value);
            }
        }
        parts.extensions.insert(SocketAddr::new(peer, 1));
        for order in [
            vec![ForwardedHeader::XForwardedFor],
            vec![ForwardedHeader::Forwarded],
            vec![ForwardedHeader::XRealIp],
        ] {
            let extractor = client_ip().headers(order);
            let key = extractor.extract(&parts);
            prop_assert!(key.is_some_and(|k| k.starts_with(b"ip:")));
            let client = extractor.client_addr(&parts).unwrap();
            if !is_trusted(peer) {
                prop_assert_eq!(client, unmapped(peer));
            }
        }
    }

    /// [left garbage or addresses] client, trusted..., seen from a trusted peer.
    #[test]
    fn xff_chain_resolves_to_the_rightmost_untrusted_address(
        peer in trusted_ip(),
        left in proptest::collection::vec(prop_oneof![
            written(any_ip()).prop_map(|w| w.node(false)),
            "[a-z!#]{1,12}",
        ], 0..6),
        client in written(untrusted_ip()),
        suffix in proptest::collection::vec(written(trusted_ip()), 0..25),
        spaces in proptest::collection::vec((ows(), ows()), 40),
        cuts in proptest::collection::vec(0usize..40, 0..4),
    ) {
        let mut nodes: Vec<String> = left;
        nodes.push(client.node(false));
        nodes.extend(suffix.iter().map(|w| w.node(false)));
        let elements: Vec<String> = nodes
            .iter()
            .zip(spaces.iter().cycle())
            .map(|(node, (before, after))| format!("{before}{node}{after}"))
            .collect();
        let mut sorted_cuts = cuts;
        sorted_cuts.sort_unstable();
        let lines = split_lines(&elements, &sorted_cuts);
        let parts = request(peer, "x-forwarded-for", &lines);
        prop_assert_eq!(client_ip().client_addr(&parts), Some(unmapped(client.ip)));
    }

    #[test]
    fn forwarded_chain_resolves_to_the_rightmost_untrusted_address(
        peer in trusted_ip(),
        left in proptest::collection::vec(prop_oneof![
            written(any_ip()).prop_map(|w| format!("for=\"{}\"", w.node(true))),
            Just("for=unknown".to_owned()),
            Just("for=\"unterminated".to_owned()),
        ], 0..6),
        client in (written(untrusted_ip()), element_style()),
        suffix in proptest::collection::vec((written(trusted_ip()), element_style()), 0..25),
        cuts in proptest::collection::vec(0usize..40, 0..4),
    ) {
        // An unterminated quote on the far left swallows only its own line.
        let mut elements: Vec<String> = left;
        let left_len = elements.len();
        elements.push(format_forwarded_element(&client.0.node(true), &client.1));
        elements.extend(
            suffix.iter().map(|(w, style)| format_forwarded_element(&w.node(true), style)),
        );
        // Cut only to the right of the left part, so garbage stays on its own lines.
        let mut sorted_cuts: Vec<usize> = cuts.into_iter().map(|c| c.max(left_len)).collect();
        sorted_cuts.push(left_len);
        sorted_cuts.sort_unstable();
        let lines = split_lines(&elements, &sorted_cuts);
        let parts = request(peer, "forwarded", &lines);
        let extractor = client_ip().headers([ForwardedHeader::Forwarded]);
        prop_assert_eq!(extractor.client_addr(&parts), Some(unmapped(client.0.ip)));
    }

    #[test]
    fn all_trusted_chain_resolves_to_its_leftmost_hop(
        peer in trusted_ip(),
        chain in proptest::collection::vec(written(trusted_ip()), 1..30),
    ) {
        let value = chain.iter().map(|w| w.node(false)).collect::<Vec<_>>().join(", ");
        let parts = request(peer, "x-forwarded-for", &[value]);
        prop_assert_eq!(client_ip().client_addr(&parts), Some(unmapped(chain[0].ip)));
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_the_headers(
        peer in untrusted_ip(),
        chain in proptest::collection::vec(written(any_ip()), 0..10),
    ) {
        let value = chain.iter().map(|w| w.node(false)).collect::<Vec<_>>().join(", ");
        let parts = request(peer, "x-forwarded-for", &[value]);
        prop_assert_eq!(client_ip().client_addr(&parts), Some(unmapped(peer)));
    }

    #[test]
    fn xff_round_trip(
        entries in proptest::collection::vec(
            (
                prop_oneof![
                    written(any_ip()).prop_map(|w| (w.node(false), Hop::Ip(w.ip))),
                    Just(("unknown".to_owned(), Hop::Unknown)),
                    "_[a-zA-Z0-9._-]{1,10}".prop_map(|s| (s, Hop::Unknown)),
                ],
                ows(),
                ows(),
            ),
            0..20,
        ),
    ) {
        let text = format_xff(
            &entries
                .iter()
                .map(|((node, _), before, after)| (node.clone(), *before, *after))
                .collect::<Vec<_>>(),
        );
        let expected: Vec<Hop> = entries.iter().map(|((_, hop), _, _)| *hop).collect();
        prop_assert_eq!(parse_x_forwarded_for(text.as_bytes()), expected);
    }

    #[test]
    fn forwarded_round_trip(
        elements in proptest::collection::vec(
            (
                prop_oneof![
                    written(any_ip()).prop_map(|w| (w.node(true), Hop::Ip(w.ip))),
                    Just(("unknown".to_owned(), Hop::Unknown)),
                    "_[a-zA-Z0-9._-]{1,10}".prop_map(|s| (s, Hop::Unknown)),
                    (written(any_ip()), "_[a-zA-Z0-9._-]{1,6}").prop_map(|(w, port)| {
                        let host = match w.ip {
                            IpAddr::V4(v4) => v4.to_string(),
                            IpAddr::V6(v6) => format!("[{v6}]"),
                        };
                        (format!("{host}:{port}"), Hop::Ip(w.ip))
                    }),
                ],
                element_style(),
                ows(),
            ),
            0..20,
        ),
    ) {
        let text = elements
            .iter()
            .map(|((node, _), style, ows)| format!("{ows}{}", format_forwarded_element(node, style)))
            .collect::<Vec<_>>()
            .join(",");
        let expected: Vec<Hop> = elements.iter().map(|((_, hop), _, _)| *hop).collect();
        prop_assert_eq!(parse_forwarded(text.as_bytes()), expected, "{}", text);
    }

    #[test]
    fn ipv6_keys_are_the_ipnet_network(octets in any::<[u8; 16]>(), len in 0u8..=140) {
        let v6 = Ipv6Addr::from(octets);
        prop_assume!(v6.to_ipv4_mapped().is_none());
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.extensions.insert(SocketAddr::new(IpAddr::V6(v6), 1));
        let key = String::from_utf8(PeerIp.ipv6_prefix(len).extract(&parts).unwrap()).unwrap();
        let expected = if len >= 128 {
            format!("ip:{v6}")
        } else {
            let net = Ipv6Net::new(v6, len).unwrap().trunc();
            format!("ip:{}/{}", net.network(), len)
        };
        prop_assert_eq!(&key, &expected);
        let client_key = client_ip().ipv6_prefix(len).extract(&parts).unwrap();
        prop_assert_eq!(client_key, expected.into_bytes());
    }

    #[test]
    fn ipv4_mapped_peers_key_as_ipv4(octets in any::<[u8; 4]>()) {
        let v4 = Ipv4Addr::from(octets);
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.extensions.insert(SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), 1));
        prop_assert_eq!(PeerIp.extract(&parts).unwrap(), format!("ip:{v4}").into_bytes());
    }
}

/// The extractors inside a real axum router, where axum fills the extensions.
#[cfg(feature = "axum")]
mod axum_router {
    use std::net::SocketAddr;

    use axum::Router;
    use axum::extract::Request;
    use axum::extract::connect_info::MockConnectInfo;
    use axum::middleware::{self, Next};
    use axum::response::Response;
    use axum::routing::get;
    use http::HeaderValue;
    use tower::ServiceExt;
    use tower_redis_ratelimit::key::{
        ClientIp, Header, KeyExtractor, MatchedPath, Method, Path, PeerIp,
    };

    /// Middleware that answers with the key of each extractor in a header.
    async fn report_keys(req: Request, next: Next) -> Response {
        let (parts, body) = req.into_parts();
        let keys: Vec<(&str, Option<Vec<u8>>)> = vec![
            ("x-peer", PeerIp.extract(&parts)),
            (
                "x-client",
                ClientIp::new()
                    .trust_cidrs(["10.0.0.0/8"])
                    .unwrap()
                    .extract(&parts),
            ),
            ("x-route", MatchedPath.extract(&parts)),
            ("x-route-method", (MatchedPath, Method).extract(&parts)),
            ("x-path", Path.extract(&parts)),
            (
                "x-api-key",
                Header::parse("x-api-key").unwrap().extract(&parts),
            ),
        ];
        let mut res = next.run(Request::from_parts(parts, body)).await;
        for (name, key) in keys {
            let value = match key {
                Some(key) => HeaderValue::from_bytes(&key).unwrap(),
                None => HeaderValue::from_static("<none>"),
            };
            res.headers_mut().insert(name, value);
        }
        res
    }

    async fn call(app: Router, uri: &str, xff: Option<&str>) -> http::HeaderMap {
        let mut req = http::Request::get(uri);
        if let Some(xff) = xff {
            req = req.header("x-forwarded-for", xff);
        }
        req = req.header("x-api-key", "sk_test_secret_value");
        let res = app
            .oneshot(req.body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        res.headers().clone()
    }

    fn app(peer: [u8; 4], route_layer: bool) -> Router {
        let router = Router::new()
            .route("/users/{id}", get(|| async { "ok" }))
            .fallback(|| async { "fallback" });
        let router = if route_layer {
            router.route_layer(middleware::from_fn(report_keys))
        } else {
            router.layer(middleware::from_fn(report_keys))
        };
        router.layer(MockConnectInfo(SocketAddr::from((peer, 5555))))
    }

    #[tokio::test]
    async fn matched_path_shares_one_key_per_route_under_layer_and_route_layer() {
        for route_layer in [false, true] {
            let one = call(app([192, 0, 2, 1], route_layer), "/users/1", None).await;
            let two = call(app([192, 0, 2, 1], route_layer), "/users/2?x=1", None).await;
            assert_eq!(one["x-route"], "route:/users/{id}");
            assert_eq!(one["x-route"], two["x-route"]);
            assert_eq!(one["x-route-method"], two["x-route-method"]);
            assert_eq!(one["x-path"], "path:/users/1");
            assert_eq!(two["x-path"], "path:/users/2");
        }
    }

    #[tokio::test]
    async fn matched_path_is_none_for_the_fallback() {
        let res = call(app([192, 0, 2, 1], false), "/nowhere", None).await;
        assert_eq!(res["x-route"], "<none>");
        assert_eq!(res["x-route-method"], "<none>");
        assert_eq!(res["x-path"], "path:/nowhere");
    }

    #[tokio::test]
    async fn peer_and_client_ip_read_axum_connect_info() {
        // A direct client: its spoofed X-Forwarded-For is ignored.
        let direct = call(app([203, 0, 113, 5], false), "/users/1", Some("1.2.3.4")).await;
        assert_eq!(direct["x-peer"], "ip:203.0.113.5");
        assert_eq!(direct["x-client"], "ip:203.0.113.5");
        // Through a trusted proxy: the client is the rightmost untrusted hop.
        let proxied = call(
            app([10, 0, 0, 2], false),
            "/users/1",
            Some("1.2.3.4, 198.51.100.20, 10.0.0.9"),
        )
        .await;
        assert_eq!(proxied["x-peer"], "ip:10.0.0.2");
        assert_eq!(proxied["x-client"], "ip:198.51.100.20");
    }

    #[tokio::test]
    async fn header_key_hides_the_secret() {
        let res = call(app([192, 0, 2, 1], false), "/users/1", None).await;
        let key = res["x-api-key"].to_str().unwrap();
        assert!(key.starts_with("hdr:x-api-key:"));
        assert!(!key.contains("sk_test"));
    }

    /// The guide's table of key forms (`docs/guide/keys.md`, "Key extractors"): each row's first
    /// column and the backquoted examples of its third.
    fn guide_key_rows() -> Vec<(String, Vec<String>)> {
        let guide = include_str!("../../docs/guide/keys.md");
        let section = guide
            .split("## Key extractors (`key`)")
            .nth(1)
            .expect("the guide's keys chapter has a \"Key extractors (`key`)\" section");
        let mut rows = Vec::new();
        for line in section.lines().skip_while(|l| !l.starts_with('|')) {
            if !line.starts_with('|') {
                break;
            }
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            if cells[0].trim() == "extractor" || cells[0].starts_with("---") {
                continue;
            }
            let examples = cells
                .get(2)
                .map(|c| c.split('`').skip(1).step_by(2).map(str::to_owned).collect())
                .unwrap_or_default();
            rows.push((cells[0].trim().to_owned(), examples));
        }
        assert!(rows.len() >= 6, "the guide's key table: {rows:?}");
        rows
    }

    /// Whether `key` has the form of the guide's `example`, where
    /// `<N hex digits>` stands for exactly N lowercase hex digits.
    fn has_form(key: &str, example: &str) -> bool {
        match example.split_once('<') {
            None => key == example,
            Some((prefix, rest)) => {
                let n: usize = rest
                    .strip_suffix(" hex digits>")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("unknown placeholder in {example:?}"));
                key.strip_prefix(prefix).is_some_and(|hex| {
                    hex.len() == n && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                })
            }
        }
    }

    /// Each extractor's key of the request, by extractor name, after
    /// checking that its `key_of` gives the same key from the request's values.
    fn keys_of(parts: &http::request::Parts) -> Vec<(&'static str, String)> {
        use tower_redis_ratelimit::key::{Global, peer_addr, tuple_key};
        let s = |k: Vec<u8>| String::from_utf8(k).unwrap();
        let client_ip = ClientIp::new().trust_cidrs(["10.0.0.0/8"]).unwrap();
        let api_key = Header::parse("x-api-key").unwrap();
        let peer = peer_addr(parts).unwrap().ip();
        let value = parts.headers["x-api-key"].as_bytes();
        let route = parts
            .extensions
            .get::<axum::extract::MatchedPath>()
            .unwrap();
        // (name, what `extract` gives, what `key_of` gives)
        type Pair = (&'static str, Option<Vec<u8>>, Vec<u8>);
        let pairs: Vec<Pair> = vec![
            ("PeerIp", PeerIp.extract(parts), PeerIp.key_of(peer)),
            ("ClientIp", client_ip.extract(parts), client_ip.key_of(peer)),
            ("Header", api_key.extract(parts), api_key.key_of(value)),
            ("Path", Path.extract(parts), Path.key_of(parts.uri.path())),
            (
                "MatchedPath",
                MatchedPath.extract(parts),
                MatchedPath.key_of(route.as_str()),
            ),
            (
                "Method",
                Method.extract(parts),
                Method.key_of(&parts.method),
            ),
            ("Global", Global.extract(parts), Global.key_of()),
            (
                "(A, B)",
                (Method, Path).extract(parts),
                tuple_key([Method.key_of(&parts.method), Path.key_of(parts.uri.path())]),
            ),
        ];
        pairs
            .into_iter()
            .map(|(name, extracted, key_of)| {
                assert_eq!(extracted.as_ref(), Some(&key_of), "{name}: key_of");
                (name, s(key_of))
            })
            .collect()
    }

    #[tokio::test]
    async fn the_guides_key_forms_are_what_the_extractors_give() {
        use std::sync::{Arc, Mutex};
        let seen: Arc<Mutex<Vec<(&'static str, String)>>> = Arc::default();
        let record = {
            let seen = seen.clone();
            move |parts: http::request::Parts| {
                seen.lock().unwrap().extend(keys_of(&parts));
                async { "ok" }
            }
        };
        let requests = [
            (
                "POST",
                "/login",
                [192, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                4,
            ),
            (
                "GET",
                "/users/7",
                [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 7],
                16,
            ),
        ];
        for (method, path, octets, len) in requests {
            let ip: std::net::IpAddr = if len == 4 {
                std::net::Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3]).into()
            } else {
                std::net::Ipv6Addr::from(octets).into()
            };
            let app = Router::new()
                .route("/login", axum::routing::post(record.clone()))
                .route("/users/{id}", get(record.clone()))
                .layer(MockConnectInfo(SocketAddr::new(ip, 4711)));
            let req = http::Request::builder()
                .method(method)
                .uri(path)
                .header("x-api-key", "sk_live_readme")
                .body(axum::body::Body::empty())
                .unwrap();
            assert_eq!(app.oneshot(req).await.unwrap().status(), 200);
        }
        let seen = seen.lock().unwrap().clone();
        let keys = |names: &[&str]| -> Vec<String> {
            seen.iter()
                .filter(|(n, _)| names.contains(n))
                .map(|(_, k)| k.clone())
                .collect()
        };

        let rows = guide_key_rows();
        let peer_examples = rows
            .iter()
            .find(|(name, _)| name == "`PeerIp`")
            .map(|(_, e)| e.clone())
            .expect("a `PeerIp` row");
        for (name, examples) in &rows {
            // (the extractors a row names, and its examples)
            let (names, examples): (&[&str], Vec<String>) = if name == "`PeerIp`" {
                (&["PeerIp"], examples.clone())
            } else if name.starts_with("`ClientIp") {
                assert_eq!(
                    examples,
                    &["PeerIp"],
                    "ClientIp's keys are said to be PeerIp's"
                );
                (&["ClientIp"], peer_examples.clone())
            } else if name.starts_with("`Header") {
                (&["Header"], examples.clone())
            } else if name.starts_with("`Path`") {
                (
                    &["Path", "MatchedPath", "Method", "Global"],
                    examples.clone(),
                )
            } else if name.starts_with("`(A, B)`") {
                (&["(A, B)"], examples.clone())
            } else if name.starts_with("a closure") {
                continue;
            } else {
                panic!("a row of the guide's key table this test does not know: {name}");
            };
            assert!(!examples.is_empty(), "{name}: no example");
            let given = keys(names);
            for example in &examples {
                assert!(
                    given.iter().any(|k| has_form(k, example)),
                    "guide key table row {name}: no extractor gives the form {example:?}; they give {given:?}"
                );
            }
        }
    }
}

/// A blank credential is no credential: `x-api-key:` sent empty (or only
/// spaces and tabs) is answered as a request without it (401), and never
/// becomes the one key every blank request would share.
#[cfg(feature = "axum")]
#[tokio::test]
async fn a_blank_header_value_is_a_missing_key_answered_401() {
    use axum::Router;
    use axum::routing::get;
    use tower::ServiceExt;
    use tower_redis_ratelimit::key::Header;
    use tower_redis_ratelimit::{MemoryStore, Quota, Rate, RateLimitLayer, RateLimiter};

    let limiter = RateLimiter::builder()
        .store(MemoryStore::new())
        .quota(Quota::fixed_window(Rate::per_minute(3)))
        .build()
        .unwrap();
    let api_key = Header::parse("x-api-key").unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limiter.clone(), api_key.clone()));
    let call = |value: Option<&'static [u8]>| {
        let app = app.clone();
        async move {
            let mut req = http::Request::get("/");
            if let Some(v) = value {
                req = req.header("x-api-key", HeaderValue::from_bytes(v).unwrap());
            }
            let res = app
                .oneshot(req.body(axum::body::Body::empty()).unwrap())
                .await
                .unwrap();
            res.status()
        }
    };
    for blank in [None, Some(&b""[..]), Some(b" "), Some(b"\t"), Some(b" \t ")] {
        for _ in 0..5 {
            assert_eq!(
                call(blank).await,
                http::StatusCode::UNAUTHORIZED,
                "{blank:?}"
            );
        }
    }
    // nothing was counted under the empty value's key
    let empty = limiter.get(api_key.key_of("")).await.unwrap();
    assert_eq!(empty.remaining(), 3);
    // a real value is a key of its own, limited
    let mut admitted = 0;
    for _ in 0..5 {
        if call(Some(b"sk_live_k")).await == http::StatusCode::OK {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3);
}
