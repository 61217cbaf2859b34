//! Storage-key encoding: how a user key is stored (verbatim, or hashed
//! when it could steer a Redis Cluster slot or bloat memory), and the
//! storage keys of its quotas under a limiter's prefix.

use std::borrow::Cow;

use crate::digest::hash_hex;

/// Longest user key stored verbatim; longer keys are hashed.
pub const MAX_VERBATIM_KEY_LEN: usize = 128;

/// A limiter's storage keys: `{<prefix>:<user>}` and, per quota (and the
/// block key, if any), the suffix appended to it.
#[derive(Debug, Clone)]
pub(super) struct KeyScheme {
    prefix: String,
    /// `:<quota id>` per quota, appended to the hash-tagged base key (and
    /// `:!`, the block key, last when the limiter blocks).
    suffixes: Vec<String>,
}

impl KeyScheme {
    pub(super) fn new(prefix: String, suffixes: Vec<String>) -> Self {
        KeyScheme { prefix, suffixes }
    }

    /// The prefix of every storage key.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The suffix of each storage key.
    pub(super) fn suffixes(&self) -> &[String] {
        &self.suffixes
    }

    /// The base and storage keys of a user key as [`storable_key`] gives it.
    pub(super) fn of(&self, user: &[u8]) -> (String, Vec<String>) {
        let base = self.base(user);
        let keys = self.keys(&base);
        (base, keys)
    }

    /// `{<prefix>:<user>}`, `user` as [`storable_key`] gives it.
    fn base(&self, user: &[u8]) -> String {
        let user = String::from_utf8_lossy(user);
        let mut base = String::with_capacity(self.prefix.len() + user.len() + 3);
        base.push('{');
        base.push_str(&self.prefix);
        base.push(':');
        base.push_str(&user);
        base.push('}');
        base
    }

    fn keys(&self, base: &str) -> Vec<String> {
        self.suffixes
            .iter()
            .map(|suffix| {
                let mut key = String::with_capacity(base.len() + suffix.len());
                key.push_str(base);
                key.push_str(suffix);
                key
            })
            .collect()
    }
}

/// The user key as it appears inside the hash tag: UTF-8, always.
#[inline]
pub(super) fn storable_key(key: &[u8]) -> Cow<'_, [u8]> {
    if key.len() <= MAX_VERBATIM_KEY_LEN && key.first() != Some(&b'~') && verbatim(key) {
        return Cow::Borrowed(key);
    }
    Cow::Owned(hashed_key(key))
}

/// A key that may not be stored as is, as it is stored: `~` and its hash.
#[cold]
#[inline(never)]
fn hashed_key(key: &[u8]) -> Vec<u8> {
    format!("~{}", hash_hex(key)).into_bytes()
}

/// Whether all eight bytes of `w` are printable ASCII but braces.
fn plain_word(w: u64) -> bool {
    not_plain(w) == 0
}

/// The high bit of each byte of `w` that is not printable ASCII, or a brace
/// (and maybe of bytes above one that is).
#[inline(always)]
fn not_plain(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // a byte below `n` (n <= 128), or equal to zero
    let less = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH;
    let zero = |x: u64| less(x, 1);
    let controls = less(w, 0x20);
    // a byte above 0x7e: 0x7f (DEL) or not ASCII
    let above = (w.wrapping_add(ONES) | w) & HIGH;
    let braces = zero(w ^ (ONES * u64::from(b'{'))) | zero(w ^ (ONES * u64::from(b'}')));
    controls | above | braces
}

/// Whether a key may be stored as is: UTF-8 without braces or control
/// characters.
#[inline]
fn verbatim(key: &[u8]) -> bool {
    plain_ascii(key) || verbatim_utf8(key)
}

/// Whether every byte of `key` is printable ASCII but a brace: the usual
/// keys, eight bytes at a time (the last word overlaps the one before it; a
/// short key is padded with spaces).
#[inline]
fn plain_ascii(key: &[u8]) -> bool {
    let word = |w: &[u8]| <[u8; 8]>::try_from(w).is_ok_and(|w| plain_word(u64::from_le_bytes(w)));
    match key.len() {
        0 => true,
        // (short keys as overlapping loads, not a copy to the stack that
        // the word would then be read back from)
        n if n < 4 => {
            let b = |i: usize| u64::from(key[i]);
            // (bytes 3 to 7 are spaces)
            plain_word(b(0) | b(n / 2) << 8 | b(n - 1) << 16 | 0x2020_2020_2000_0000)
        }
        n if n < 8 => {
            let half = |w: &[u8]| <[u8; 4]>::try_from(w).map_or(0, u32::from_le_bytes);
            plain_word(u64::from(half(&key[..4])) | u64::from(half(&key[n - 4..])) << 32)
        }
        // (the usual key: two overlapping words, checked at once)
        8..=16 => match (key.first_chunk::<8>(), key.last_chunk::<8>()) {
            (Some(a), Some(b)) => {
                not_plain(u64::from_le_bytes(*a)) | not_plain(u64::from_le_bytes(*b)) == 0
            }
            _ => false,
        },
        n => key.chunks_exact(8).all(word) && word(&key[n - 8..]),
    }
}

/// [`verbatim`] for a key that is not all printable ASCII.
#[cold]
#[inline(never)]
fn verbatim_utf8(key: &[u8]) -> bool {
    std::str::from_utf8(key)
        .is_ok_and(|s| !s.chars().any(|c| c == '{' || c == '}' || c.is_control()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_could_steer_slots_or_bloat_memory_are_hashed() {
        assert_eq!(storable_key(b"user:42"), &b"user:42"[..]);
        assert_eq!(storable_key("caf\u{e9}".as_bytes()), "caf\u{e9}".as_bytes());
        assert!(
            storable_key("\u{85}".as_bytes()).starts_with(b"~"),
            "C1 control"
        );
        for bad in [
            &b"a{b}"[..],
            b"}",
            b"\xff\xfe",
            b"line\nbreak",
            b"~looks-hashed",
            &[b'x'; 129][..],
        ] {
            let k = storable_key(bad);
            assert!(k.starts_with(b"~") && k.len() == 33, "{k:?}");
        }
        assert_eq!(storable_key(&[b'x'; 128]).len(), 128);
        assert_ne!(storable_key(b"a{b}"), storable_key(b"a{c}"));
    }

    #[test]
    fn the_word_at_a_time_check_agrees_with_the_bytewise_one() {
        let bytewise = |k: &[u8]| {
            std::str::from_utf8(k)
                .is_ok_and(|s| !s.chars().any(|c| c == '{' || c == '}' || c.is_control()))
        };
        let base = b"user:1234567890abcdefg";
        for b in 0..=255u8 {
            // short keys (padded), one word, overlapping last words
            for len in 1..=base.len() {
                for at in 0..len {
                    let mut k = base[..len].to_vec();
                    k[at] = b;
                    assert_eq!(verbatim(&k), bytewise(&k), "{k:?}");
                    // (the fast check alone: exact too, never a false "no")
                    let ascii = k
                        .iter()
                        .all(|&c| (b' '..=b'~').contains(&c) && c != b'{' && c != b'}');
                    assert_eq!(plain_ascii(&k), ascii, "{k:?}");
                }
            }
            let plain = (b' '..=b'~').contains(&b) && b != b'{' && b != b'}';
            assert_eq!(plain_word(u64::from_le_bytes([b; 8])), plain, "{b}");
        }
        assert!(verbatim(b""));
    }
}
