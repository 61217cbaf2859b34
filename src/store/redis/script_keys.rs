//! Declared keys only: a check that every key a script reads or writes comes
//! from `KEYS` (Redis Cluster's rule, and Dragonfly's default), never a name
//! built inside Lua.
//!
//! A small Lua scan, enough for the crate's scripts and strict where it is not
//! sure: it tokenizes the script (comments and strings apart), finds every
//! `redis.call`/`redis.pcall`, and for each argument its command takes as a
//! key ([`key_positions`]; an unknown command fails, so the table stays
//! complete) asks whether the argument is `KEYS[...]` or a name every binding
//! of which is one: a `local` or plain assignment from such an expression, or
//! a function parameter that every call of its function passes such an
//! expression (functions called through an alias such as `local f = G[id]`
//! followed; a function that escapes otherwise has parameters of unknown
//! value). Names are taken script-wide, not per scope: a name bound anywhere
//! to something else is not a key, which can only fail more, never pass more.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Str(String),
    Num,
    Sym(&'static str),
}

const SYMS: [&str; 27] = [
    "...", "==", "~=", "<=", ">=", "..", "::", "+", "-", "*", "/", "%", "^", "#", "<", ">", "=",
    "(", ")", "{", "}", "[", "]", ";", ":", ",", ".",
];

/// `[[`, `[=[`, ...: the level of a long bracket opening at `s[i..]`.
fn long_open(s: &[u8], i: usize) -> Option<usize> {
    if s.get(i) != Some(&b'[') {
        return None;
    }
    let mut j = i + 1;
    while s.get(j) == Some(&b'=') {
        j += 1;
    }
    (s.get(j) == Some(&b'[')).then_some(j - i - 1)
}

/// The index just past the long bracket of `level` closing after `from`.
fn long_close(s: &[u8], from: usize, level: usize) -> Result<usize, String> {
    let close = format!("]{}]", "=".repeat(level));
    let rest = &s[from..];
    rest.windows(close.len())
        .position(|w| w == close.as_bytes())
        .map(|p| from + p + close.len())
        .ok_or_else(|| "unterminated long bracket".to_owned())
}

fn tokenize(src: &str) -> Result<Vec<Tok>, String> {
    let s = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if s[i..].starts_with(b"--") {
            if let Some(level) = long_open(s, i + 2) {
                i = long_close(s, i + 4 + level, level)?;
            } else {
                while i < s.len() && s[i] != b'\n' {
                    i += 1;
                }
            }
        } else if let Some(level) = long_open(s, i) {
            let end = long_close(s, i + 2 + level, level)?;
            out.push(Tok::Str(src[i + 2 + level..end - 2 - level].to_owned()));
            i = end;
        } else if c == b'\'' || c == b'"' {
            let mut j = i + 1;
            let mut text = String::new();
            loop {
                match s.get(j) {
                    None | Some(b'\n') => return Err("unterminated string".to_owned()),
                    Some(&b'\\') => {
                        j += 2;
                        text.push('\\');
                    }
                    Some(&q) if q == c => break,
                    Some(&b) => {
                        text.push(char::from(b));
                        j += 1;
                    }
                }
            }
            out.push(Tok::Str(text));
            i = j + 1;
        } else if c.is_ascii_digit() || (c == b'.' && s.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'.') {
                // exponents with a sign: 1e-5
                if (s[i] == b'e' || s[i] == b'E') && matches!(s.get(i + 1), Some(b'-' | b'+')) {
                    i += 1;
                }
                i += 1;
            }
            out.push(Tok::Num);
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Name(src[start..i].to_owned()));
        } else if let Some(sym) = SYMS.iter().find(|sym| s[i..].starts_with(sym.as_bytes())) {
            out.push(Tok::Sym(sym));
            i += sym.len();
        } else {
            return Err(format!("unexpected character {:?}", char::from(c)));
        }
    }
    Ok(out)
}

fn is_sym(t: Option<&Tok>, sym: &str) -> bool {
    matches!(t, Some(Tok::Sym(s)) if *s == sym)
}

fn name(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Name(n)) => Some(n),
        _ => None,
    }
}

const KEYWORDS: [&str; 21] = [
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
    "local", "nil", "not", "or", "repeat", "return", "then", "true", "until",
];

/// The index of the bracket closing the one at `open`.
fn matching(toks: &[Tok], open: usize) -> Result<usize, String> {
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Sym("(" | "[" | "{") => depth += 1,
            Tok::Sym(")" | "]" | "}") => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err("unbalanced brackets".to_owned())
}

/// The index of the `end` closing the `function` at `at`.
fn function_end(toks: &[Tok], at: usize) -> Result<usize, String> {
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().skip(at) {
        match name(Some(t)) {
            Some("function" | "if" | "do" | "repeat") => depth += 1,
            Some("end" | "until") => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err("unterminated function".to_owned())
}

/// The end (exclusive) of the expression starting at `i`.
fn expr_end(toks: &[Tok], mut i: usize) -> Result<usize, String> {
    loop {
        // unary operators
        while is_sym(toks.get(i), "-")
            || is_sym(toks.get(i), "#")
            || name(toks.get(i)) == Some("not")
        {
            i += 1;
        }
        // a primary expression and its suffixes
        match toks.get(i) {
            Some(Tok::Name(n)) if n == "function" => i = function_end(toks, i)? + 1,
            Some(Tok::Name(n))
                if !KEYWORDS.contains(&n.as_str()) || n == "nil" || n == "true" || n == "false" =>
            {
                i += 1
            }
            Some(Tok::Str(_) | Tok::Num) | Some(Tok::Sym("...")) => i += 1,
            Some(Tok::Sym("(" | "{")) => i = matching(toks, i)? + 1,
            other => return Err(format!("expression expected, found {other:?}")),
        }
        loop {
            match toks.get(i) {
                Some(Tok::Sym("[" | "(" | "{")) => i = matching(toks, i)? + 1,
                Some(Tok::Str(_)) => i += 1,
                Some(Tok::Sym("." | ":")) => i += 2,
                _ => break,
            }
        }
        let binary = matches!(
            toks.get(i),
            Some(Tok::Sym(
                "+" | "-" | "*" | "/" | "%" | "^" | ".." | "==" | "~=" | "<" | ">" | "<=" | ">="
            ))
        ) || matches!(name(toks.get(i)), Some("and" | "or"));
        if !binary {
            return Ok(i);
        }
        i += 1;
    }
}

/// The comma-separated expressions from `i`: their ranges.
fn expr_list(toks: &[Tok], mut i: usize) -> Result<Vec<(usize, usize)>, String> {
    let mut out = Vec::new();
    loop {
        let end = expr_end(toks, i)?;
        out.push((i, end));
        if !is_sym(toks.get(end), ",") {
            return Ok(out);
        }
        i = end + 1;
    }
}

/// The arguments of the call whose `(` is at `open`.
fn call_args(toks: &[Tok], open: usize) -> Result<Vec<(usize, usize)>, String> {
    let close = matching(toks, open)?;
    if close == open + 1 {
        return Ok(Vec::new());
    }
    let args = expr_list(toks, open + 1)?;
    match args.last() {
        Some(&(_, end)) if end == close => Ok(args),
        _ => Err("malformed call arguments".to_owned()),
    }
}

/// What a name is bound to.
#[derive(Debug)]
enum Binding {
    /// An expression (a token range).
    Expr(usize, usize),
    /// Parameter `index` (0-based) of the functions named `root`.
    Param(String, usize),
    /// Something else (a generic `for` variable, ...).
    Opaque,
}

/// Which arguments (1-based, after the command's name) of `cmd` are keys:
/// `None` for a command the table does not know.
fn key_positions(cmd: &str, nargs: usize) -> Option<Vec<usize>> {
    match cmd {
        "TIME" => Some(Vec::new()),
        "GET" | "SET" | "INCR" | "INCRBY" | "DECR" | "DECRBY" | "PEXPIRE" | "PTTL" | "HINCRBY"
        | "HMGET" | "HSET" | "LINDEX" | "LLEN" | "LPUSH" | "LREM" | "LTRIM" | "ZADD" | "ZCOUNT"
        | "ZRANGE" | "ZREMRANGEBYSCORE" | "ZRANGEBYSCORE" | "ZREM" | "ZCARD" => Some(vec![1]),
        "DEL" | "EXISTS" | "UNLINK" => Some((1..=nargs).collect()),
        _ => None,
    }
}

/// Every `redis.call`/`redis.pcall` of `src` whose key arguments do not all
/// come from `KEYS`, one message each (empty: the script declares every key).
pub(super) fn undeclared_keys(src: &str) -> Result<Vec<String>, String> {
    let toks = tokenize(src)?;
    let mut bindings: BTreeMap<String, Vec<Binding>> = BTreeMap::new();
    // function roots: `local function f(`, `f = function(`, `F[..] = function(`
    let mut params: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut definitions = BTreeSet::new(); // token index of each root name in a definition
    let mut bind = |n: &str, b: Binding| bindings.entry(n.to_owned()).or_default().push(b);
    let mut i = 0;
    while i < toks.len() {
        let prev = i.checked_sub(1).and_then(|p| toks.get(p));
        let after_dot = is_sym(prev, ".") || is_sym(prev, ":");
        match name(toks.get(i)) {
            Some("function") => {
                // its parameters: the root is the name defined, if any
                let root = if name(prev) == Some("local") {
                    None
                } else if is_sym(prev, "=") {
                    // `f = function` or `F[..] = function`
                    let mut j = i - 1;
                    if is_sym(toks.get(j - 1), "]") {
                        let mut depth = 0;
                        j -= 1;
                        loop {
                            match toks.get(j) {
                                Some(Tok::Sym("]")) => depth += 1,
                                Some(Tok::Sym("[")) => {
                                    depth -= 1;
                                    if depth == 0 {
                                        break;
                                    }
                                }
                                _ => {}
                            }
                            j -= 1;
                        }
                    }
                    let r = j - 1;
                    definitions.insert(r);
                    name(toks.get(r)).map(str::to_owned)
                } else {
                    None
                };
                let (root, open) = match (root, name(toks.get(i + 1))) {
                    (Some(r), _) => (r, i + 1),
                    (None, Some(n)) => {
                        definitions.insert(i + 1);
                        (n.to_owned(), i + 2)
                    }
                    (None, None) => (format!("<anonymous {i}>"), i + 1),
                };
                if !is_sym(toks.get(open), "(") {
                    return Err(format!("function {root}: parameters expected"));
                }
                let close = matching(&toks, open)?;
                let ps: Vec<String> = toks[open + 1..close]
                    .iter()
                    .filter_map(|t| name(Some(t)).map(str::to_owned))
                    .collect();
                for (k, p) in ps.iter().enumerate() {
                    bind(p, Binding::Param(root.clone(), k));
                }
                params.entry(root).or_default().extend(ps);
                i = close + 1;
                continue;
            }
            Some("for") => {
                let mut j = i + 1;
                while let Some(n) = name(toks.get(j)) {
                    if n == "in" {
                        break;
                    }
                    bind(n, Binding::Opaque);
                    j += 1;
                    if is_sym(toks.get(j), ",") {
                        j += 1;
                    }
                }
                i = j;
                continue;
            }
            Some(n) if !KEYWORDS.contains(&n) && !after_dot => {
                // `a, b = e1, e2` (or after `local`)
                let mut names = vec![n.to_owned()];
                let mut j = i + 1;
                while is_sym(toks.get(j), ",") {
                    match name(toks.get(j + 1)) {
                        Some(m) => names.push(m.to_owned()),
                        None => break,
                    }
                    j += 2;
                }
                if is_sym(toks.get(j), "=") && !is_sym(toks.get(j + 1), "=") {
                    let exprs = expr_list(&toks, j + 1)?;
                    for (k, m) in names.iter().enumerate() {
                        match exprs.get(k) {
                            Some(&(a, b)) => bind(m, Binding::Expr(a, b)),
                            None => bind(m, Binding::Opaque),
                        }
                    }
                    i = j + 1;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }

    // aliases of function roots: a name every binding of which is `R` or `R[..]`
    let root_of = |a: usize, b: usize| -> Option<String> {
        let r = name(toks.get(a)).filter(|r| params.contains_key(*r))?;
        let whole = b == a + 1
            || (is_sym(toks.get(a + 1), "[") && matching(&toks, a + 1).ok() == Some(b - 1));
        whole.then(|| r.to_owned())
    };
    let mut aliases: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut alias_exprs = BTreeSet::new();
    for (n, bs) in &bindings {
        let roots: Option<BTreeSet<String>> = bs
            .iter()
            .map(|b| match *b {
                Binding::Expr(a, e) => root_of(a, e),
                _ => None,
            })
            .collect();
        if let Some(roots) = roots {
            for b in bs {
                if let Binding::Expr(a, _) = *b {
                    alias_exprs.insert(a);
                }
            }
            aliases.insert(n.clone(), roots);
        }
    }
    // every call of each root, directly or through an alias; a root used any
    // other way escapes (its parameters are of unknown value)
    let mut calls: BTreeMap<String, Vec<Vec<(usize, usize)>>> = BTreeMap::new();
    let mut escaped = BTreeSet::new();
    for (i, t) in toks.iter().enumerate() {
        let Some(n) = name(Some(t)) else { continue };
        let roots: BTreeSet<String> = if params.contains_key(n) {
            [n.to_owned()].into()
        } else if let Some(rs) = aliases.get(n) {
            rs.clone()
        } else {
            continue;
        };
        let prev = i.checked_sub(1).and_then(|p| toks.get(p));
        if definitions.contains(&i) || alias_exprs.contains(&i) || is_sym(prev, ".") {
            continue;
        }
        // `local S = {}` / a binding of the alias itself
        if is_sym(toks.get(i + 1), "=") || is_sym(toks.get(i + 1), ",") {
            continue;
        }
        let mut open = i + 1;
        if is_sym(toks.get(open), "[") {
            open = matching(&toks, open)? + 1;
        }
        if is_sym(toks.get(open), "(") {
            let args = call_args(&toks, open)?;
            for r in roots {
                calls.entry(r).or_default().push(args.clone());
            }
        } else if name(prev) == Some("if")
            || name(prev) == Some("and")
            || name(prev) == Some("not")
            || name(prev) == Some("elseif")
        {
            // a test of the alias (`if f and set then`) lets nothing escape
        } else {
            escaped.extend(roots);
        }
    }

    // the names whose every binding is a key (greatest fixed point)
    let mut keys: BTreeSet<String> = bindings.keys().cloned().collect();
    let is_key_expr = |keys: &BTreeSet<String>, a: usize, b: usize| -> bool {
        if name(toks.get(a)) == Some("KEYS") {
            return is_sym(toks.get(a + 1), "[") && matching(&toks, a + 1).ok() == Some(b - 1);
        }
        b == a + 1 && name(toks.get(a)).is_some_and(|n| keys.contains(n))
    };
    loop {
        let not_keys: Vec<String> = keys
            .iter()
            .filter(|n| {
                !bindings[*n].iter().all(|b| match b {
                    Binding::Expr(a, e) => is_key_expr(&keys, *a, *e),
                    Binding::Param(root, k) => {
                        !escaped.contains(root)
                            && calls.get(root).is_some_and(|cs| {
                                !cs.is_empty()
                                    && cs.iter().all(|args| {
                                        args.get(*k).is_some_and(|&(a, e)| is_key_expr(&keys, a, e))
                                    })
                            })
                    }
                    Binding::Opaque => false,
                })
            })
            .cloned()
            .collect();
        if not_keys.is_empty() {
            break;
        }
        for n in not_keys {
            keys.remove(&n);
        }
    }

    let show = |a: usize, b: usize| -> String {
        toks[a..b]
            .iter()
            .map(|t| match t {
                Tok::Name(n) => n.clone(),
                Tok::Str(s) => format!("'{s}'"),
                Tok::Num => "<n>".to_owned(),
                Tok::Sym(s) => (*s).to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut problems = Vec::new();
    for i in 0..toks.len() {
        if name(toks.get(i)) != Some("redis") || !is_sym(toks.get(i + 1), ".") {
            continue;
        }
        let f = name(toks.get(i + 2));
        if !matches!(f, Some("call" | "pcall")) {
            continue;
        }
        if !is_sym(toks.get(i + 3), "(") {
            problems.push(format!("redis.{} used other than called", f.unwrap_or("?")));
            continue;
        }
        let args = call_args(&toks, i + 3)?;
        let Some(Tok::Str(cmd)) = args
            .first()
            .filter(|&&(a, b)| b == a + 1)
            .map(|&(a, _)| &toks[a])
        else {
            problems.push(format!(
                "a command that is not a literal: {}",
                show(i, i + 4)
            ));
            continue;
        };
        let cmd = cmd.to_ascii_uppercase();
        let Some(positions) = key_positions(&cmd, args.len() - 1) else {
            problems.push(format!(
                "{cmd}: which of its arguments are keys is not known"
            ));
            continue;
        };
        for p in positions {
            match args.get(p) {
                Some(&(a, b)) if is_key_expr(&keys, a, b) => {}
                Some(&(a, b)) => problems.push(format!(
                    "{cmd}: key argument {p} is not from KEYS: {}",
                    show(a, b)
                )),
                None => problems.push(format!("{cmd}: key argument {p} missing")),
            }
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(src: &str) -> Vec<String> {
        undeclared_keys(src).unwrap()
    }

    #[test]
    fn keys_from_keys_pass() {
        assert_eq!(check("redis.call('GET', KEYS[1])"), Vec::<String>::new());
        assert!(check("local k = KEYS[2]\nredis.call('SET', k, 'v', 'PX', 5)").is_empty());
        assert!(check("local a, b = KEYS[1], ARGV[1]\nredis.call('INCRBY', a, b)").is_empty());
        assert!(
            check(
                "local function f(key, n) return redis.call('PTTL', key) end\n\
             for i = 1, #KEYS do f(KEYS[i], 3) end"
            )
            .is_empty()
        );
        assert!(
            check(
                "local G = {}\nG[1] = function(key, u) redis.call('DEL', key) end\n\
             local f = G[tonumber(ARGV[1])]\nif f then f(KEYS[1], 2) end"
            )
            .is_empty()
        );
        assert!(check("redis.call('TIME') -- redis.call('GET', 'x')").is_empty());
    }

    #[test]
    fn a_key_built_in_lua_fails() {
        // a literal name, a concatenation, an ARGV, a key derived from KEYS
        for bad in [
            "redis.call('GET', 'counter')",
            "redis.call('GET', KEYS[1] .. ':x')",
            "redis.pcall('SET', ARGV[1], 1)",
            "local k = KEYS[1] .. '!'\nredis.call('DEL', k)",
            "redis.call('DEL', KEYS[1], 'other')",
            // a name bound once to KEYS and once to something else
            "local k = KEYS[1]\nk = 'x'\nredis.call('GET', k)",
            // a parameter one call passes a built key
            "local function f(key) redis.call('GET', key) end\nf(KEYS[1])\nf('x')",
            // a function that escapes: its parameter's value is unknown
            "local G = {}\nG[1] = function(key) redis.call('GET', key) end\n\
             G[1](KEYS[1])\nlocal t = { G }",
            // an unknown command, a computed one, redis.call passed around
            "redis.call('COPY', KEYS[1], KEYS[2])",
            "redis.call(ARGV[1], KEYS[1])",
            "local c = redis.call\nc('GET', 'x')",
        ] {
            assert!(!check(bad).is_empty(), "passed: {bad}");
        }
    }
}
