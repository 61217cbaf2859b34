//! Named text documents on Redis: a document is a plain string key, read
//! with `GET` and written with `SET`, and its access is checked with one
//! script call that leaves it as it was (`lua/document_check.lua`). What a
//! document holds, and under which name, is its user's business (`Plans`
//! keeps its shared limits in one).

use super::conn::{Connections, Pooled, Request};
use super::script::LimiterScript;
use crate::error::StoreError;

/// The text of the document `name`, if there is one.
pub(crate) async fn get<P: Pooled>(
    conns: &Connections<P>,
    name: &str,
) -> Result<Option<String>, StoreError> {
    let mut cmd = redis::cmd("GET");
    cmd.arg(name);
    conns.query(Request::Cmd(&cmd), None, None).await
}

/// Writes `text` as the document `name`.
pub(crate) async fn set<P: Pooled>(
    conns: &Connections<P>,
    name: &str,
    text: &str,
) -> Result<(), StoreError> {
    let mut cmd = redis::cmd("SET");
    cmd.arg(name).arg(text);
    conns.query(Request::Cmd(&cmd), None, None).await
}

/// The script of [`check`] (`lua/document_check.lua`), prepared once.
fn check_script() -> &'static LimiterScript {
    static SCRIPT: std::sync::OnceLock<LimiterScript> = std::sync::OnceLock::new();
    SCRIPT.get_or_init(|| {
        LimiterScript::new(include_str!("../../../lua/document_check.lua").to_owned())
    })
}

/// Checks that the document `name` may be read and written, in one atomic
/// call that leaves it as it was.
pub(crate) async fn check<P: Pooled>(conns: &Connections<P>, name: &str) -> Result<(), StoreError> {
    let script = check_script();
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha.as_str()).arg(1).arg(name);
    let _: redis::Value = conns.query(Request::Cmd(&cmd), Some(script), None).await?;
    Ok(())
}
