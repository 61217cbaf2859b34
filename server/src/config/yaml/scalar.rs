//! Scalars as YAML 1.1 resolves them, as envoyproxy/ratelimit's YAML
//! library (`gopkg.in/yaml.v2`) reads a plain scalar: `yes` is a boolean,
//! `0x10` an integer, `1.5` a float.

/// A scalar read with YAML 1.1's resolution rules (as yaml.v2 reads them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(&'a str),
}

pub(super) fn resolve_plain(s: &str) -> Scalar<'_> {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            return Scalar::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            return Scalar::Bool(false);
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        _ => {}
    }
    let Some(first) = s.chars().next() else {
        return Scalar::Str(s);
    };
    if !matches!(first, '-' | '+' | '.' | '0'..='9') {
        return Scalar::Str(s);
    }
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    if let Some(n) = parse_int(&plain) {
        return Scalar::Int(n);
    }
    if is_float(&plain)
        && let Ok(f) = plain.parse::<f64>()
    {
        return Scalar::Float(f);
    }
    Scalar::Str(s)
}

/// An integer as Go's `strconv.ParseInt(s, 0, 64)` (or `ParseUint`) reads
/// it: an optional sign, then decimal, `0x` hex, `0o`/`0` octal or `0b`
/// binary; at most 64 bits.
fn parse_int(s: &str) -> Option<i128> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    let n = i128::from(magnitude);
    if neg {
        // ParseInt: down to i64::MIN
        (n <= i128::from(i64::MAX) + 1).then_some(-n)
    } else {
        Some(n)
    }
}

/// yaml.v2's float pattern: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'-' | b'+')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}
