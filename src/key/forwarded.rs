//! Parsers for the headers that carry a client address through proxies:
//! `X-Forwarded-For` (and `X-Real-IP`, read the same way) and RFC 7239
//! `Forwarded`.
//!
//! They never fail and never panic: whatever a hop says, it becomes a
//! [`Hop`]. Memory is bounded by the input (the chain walk of
//! [`ClientIp`](super::ClientIp) keeps only the hops it may examine).

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest node text (`[v6]:port`, quotes removed) taken for an address;
/// anything longer is [`Hop::Invalid`] without being parsed. The longest
/// real one, `[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535`, has 53
/// bytes.
const MAX_NODE_LEN: usize = 64;

/// One entry of a forwarding chain, as a proxy wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Hop {
    /// An IP address; any port, brackets and quotes are dropped.
    Ip(IpAddr),
    /// The proxy did not disclose the address: `unknown`, an obfuscated
    /// identifier (`_hidden`), or a `Forwarded` element without `for=`.
    Unknown,
    /// Not an address: garbage, non-UTF-8 bytes, a value over 64 bytes, an
    /// IPv6 zone, or a `Forwarded` element that breaks the RFC 7239 syntax.
    Invalid,
}

/// Parses one `X-Forwarded-For` (or `X-Real-IP`) value into its hops, left
/// (the original client, as claimed) to right (the hop nearest to us).
///
/// Entries are separated by commas; spaces and tabs around them and empty
/// entries are ignored. An entry is an IPv4 address with an optional
/// `:port`, an IPv6 address bare or in brackets (`[2001:db8::1]:443`),
/// `unknown`, or anything else ([`Hop::Invalid`]).
///
/// ```
/// use tower_redis_ratelimit::key::{parse_x_forwarded_for, Hop};
///
/// let hops = parse_x_forwarded_for(b"198.51.100.7:5000, [2001:db8::1], junk");
/// assert_eq!(hops, [
///     Hop::Ip("198.51.100.7".parse()?),
///     Hop::Ip("2001:db8::1".parse()?),
///     Hop::Invalid,
/// ]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_x_forwarded_for(value: &[u8]) -> Vec<Hop> {
    let mut hops: Vec<Hop> = x_forwarded_for_rev(value).collect();
    hops.reverse();
    hops
}

/// Parses one RFC 7239 `Forwarded` value into one hop per element, left to
/// right, from each element's `for=` parameter.
///
/// Parameter names are case-insensitive; values are tokens or quoted
/// strings (`for="[2001:db8::1]:4711"`); other parameters (`by`, `proto`,
/// `host`, extensions) are skipped. An element without `for=` is
/// [`Hop::Unknown`]; an element with two `for=` parameters or broken syntax
/// (an unterminated quote, a pair without `=`) is [`Hop::Invalid`], and
/// parsing resumes after the next comma.
///
/// ```
/// use tower_redis_ratelimit::key::{parse_forwarded, Hop};
///
/// let hops = parse_forwarded(br#"for=192.0.2.60;proto=http, For="[2001:db8:cafe::17]:4711", for=_hidden"#);
/// assert_eq!(hops, [
///     Hop::Ip("192.0.2.60".parse()?),
///     Hop::Ip("2001:db8:cafe::17".parse()?),
///     Hop::Unknown,
/// ]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_forwarded(value: &[u8]) -> Vec<Hop> {
    let mut hops = Vec::new();
    forwarded_elements(value, |hop| hops.push(hop));
    hops
}

/// The hops of one `X-Forwarded-For` value, rightmost first, lazily: only
/// the hops examined are parsed.
pub(super) fn x_forwarded_for_rev(value: &[u8]) -> impl Iterator<Item = Hop> + '_ {
    value.rsplit(|&b| b == b',').filter_map(|entry| {
        let entry = trim_ows(entry);
        (!entry.is_empty()).then(|| parse_node(entry))
    })
}

/// The last `keep` hops of one `Forwarded` value, rightmost first. The value
/// is tokenised from the left (quoted strings may hold commas), keeping at
/// most `keep` hops in memory.
pub(super) fn forwarded_rev(value: &[u8], keep: usize) -> impl Iterator<Item = Hop> {
    let mut last = VecDeque::with_capacity(keep.min(64));
    if keep > 0 {
        forwarded_elements(value, |hop| {
            if last.len() == keep {
                last.pop_front();
            }
            last.push_back(hop);
        });
    }
    last.into_iter().rev()
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// A node as written in either header: `1.2.3.4`, `1.2.3.4:80`,
/// `[v6]`, `[v6]:80`, bare `v6`, `unknown`, `_obfuscated`, with an
/// obfuscated port (`:_p`) allowed as in RFC 7239.
fn parse_node(raw: &[u8]) -> Hop {
    if raw.len() > MAX_NODE_LEN {
        return Hop::Invalid;
    }
    let Ok(s) = std::str::from_utf8(raw) else {
        return Hop::Invalid;
    };
    if s.eq_ignore_ascii_case("unknown") {
        return Hop::Unknown;
    }
    if let Some(rest) = s.strip_prefix('_') {
        return if is_obfuscated(rest) {
            Hop::Unknown
        } else {
            Hop::Invalid
        };
    }
    let (ip, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Hop::Invalid;
        };
        let Ok(v6) = host.parse::<Ipv6Addr>() else {
            return Hop::Invalid;
        };
        let port = if after.is_empty() {
            None
        } else if let Some(port) = after.strip_prefix(':') {
            Some(port)
        } else {
            return Hop::Invalid;
        };
        (IpAddr::V6(v6), port)
    } else if let Ok(ip) = s.parse::<IpAddr>() {
        (ip, None)
    } else if let Some((host, port)) = s.split_once(':') {
        let Ok(v4) = host.parse::<Ipv4Addr>() else {
            return Hop::Invalid;
        };
        (IpAddr::V4(v4), Some(port))
    } else {
        return Hop::Invalid;
    };
    match port {
        Some(port) if !is_port(port) => Hop::Invalid,
        _ => Hop::Ip(ip),
    }
}

fn is_port(port: &str) -> bool {
    match port.strip_prefix('_') {
        Some(obfuscated) => is_obfuscated(obfuscated),
        None => {
            (1..=5).contains(&port.len())
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok()
        }
    }
}

/// The part after `_` of an RFC 7239 obfuscated identifier.
fn is_obfuscated(rest: &str) -> bool {
    !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.i += 1;
        Some(b)
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    fn token(&mut self) -> &'a [u8] {
        let start = self.i;
        while self.peek().is_some_and(is_tchar) {
            self.i += 1;
        }
        self.s.get(start..self.i).unwrap_or_default()
    }

    /// A quoted string (the cursor is on its opening quote), unescaped into
    /// `buf`, which stops growing past `MAX_NODE_LEN + 1` bytes.
    fn quoted(&mut self, buf: &mut Vec<u8>) -> Result<(), Malformed> {
        buf.clear();
        self.i += 1;
        loop {
            let b = match self.bump().ok_or(Malformed)? {
                b'"' => return Ok(()),
                b'\\' => self.bump().ok_or(Malformed)?,
                b => b,
            };
            if buf.len() <= MAX_NODE_LEN {
                buf.push(b);
            }
        }
    }

    fn skip_past_comma(&mut self) {
        while let Some(b) = self.bump() {
            if b == b',' {
                break;
            }
        }
    }
}

/// A `Forwarded` element that breaks the syntax.
struct Malformed;

/// Calls `emit` with the hop of every element of one `Forwarded` value, left
/// to right.
fn forwarded_elements(value: &[u8], mut emit: impl FnMut(Hop)) {
    let mut cur = Cursor { s: value, i: 0 };
    let mut buf = Vec::new();
    loop {
        cur.skip_ows();
        match cur.peek() {
            None => return,
            Some(b',') => {
                cur.i += 1;
                continue;
            }
            Some(_) => {}
        }
        let hop = match element(&mut cur, &mut buf) {
            Ok(hop) => hop,
            Err(Malformed) => {
                cur.skip_past_comma();
                Hop::Invalid
            }
        };
        emit(hop);
    }
}

/// One element, up to (not including) the comma that ends it.
fn element(cur: &mut Cursor<'_>, buf: &mut Vec<u8>) -> Result<Hop, Malformed> {
    let mut node = None;
    loop {
        cur.skip_ows();
        match cur.peek() {
            None | Some(b',') => return Ok(node.unwrap_or(Hop::Unknown)),
            Some(b';') => {
                cur.i += 1;
                continue;
            }
            Some(_) => {}
        }
        let name = cur.token();
        if name.is_empty() || cur.peek() != Some(b'=') {
            return Err(Malformed);
        }
        cur.i += 1;
        let value = if cur.peek() == Some(b'"') {
            cur.quoted(buf)?;
            buf.as_slice()
        } else {
            let token = cur.token();
            if token.is_empty() {
                return Err(Malformed);
            }
            token
        };
        if name.eq_ignore_ascii_case(b"for") {
            if node.is_some() {
                return Err(Malformed);
            }
            node = Some(parse_node(value));
        }
        cur.skip_ows();
        match cur.peek() {
            None | Some(b',') => return Ok(node.unwrap_or(Hop::Unknown)),
            Some(b';') => cur.i += 1,
            Some(_) => return Err(Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Hop {
        Hop::Ip(s.parse().unwrap())
    }

    #[test]
    fn xff_entries_with_ports_brackets_and_spaces() {
        assert_eq!(
            parse_x_forwarded_for(
                b" 203.0.113.7 ,\t198.51.100.1:8080,2001:db8::1, [2001:db8::2]:443 ,[2001:db8::3]"
            ),
            [
                ip("203.0.113.7"),
                ip("198.51.100.1"),
                ip("2001:db8::1"),
                ip("2001:db8::2"),
                ip("2001:db8::3"),
            ]
        );
    }

    #[test]
    fn xff_empty_entries_are_ignored() {
        assert_eq!(parse_x_forwarded_for(b""), []);
        assert_eq!(parse_x_forwarded_for(b" , ,,"), []);
        assert_eq!(
            parse_x_forwarded_for(b",192.0.2.1,,192.0.2.2,"),
            [ip("192.0.2.1"), ip("192.0.2.2")]
        );
    }

    #[test]
    fn xff_garbage_entries_are_invalid() {
        for entry in [
            &b"hello"[..],
            b"1.2.3",
            b"1.2.3.4.5",
            b"256.1.1.1",
            b"01.2.3.4",
            b"1.2.3.4:",
            b"1.2.3.4:99999",
            b"1.2.3.4:8a",
            b"1.2.3.4:80:80",
            b"[2001:db8::1",
            b"[2001:db8::1]x",
            b"[2001:db8::1]:",
            b"[1.2.3.4]",
            b"fe80::1%eth0",
            b"_",
            b"_bad!",
            b"\xff\xfe",
            b"1.2.3.4\x00",
            b"\"1.2.3.4\"",
        ] {
            assert_eq!(
                parse_x_forwarded_for(entry),
                [Hop::Invalid],
                "{:?}",
                String::from_utf8_lossy(entry)
            );
        }
    }

    #[test]
    fn xff_unknown_and_obfuscated_are_unknown() {
        assert_eq!(
            parse_x_forwarded_for(b"unknown, UNKNOWN, _proxy-1"),
            [Hop::Unknown, Hop::Unknown, Hop::Unknown]
        );
    }

    #[test]
    fn xff_oversized_entry_is_invalid_without_allocation_per_byte() {
        let mut huge = vec![b'1'; 64 * 1024];
        huge.extend_from_slice(b", 192.0.2.1");
        assert_eq!(
            parse_x_forwarded_for(&huge),
            [Hop::Invalid, ip("192.0.2.1")]
        );
    }

    #[test]
    fn xff_ipv4_mapped_is_kept_as_written() {
        // Normalisation to IPv4 is the extractor's job, not the parser's.
        assert_eq!(
            parse_x_forwarded_for(b"::ffff:192.0.2.1"),
            [ip("::ffff:192.0.2.1")]
        );
    }

    #[test]
    fn forwarded_rfc7239_examples() {
        assert_eq!(parse_forwarded(br#"for="_gazonk""#), [Hop::Unknown]);
        assert_eq!(
            parse_forwarded(br#"For="[2001:db8:cafe::17]:4711""#),
            [ip("2001:db8:cafe::17")]
        );
        assert_eq!(
            parse_forwarded(b"for=192.0.2.60;proto=http;by=203.0.113.43"),
            [ip("192.0.2.60")]
        );
        assert_eq!(
            parse_forwarded(b"for=192.0.2.43, for=198.51.100.17"),
            [ip("192.0.2.43"), ip("198.51.100.17")]
        );
        assert_eq!(
            parse_forwarded(br#"for=unknown, for="[2001:db8::1]:_abc""#),
            [Hop::Unknown, ip("2001:db8::1")]
        );
    }

    #[test]
    fn forwarded_names_are_case_insensitive_and_order_free() {
        assert_eq!(
            parse_forwarded(br#"proto=https; FOR="192.0.2.1:80" ;By=x"#),
            [ip("192.0.2.1")]
        );
    }

    #[test]
    fn forwarded_quoted_strings_may_hold_commas_and_escapes() {
        assert_eq!(
            parse_forwarded(br#"for=192.0.2.1;ext="a, b; c\"", for="\[2001:db8::5\]""#),
            [ip("192.0.2.1"), ip("2001:db8::5")]
        );
    }

    #[test]
    fn forwarded_element_without_for_is_unknown() {
        assert_eq!(
            parse_forwarded(b"proto=https;by=10.0.0.1, for=192.0.2.1"),
            [Hop::Unknown, ip("192.0.2.1")]
        );
        assert_eq!(parse_forwarded(b";;"), [Hop::Unknown]);
    }

    #[test]
    fn forwarded_malformed_elements_are_invalid_and_parsing_resumes() {
        assert_eq!(
            parse_forwarded(b"for=192.0.2.1;for=192.0.2.2, for=192.0.2.3"),
            [Hop::Invalid, ip("192.0.2.3")]
        );
        assert_eq!(
            parse_forwarded(b"for, for=192.0.2.3"),
            [Hop::Invalid, ip("192.0.2.3")]
        );
        assert_eq!(
            parse_forwarded(b"for=, for=192.0.2.3"),
            [Hop::Invalid, ip("192.0.2.3")]
        );
        assert_eq!(
            parse_forwarded(b"for=192.0.2.1 junk, for=192.0.2.3"),
            [Hop::Invalid, ip("192.0.2.3")]
        );
        assert_eq!(
            parse_forwarded(b"for=192.0.2.3, for=\"192.0.2.1, for=192.0.2.4"),
            [ip("192.0.2.3"), Hop::Invalid]
        );
        // RFC 7239 requires quotes around IPv6 (":" is not a token byte).
        assert_eq!(parse_forwarded(b"for=2001:db8::1"), [Hop::Invalid]);
        assert_eq!(parse_forwarded(b"for=\xff"), [Hop::Invalid]);
        assert_eq!(parse_forwarded(b"for=\"\xff\""), [Hop::Invalid]);
    }

    #[test]
    fn forwarded_oversized_quoted_value_is_invalid() {
        let mut value = b"for=\"".to_vec();
        value.extend(std::iter::repeat_n(b'1', 64 * 1024));
        value.extend_from_slice(b"\", for=192.0.2.9");
        assert_eq!(parse_forwarded(&value), [Hop::Invalid, ip("192.0.2.9")]);
    }

    #[test]
    fn forwarded_rev_keeps_only_the_last_hops() {
        let value = b"for=192.0.2.1, for=192.0.2.2, for=192.0.2.3";
        assert_eq!(
            forwarded_rev(value, 2).collect::<Vec<_>>(),
            [ip("192.0.2.3"), ip("192.0.2.2")]
        );
        assert_eq!(forwarded_rev(value, 0).count(), 0);
    }
}
