//! The live trace page at `/`: plain HTML, JavaScript and CSS from `src/gateway/web/`,
//! embedded in the binary at compile time. It loads nothing from elsewhere, and the
//! Content-Security-Policy makes the browser hold it to that.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;

const INDEX_HTML: &str = include_str!("web/index.html");
const APP_JS: &str = include_str!("web/app.js");
const CHARTS_JS: &str = include_str!("web/charts.js");
const OPERATE_JS: &str = include_str!("web/operate.js");
const APP_CSS: &str = include_str!("web/app.css");

/// Same-origin only: scripts, styles and requests to this gateway, nothing inline.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// `/`, `/app.js`, `/charts.js`, `/operate.js` and `/app.css`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/charts.js",
            get(|| async { asset("text/javascript; charset=utf-8", CHARTS_JS) }),
        )
        .route(
            "/operate.js",
            get(|| async { asset("text/javascript; charset=utf-8", OPERATE_JS) }),
        )
        .route(
            "/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
