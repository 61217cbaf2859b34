//! [`PlanResolver`]: which plan a request is checked under.

use std::borrow::Cow;
use std::marker::PhantomData;

use http::HeaderName;
use http::request::Parts;

/// Names the [plan](crate::plans) a request is checked under; `None` (or a
/// name that is not a plan) gets the default plan.
///
/// Closures over `&Parts` returning `Option<&'static str>` or
/// `Option<String>` are resolvers, as closures are key extractors;
/// [`PlanFromExtension`] reads what an earlier layer (API-key
/// authentication, say) put in the request's extensions, and
/// [`PlanFromHeader`] a header set by a gateway you trust.
///
/// ```
/// use http::request::Parts;
/// use tower_redis_ratelimit::middleware::PlanResolver;
///
/// let by_path = |p: &Parts| p.uri.path().starts_with("/internal/").then_some("internal");
/// let parts = http::Request::get("/internal/x").body(()).unwrap().into_parts().0;
/// assert_eq!(by_path.plan(&parts).as_deref(), Some("internal"));
/// ```
pub trait PlanResolver: Send + Sync + 'static {
    /// The plan of this request, if it names one.
    fn plan<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, str>>;
}

impl<F, S> PlanResolver for F
where
    F: Fn(&Parts) -> Option<S> + Send + Sync + 'static,
    S: Into<Cow<'static, str>>,
{
    fn plan<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, str>> {
        self(parts).map(Into::into)
    }
}

/// The plan named by a value of type `T` in the request's extensions,
/// put there by an earlier layer (say the one that looked the API key up).
///
/// ```
/// use tower_redis_ratelimit::middleware::{PlanFromExtension, PlanResolver};
///
/// #[derive(Clone)]
/// struct Tier(&'static str);
/// impl AsRef<str> for Tier {
///     fn as_ref(&self) -> &str {
///         self.0
///     }
/// }
///
/// let mut req = http::Request::get("/").body(()).unwrap();
/// req.extensions_mut().insert(Tier("pro"));
/// let (parts, _) = req.into_parts();
/// assert_eq!(PlanFromExtension::<Tier>::new().plan(&parts).as_deref(), Some("pro"));
/// ```
pub struct PlanFromExtension<T>(PhantomData<fn() -> T>);

impl<T> PlanFromExtension<T> {
    /// Reads the extension of type `T`.
    pub fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T> Default for PlanFromExtension<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for PlanFromExtension<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for PlanFromExtension<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlanFromExtension<{}>", std::any::type_name::<T>())
    }
}

impl<T: AsRef<str> + Send + Sync + 'static> PlanResolver for PlanFromExtension<T> {
    fn plan<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, str>> {
        parts
            .extensions
            .get::<T>()
            .map(|t| Cow::Borrowed(t.as_ref()))
    }
}

/// The plan named by a request header. A client can send any header: use
/// it only for a header that a gateway in front of the service sets (and
/// strips from what clients send).
#[derive(Debug, Clone)]
pub struct PlanFromHeader(pub HeaderName);

impl PlanResolver for PlanFromHeader {
    fn plan<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, str>> {
        let value = parts.headers.get(&self.0)?.to_str().ok()?;
        Some(Cow::Borrowed(value.trim()))
    }
}
