//! What a handler tells the layer about its answer, as response extensions: [`Rejected`] (do
//! not keep the key) and [`OmitBody`] (keep the key, not the body).
//!
//! Which answers are stored (the rule lives in `service.rs`, where the layer decides):
//!
//! | the handler's answer | writes | key |
//! |---|---|---|
//! | 1xx–3xx | committed | stored with status, allow-listed headers and body |
//! | 4xx after the handler locked its [`IdempotentTx`](crate::IdempotentTx) | committed | stored (the same answer for the same request) |
//! | 4xx without the transaction ever locked: extractor rejections (malformed JSON, missing field, wrong content type), validation before any write | none | **free**: the corrected request runs fresh |
//! | any non-5xx answer marked [`Rejected`] | rolled back | **free** |
//! | 5xx, or the handler failed | rolled back | **free** |

/// A response extension that marks the answer as a rejection of the request: the layer rolls
/// the transaction back and does not store the key, so the client may correct the request and
/// send it again with the same key. For validation answers given after the handler used its
/// transaction (a 4xx answered before that is never stored anyway).
///
/// ```
/// use axum::{Extension, http::StatusCode, response::IntoResponse};
/// use oncely_http::{IdempotentTx, Rejected, TxError};
///
/// async fn transfer(tx: IdempotentTx, body: String) -> Result<axum::response::Response, TxError> {
///     let mut tx = tx.lock().await?;
///     let row = tx.fetch_optional("SELECT 1 FROM accounts WHERE id = $1", &[body.into()], &[]).await?;
///     if row.is_none() {
///         // The client may fix the account and retry with the same key.
///         return Ok((StatusCode::UNPROCESSABLE_ENTITY, Extension(Rejected), "no such account").into_response());
///     }
///     Ok((StatusCode::CREATED, "moved").into_response())
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rejected;

/// A response extension that keeps the key and the status but not the body: the replay is
/// the stored status and allow-listed headers without `content-type`, an empty body and
/// `Idempotent-Body: omitted`. For an answer carrying a secret (a created API token, a
/// one-time password) that must not rest in the key table; the whole route can do this with
/// [`IdempotencyLayer::store_body`](crate::IdempotencyLayer::store_body).
///
/// ```
/// use axum::{Extension, http::StatusCode, response::IntoResponse};
/// use oncely_http::OmitBody;
/// async fn create_token() -> impl IntoResponse {
///     (StatusCode::CREATED, [("location", "/tokens/7")], Extension(OmitBody), "secret-token")
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OmitBody;
