//! `GET /v1/tasks/{task_id}/events`: a task's progress events as Server-Sent Events
//! (`id:` = seq, `event:` = type, `data:` = the event JSON of CONTRACT §3).
//!
//! The seam between stored and live events: the stream subscribes to the task's live
//! events first, then reads the stored ones after the resume point (`Last-Event-ID`, else
//! `?after=`), sends those, and then sends live events, skipping any seq already sent. An
//! event is committed to `events` before it is published, so whatever was published before
//! the subscription is in the stored read: no gap, no duplicate. Should a gap show anyway (a
//! live event with seq > last sent + 1, a lagging receiver, an event the worker stored but
//! failed to publish), the missing range is read from the table, also on every heartbeat
//! tick while the stream is idle. The stream ends after the terminal event; a resume point
//! at or past the end of an ended task gets `204 No Content`, which tells an EventSource to
//! stop reconnecting.
//!
//! With a read replica (`database.read_url`), the task row and the first read of stored
//! events (the bulk of a long history) come from the replica, which may lag; the seam
//! then reads whatever follows from the primary, after the subscription, and every later
//! read (gaps, resyncs, ticks) goes to the primary, so the argument above still holds. A
//! task the replica does not have yet is looked up on the primary before a 404.
//!
//! Bounded per connection: stored events are read in pages (at most
//! [`PAGE_EVENTS`] events and `gateway.stream_page_bytes` of JSON, measured by PostgreSQL),
//! and what waits for the client is bounded in bytes (`gateway.stream_buffer_bytes`,
//! [`queue`]): a slow reader makes its follower wait, it never makes the gateway hold a
//! task's whole history.

mod queue;

pub use queue::StreamStats;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use sqlx::PgPool;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use utoipa::IntoParams;
use uuid::Uuid;

use super::AppState;
use super::errors::{ApiError, ApiPath, ApiQuery, ErrorBody};
use super::hub::{Live, Subscription, TaskEvent};
use crate::store;

/// Stored events read per page at most (`gateway.stream_page_bytes` bounds their size).
pub const PAGE_EVENTS: i64 = 256;

/// Query parameters of the event stream.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Send only events with a greater seq (default 0: everything). `Last-Event-ID` wins.
    pub after: Option<i64>,
    /// A bearer token, for clients that cannot set headers (EventSource).
    pub access_token: Option<String>,
}

/// One Server-Sent Event of the stream, as the OpenAPI document describes its fields.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct StreamedEvent {
    /// The event's seq.
    id: String,
    /// The event's type (`task.started`, ...).
    event: String,
    /// The event as JSON text (CONTRACT §3).
    data: String,
}

/// Streams a task's events: the stored ones, then live ones, until its terminal event.
#[utoipa::path(
    get,
    path = "/v1/tasks/{task_id}/events",
    tag = "tasks",
    params(
        ("task_id" = Uuid, Path, description = "The task to follow"),
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this seq (set by EventSource on reconnect)"),
        EventsQuery,
    ),
    responses(
        (status = 200, description = "text/event-stream: `id:` seq, `event:` type, `data:` event JSON; comments as heartbeats; ends after the terminal event", content_type = "text/event-stream", body = StreamedEvent),
        (status = 204, description = "The task has ended and no event follows the resume point"),
        (status = 400, description = "Bad task id, Last-Event-ID or query", body = ErrorBody),
        (status = 422, description = "after < 0 (invalid_parameter)", body = ErrorBody),
        (status = 401, description = "Missing or unknown token", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
    ),
    security(("bearer" = []), ("access_token" = []))
)]
pub async fn task_events(
    State(state): State<AppState>,
    ApiPath(task_id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after = resume_point(&headers, query.after)?;
    // Subscribe before reading the stored events: see the module doc.
    let subscription = state.hub().subscribe(task_id);
    // Whether the task has ended, and with events after `after`: from the read replica
    // when it has the task, else from the primary (see "With a read replica" above).
    let found = state.readers().find(|pool| async move {
        let Some(task) = store::tasks::get(&pool, task_id).await? else {
            return Ok(None);
        };
        let ended = store::tasks::status::is_terminal(&task.status);
        let more = !ended || store::events::any_after(&pool, task_id, after).await?;
        Ok(Some((ended, more)))
    });
    let Some((ended, more)) = found.await? else {
        return Err(ApiError::not_found(
            "task_not_found",
            format!("no task {task_id}"),
        ));
    };
    if !more {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let history = state.readers().pool().await;
    let heartbeat = state.heartbeat();
    let gateway = &state.settings().gateway;
    let stats = Arc::clone(state.stream_stats());
    let (tx, events) = queue::queue(gateway.stream_buffer_bytes, Arc::clone(&stats));
    let follower = Follower {
        pool: state.pool().clone(),
        history: Some(history),
        task_id,
        last_sent: after,
        done: false,
        page_bytes: i64::try_from(gateway.stream_page_bytes).unwrap_or(i64::MAX),
        stats,
        tx,
    };
    let stop = state.stop().clone();
    tokio::spawn(follower.run(subscription, ended, heartbeat, stop));
    let keep_alive = KeepAlive::new().interval(heartbeat).text("heartbeat");
    let mut response = Sse::new(events).keep_alive(keep_alive).into_response();
    // Ask buffering reverse proxies (nginx) to pass events through at once.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// The seq to resume after: `Last-Event-ID` when present, else `?after=`, else 0.
fn resume_point(headers: &HeaderMap, after: Option<i64>) -> Result<i64, ApiError> {
    let header = headers
        .get("last-event-id")
        .map(|value| value.to_str().map(str::trim));
    match (header, after) {
        (Some(Ok(text)), _) if !text.is_empty() => text
            .parse::<i64>()
            .ok()
            .filter(|seq| *seq >= 0)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_last_event_id",
                    format!(
                        "Last-Event-ID must be an event seq (a whole number >= 0), got {text:?}"
                    ),
                )
            }),
        (Some(Err(_)), _) => Err(ApiError::bad_request(
            "invalid_last_event_id",
            "Last-Event-ID is not readable text",
        )),
        (_, Some(seq)) if seq < 0 => Err(ApiError::invalid_parameter("after must be >= 0")),
        (_, after) => Ok(after.unwrap_or(0)),
    }
}

/// The SSE form of an event.
fn to_sse(event: &TaskEvent) -> Event {
    let sse = Event::default().id(event.seq.to_string()).data(&event.json);
    // A type that cannot be an SSE field (empty, or with a line break) is left out rather
    // than allowed to break the stream; the JSON still carries it.
    let valid_type = !event.event_type.is_empty() && !event.event_type.contains(['\r', '\n', '\0']);
    match valid_type {
        true => sse.event(&event.event_type),
        false => sse,
    }
}

/// Sends one task's events to one client, in seq order, each once.
struct Follower {
    /// The primary: every read after the first.
    pool: PgPool,
    /// Where the first read of stored events goes (the read replica, when there is one).
    history: Option<PgPool>,
    task_id: Uuid,
    last_sent: i64,
    done: bool,
    /// `gateway.stream_page_bytes`.
    page_bytes: i64,
    stats: Arc<StreamStats>,
    tx: queue::QueueSender,
}

impl Follower {
    /// Sends the stored events, page by page, then live events, until the terminal event,
    /// the client leaving or the gateway stopping. `ended`: the task had ended before the
    /// stored read, so the stored events are all there is.
    async fn run(
        mut self,
        mut live: Subscription,
        ended: bool,
        poll_every: Duration,
        stop: CancellationToken,
    ) {
        let caught_up = tokio::select! {
            () = stop.cancelled() => false,
            open = self.catch_up_history() => open,
        };
        if !caught_up || ended {
            return;
        }
        let start = tokio::time::Instant::now() + poll_every;
        let mut poll = tokio::time::interval_at(start, poll_every);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.done {
            let open = tokio::select! {
                () = stop.cancelled() => false,
                () = self.tx.closed() => false,
                received = live.recv() => match received {
                    Ok(Live::Event(event)) => self.on_live(&event).await,
                    Ok(Live::Resync) => self.catch_up().await,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(task_id = %self.task_id, missed, "SSE follower lagged; reading the gap from the database");
                        self.catch_up().await
                    }
                    Err(broadcast::error::RecvError::Closed) => false,
                },
                _ = poll.tick() => self.catch_up().await,
            };
            if !open {
                return;
            }
        }
    }

    /// Sends `event` unless it was sent already. False when the client has gone.
    async fn send(&mut self, event: &TaskEvent) -> bool {
        if event.seq <= self.last_sent || self.done {
            return true;
        }
        if !self.tx.send(to_sse(event), event.json.len()).await {
            return false;
        }
        self.last_sent = event.seq;
        self.done = event.is_terminal();
        true
    }

    /// A live event: fills a gap before it from the database first.
    async fn on_live(&mut self, event: &TaskEvent) -> bool {
        if event.seq > self.last_sent + 1 && !self.catch_up().await {
            return false;
        }
        self.send(event).await
    }

    /// The first read: the stored events from `history` (the read replica, which may lag),
    /// then whatever follows them from the primary, read after the subscription as the
    /// module doc requires.
    async fn catch_up_history(&mut self) -> bool {
        if let Some(history) = self.history.take() {
            let primary = std::mem::replace(&mut self.pool, history);
            let open = self.catch_up().await;
            self.pool = primary;
            if !open {
                return false;
            }
        }
        self.catch_up().await
    }

    /// Sends every stored event after the last one sent, a page at a time (the next page
    /// is read once the client has taken enough of this one). A database error is logged
    /// and left to the next tick.
    async fn catch_up(&mut self) -> bool {
        while !self.done {
            let page = store::events::page_after(
                &self.pool,
                self.task_id,
                self.last_sent,
                PAGE_EVENTS,
                self.page_bytes,
            );
            let rows = match page.await {
                Ok(rows) => rows,
                Err(err) => {
                    tracing::warn!(task_id = %self.task_id, error = %err, "reading stored events failed");
                    return true;
                }
            };
            if rows.is_empty() {
                return true;
            }
            self.stats.pages_read.fetch_add(1, Ordering::Relaxed);
            self.stats
                .events_read
                .fetch_add(rows.len() as u64, Ordering::Relaxed);
            for row in rows {
                // The JSON text as live events have it (compact), whatever PostgreSQL's.
                let event = TaskEvent {
                    seq: row.seq,
                    json: row.payload.to_string(),
                    event_type: row.event_type,
                };
                if !self.send(&event).await {
                    return false;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(last_event_id: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(last_event_id) {
            headers.insert("last-event-id", value);
        }
        headers
    }

    #[test]
    fn last_event_id_wins_over_after() {
        assert_eq!(resume_point(&headers("7"), Some(3)), Ok(7));
        assert_eq!(resume_point(&HeaderMap::new(), Some(3)), Ok(3));
        assert_eq!(resume_point(&HeaderMap::new(), None), Ok(0));
        assert_eq!(resume_point(&headers(""), Some(2)), Ok(2));
    }

    #[test]
    fn bad_resume_points_are_client_errors() {
        let err = resume_point(&headers("abc"), None).err().map(|e| e.code);
        assert_eq!(err, Some("invalid_last_event_id"));
        let err = resume_point(&headers("-1"), None).err().map(|e| e.code);
        assert_eq!(err, Some("invalid_last_event_id"));
        let err = resume_point(&HeaderMap::new(), Some(-1))
            .err()
            .map(|e| e.code);
        assert_eq!(err, Some("invalid_parameter"));
    }
}
