//! The `ClientIp` key extractor over arbitrary forwarding headers, peers,
//! trusted networks and settings: it never panics, always finds a key when
//! the request has a peer address, and the key is an IP key.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::HeaderValue;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use tower_redis_ratelimit::key::{ClientIp, ForwardedHeader, KeyExtractor};

#[derive(Debug, Arbitrary)]
struct Input {
    /// The connection's peer; `None`: the server recorded no peer address.
    peer: Option<Addr>,
    /// Trusted networks: an address and a prefix length.
    trusted: Vec<(Addr, u8)>,
    /// Trusted networks as text (parsed like configuration).
    trusted_text: Vec<String>,
    /// Which headers to read, in order.
    order: Vec<Which>,
    /// Header lines: which header, and its raw value.
    headers: Vec<(Which, Vec<u8>)>,
    ipv6_prefix: u8,
    max_hops: u8,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum Addr {
    V4([u8; 4]),
    V6([u8; 16]),
}

impl Addr {
    fn ip(self) -> IpAddr {
        match self {
            Addr::V4(b) => IpAddr::V4(Ipv4Addr::from(b)),
            Addr::V6(b) => IpAddr::V6(Ipv6Addr::from(b)),
        }
    }
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum Which {
    XForwardedFor,
    Forwarded,
    XRealIp,
}

impl Which {
    fn header(self) -> ForwardedHeader {
        match self {
            Which::XForwardedFor => ForwardedHeader::XForwardedFor,
            Which::Forwarded => ForwardedHeader::Forwarded,
            Which::XRealIp => ForwardedHeader::XRealIp,
        }
    }
}

fuzz_target!(|input: Input| {
    let mut client_ip = ClientIp::new()
        .headers(input.order.iter().map(|w| w.header()))
        .ipv6_prefix(input.ipv6_prefix)
        .max_hops(usize::from(input.max_hops));
    for (addr, len) in &input.trusted {
        let ip = addr.ip();
        let max = if ip.is_ipv4() { 32 } else { 128 };
        if let Ok(net) = ipnet_from(ip, len % (max + 1)) {
            client_ip = client_ip.trust(net);
        }
    }
    if let Ok(with_text) = client_ip.clone().trust_cidrs(&input.trusted_text) {
        client_ip = with_text;
    }
    let mut builder = http::Request::builder();
    for (which, value) in &input.headers {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            builder = builder.header(which.header().name(), value);
        }
    }
    let Ok(request) = builder.body(()) else {
        return;
    };
    let (mut parts, ()) = request.into_parts();
    if let Some(peer) = input.peer {
        parts.extensions.insert(SocketAddr::new(peer.ip(), 443));
    }
    let key = client_ip.extract(&parts);
    match (input.peer, key) {
        (None, None) => {}
        (Some(_), Some(key)) => assert!(key.starts_with(b"ip:"), "{key:?}"),
        (peer, key) => panic!("peer {peer:?} gave key {key:?}"),
    }
    let _ = client_ip.client_addr(&parts);
});

/// A trusted network from an address and a prefix length.
fn ipnet_from(ip: IpAddr, len: u8) -> Result<ipnet::IpNet, ipnet::PrefixLenError> {
    ipnet::IpNet::new(ip, len)
}
