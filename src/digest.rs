//! A stable digest for keys and key parts that must not reveal their input.
//!
//! Depends on nothing else in the crate: both the limiter (over-long or
//! unsafe user keys) and the key extractors (secret header values) use it.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// The first 128 bits of SHA-256, in hex: a stable digest that does not reveal its input.
pub(crate) fn hash_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(32);
    for b in &digest[..16] {
        let _ = write!(out, "{b:02x}");
    }
    out
}
