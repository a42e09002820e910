//! Read-your-writes for the gateway's readers (`store::readers`): after every request
//! that may have written (any method but GET, HEAD and OPTIONS), the primary's WAL
//! position is noted before the answer leaves, so the next read through this gateway
//! goes to the read replica only once it has replayed that far. Without
//! `database.read_url` this costs nothing.

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use super::AppState;

/// Runs the request, then notes the write position when the request may have written.
pub async fn note_writes(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let reads_only = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let response = next.run(request).await;
    if !reads_only {
        state.readers().note_write().await;
    }
    response
}
