//! Label values: bounded in bytes, and escaped for the exposition.

use std::borrow::Cow;

/// The most bytes of a label value ([`crate::metrics`]): a longer one is
/// cut at a character boundary to at most 111 bytes and suffixed with `~`
/// and 16 hex digits of a 64-bit FNV-1a hash of the whole value.
pub const MAX_LABEL_BYTES: usize = 128;

/// `~` and 16 hex digits.
const SUFFIX_BYTES: usize = 17;

/// `value` if it has at most [`MAX_LABEL_BYTES`] bytes, else its start and
/// the hash of all of it (distinct values stay distinct, short of a hash
/// collision).
pub(crate) fn bound(value: &str) -> Cow<'_, str> {
    if value.len() <= MAX_LABEL_BYTES {
        return Cow::Borrowed(value);
    }
    let mut cut = MAX_LABEL_BYTES - SUFFIX_BYTES;
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in value.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    Cow::Owned(format!("{}~{hash:016x}", &value[..cut]))
}

/// How many bytes `value` takes escaped ([`push_escaped`]).
pub(crate) fn escaped_len(value: &str) -> usize {
    value.len()
        + value
            .bytes()
            .filter(|b| matches!(b, b'\\' | b'"' | b'\n'))
            .count()
}

/// Appends `value` to `out` as the exposition format escapes a label
/// value: `\` as `\\`, `"` as `\"`, a line feed as `\n`.
pub(crate) fn push_escaped(out: &mut String, value: &str) {
    let mut rest = value;
    while let Some(i) = rest.find(['\\', '"', '\n']) {
        out.push_str(&rest[..i]);
        out.push_str(match rest.as_bytes()[i] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        });
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_value_is_kept_as_is() {
        let v = "x".repeat(MAX_LABEL_BYTES);
        assert!(matches!(bound(&v), Cow::Borrowed(b) if b == v));
        assert!(matches!(bound(""), Cow::Borrowed("")));
    }

    #[test]
    fn a_long_value_is_cut_and_hashed_into_the_byte_bound() {
        let a = format!("{}a", "x".repeat(50_000));
        let b = format!("{}b", "x".repeat(50_000));
        let (ba, bb) = (bound(&a), bound(&b));
        assert_eq!(ba.len(), MAX_LABEL_BYTES);
        assert_eq!(bb.len(), MAX_LABEL_BYTES);
        // same start, distinct hashes: two series
        assert_ne!(ba, bb);
        assert!(ba.starts_with(&"x".repeat(111)), "{ba}");
        assert_eq!(ba.as_bytes()[111], b'~');
        assert!(ba[112..].bytes().all(|c| c.is_ascii_hexdigit()), "{ba}");
        // stable: the same value, the same label (from one start to the next)
        assert_eq!(bound(&a), ba);
        assert_eq!(
            bound(&"x".repeat(200)),
            format!("{}~{}", "x".repeat(111), "6ee14c8caecd5c45")
        );
    }

    #[test]
    fn a_long_value_is_cut_on_a_character_boundary() {
        // 2 bytes then 3-byte characters: 111 is not a boundary, 110 is
        let v = format!("ab{}", "€".repeat(100));
        let b = bound(&v);
        assert!(b.len() <= MAX_LABEL_BYTES);
        let (head, _) = b.split_once('~').expect("suffix");
        assert_eq!(head, format!("ab{}", "€".repeat(36)));
    }

    #[test]
    fn escapes_as_the_exposition_format() {
        let v = "q\"b\\s\nn";
        let mut out = String::new();
        push_escaped(&mut out, v);
        assert_eq!(out, "q\\\"b\\\\s\\nn");
        assert_eq!(escaped_len(v), out.len());
        let mut out = String::new();
        push_escaped(&mut out, "plain");
        assert_eq!(out, "plain");
    }
}
