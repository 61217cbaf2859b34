//! Tuples of extractors: one key from several.
//!
//! Each part is written as a netstring, `<length>:<bytes>,`, so the key is
//! unambiguous whatever bytes the parts hold: (`a|b`, `c`) and (`a`, `b|c`)
//! give `3:a|b,1:c,` and `1:a,3:b|c,`. If any part is `None`, so is the key.

use http::request::Parts;

use super::KeyExtractor;

fn push_part(key: &mut Vec<u8>, part: &[u8]) {
    key.extend_from_slice(part.len().to_string().as_bytes());
    key.push(b':');
    key.extend_from_slice(part);
    key.push(b',');
}

macro_rules! tuple_extractor {
    ($($part:ident),+) => {
        impl<$($part: KeyExtractor),+> KeyExtractor for ($($part,)+) {
            fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
                #[allow(non_snake_case)]
                let ($($part,)+) = self;
                let mut key = Vec::new();
                $(push_part(&mut key, &$part.extract(parts)?);)+
                Some(key)
            }

            fn missing_hint(&self, parts: &Parts) -> std::borrow::Cow<'static, str> {
                #[allow(non_snake_case)]
                let ($($part,)+) = self;
                $(if $part.extract(parts).is_none() {
                    return $part.missing_hint(parts);
                })+
                std::borrow::Cow::Borrowed("no part of the key extractor tuple is missing")
            }

            fn missing_cause(&self, parts: &Parts) -> super::MissingCause {
                #[allow(non_snake_case)]
                let ($($part,)+) = self;
                $(if $part.extract(parts).is_none() {
                    return $part.missing_cause(parts);
                })+
                super::MissingCause::Request
            }
        }
    };
}

/// The key a tuple extractor gives a request whose parts' keys are
/// `parts` (each what that part's extractor gives, e.g. from its
/// `key_of`): for admin code that blocks or resets a combined key.
///
/// ```
/// use tower_redis_ratelimit::key::{KeyExtractor, Method, Path, tuple_key};
///
/// let (parts, ()) = http::Request::post("/login").body(())?.into_parts();
/// let key = tuple_key([Method.key_of(&http::Method::POST), Path.key_of("/login")]);
/// assert_eq!(key, b"11:method:POST,11:path:/login,");
/// assert_eq!((Method, Path).extract(&parts), Some(key));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn tuple_key<I>(parts: I) -> Vec<u8>
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    let mut key = Vec::new();
    for part in parts {
        push_part(&mut key, part.as_ref());
    }
    key
}

tuple_extractor!(A, B);
tuple_extractor!(A, B, C);
tuple_extractor!(A, B, C, D);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{Global, Method, Path};

    fn parts() -> Parts {
        http::Request::builder()
            .method("POST")
            .uri("/login")
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    fn fixed(value: &'static str) -> impl Fn(&Parts) -> Option<&'static str> + Send + Sync {
        move |_: &Parts| Some(value)
    }

    #[test]
    fn tuple_parts_are_length_prefixed() {
        assert_eq!(
            (Method, Path).extract(&parts()).unwrap(),
            b"11:method:POST,11:path:/login,"
        );
    }

    #[test]
    fn tuple_keys_are_unambiguous() {
        let p = parts();
        assert_ne!(
            (fixed("a|b"), fixed("c")).extract(&p),
            (fixed("a"), fixed("b|c")).extract(&p)
        );
        assert_ne!(
            (fixed("a,1:b"), fixed("")).extract(&p),
            (fixed("a"), fixed("b")).extract(&p)
        );
        assert_ne!(
            (fixed("ab"), fixed(""), fixed("")).extract(&p),
            (fixed("a"), fixed("b"), fixed("")).extract(&p)
        );
        assert_ne!(
            (fixed("1:a,"), fixed("")).extract(&p),
            (fixed(""), fixed("1:a,")).extract(&p)
        );
    }

    #[test]
    fn tuple_is_none_when_any_part_is_none() {
        let none = |_: &Parts| None::<Vec<u8>>;
        let p = parts();
        assert_eq!((Global, none).extract(&p), None);
        assert_eq!((none, Global).extract(&p), None);
        assert_eq!((Global, Method, none).extract(&p), None);
        assert_eq!((Global, Method, Path, none).extract(&p), None);
    }

    #[test]
    fn tuples_of_three_and_four() {
        let p = parts();
        assert_eq!(
            (Global, Method, Path).extract(&p).unwrap(),
            b"6:global,11:method:POST,11:path:/login,"
        );
        assert_eq!(
            (Global, Method, Path, fixed("x")).extract(&p).unwrap(),
            b"6:global,11:method:POST,11:path:/login,1:x,"
        );
    }

    #[test]
    fn tuples_nest() {
        let p = parts();
        assert_eq!(
            ((Method, Path), Global).extract(&p).unwrap(),
            b"30:11:method:POST,11:path:/login,,6:global,"
        );
    }
}
