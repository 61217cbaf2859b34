//! The IETF rate-limit header fields as text, for code that writes them
//! without the layer: the workspace's Envoy service puts them in its
//! answers, and a service of your own can too.
//!
//! The values are lists of structured fields (RFC 8941) as
//! draft-ietf-httpapi-ratelimit-headers writes them, the same bytes the
//! layer's [`HeaderStyle::Ietf`](super::HeaderStyle::Ietf) sends:
//!
//! ```
//! use tower_redis_ratelimit::middleware::fields;
//!
//! let mut policy = String::new();
//! fields::push_policy_item(&mut policy, "minute", 60, 60);
//! fields::push_policy_item(&mut policy, "day", 10_000, 86_400);
//! assert_eq!(policy, r#""minute";q=60;w=60, "day";q=10000;w=86400"#);
//!
//! let mut ratelimit = String::new();
//! fields::push_ratelimit_item(&mut ratelimit, "minute", 59, Some(1));
//! assert_eq!(ratelimit, r#""minute";r=59;t=1"#);
//! ```

use std::fmt::Write as _;

/// Appends `value` as a structured-field string (RFC 8941 §3.3.3): quoted,
/// `"` and `\` escaped, anything outside printable ASCII replaced by `?`
/// (a header value holds nothing else).
pub fn push_string(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

/// Appends one item of a `RateLimit-Policy` list: the quota's `name`, `q`
/// the units a client may send at once, `w` the seconds in which that
/// much comes back (`"minute";q=60;w=60`), after `, ` when `out` already
/// holds an item.
pub fn push_policy_item(out: &mut String, name: &str, quota: u64, window_secs: u64) {
    separate(out);
    push_string(out, name);
    let _ = write!(out, ";q={quota};w={window_secs}");
}

/// Appends one item of a `RateLimit` list: the quota's `name`, `r` what is
/// left, `t` the seconds until it is whole again (on a denial, the
/// `Retry-After`; `None` for a quota with no time of reset), after `, `
/// when `out` already holds an item.
pub fn push_ratelimit_item(out: &mut String, name: &str, remaining: u64, t: Option<u64>) {
    separate(out);
    push_string(out, name);
    let _ = write!(out, ";r={remaining}");
    if let Some(t) = t {
        let _ = write!(out, ";t={t}");
    }
}

/// `, ` between the items of a list.
fn separate(out: &mut String) {
    if !out.is_empty() {
        out.push_str(", ");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_sf_strings() {
        let mut s = String::new();
        push_string(&mut s, "a\"b\\c\u{e9}\n");
        assert_eq!(s, r#""a\"b\\c??""#);
    }

    #[test]
    fn items_are_separated() {
        let mut s = String::new();
        push_ratelimit_item(&mut s, "a", 1, None);
        push_ratelimit_item(&mut s, "b", 0, Some(3));
        assert_eq!(s, r#""a";r=1, "b";r=0;t=3"#);
    }
}
