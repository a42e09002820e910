//! The shared buckets of provider rate limits (CONTRACT §10): a log of the requests each
//! bucket sent in its window and a 429's block, in PostgreSQL so that every worker draws
//! from the same buckets. Taking a slot holds the bucket's advisory lock for one short
//! transaction: read the window, decide with [`crate::core::rate_limit::admit`], record
//! the request.

use chrono::{DateTime, Duration, Utc};
use sqlx::PgPool;

use crate::core::rate_limit::{RateLimit, Sent, admit};

/// Takes a slot for a request of `tokens` in `limit`'s bucket: `Ok(id)` of its log row, or
/// the wait before trying again.
pub async fn try_take(
    pool: &PgPool,
    limit: &RateLimit,
    tokens: i64,
) -> sqlx::Result<Result<i64, Duration>> {
    let bucket = limit.bucket();
    let window = limit.held_for().num_milliseconds() as f64 / 1000.0;
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 11))")
        .bind(bucket)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "DELETE FROM llm_rate_log \
         WHERE bucket = $1 AND at <= clock_timestamp() - make_interval(secs => $2)",
    )
    .bind(bucket)
    .bind(window)
    .execute(&mut *tx)
    .await?;
    // clock_timestamp(), not now(): now() is when the transaction began, before the wait
    // for the lock, and a slot recorded that early would be released that much too soon.
    let (now, blocked): (DateTime<Utc>, Option<DateTime<Utc>>) = sqlx::query_as(
        "SELECT clock_timestamp(), (SELECT until FROM llm_rate_blocks WHERE bucket = $1)",
    )
    .bind(bucket)
    .fetch_one(&mut *tx)
    .await?;
    let sent: Vec<(DateTime<Utc>, i64)> =
        sqlx::query_as("SELECT at, tokens FROM llm_rate_log WHERE bucket = $1")
            .bind(bucket)
            .fetch_all(&mut *tx)
            .await?;
    let sent: Vec<Sent> = sent
        .into_iter()
        .map(|(at, tokens)| Sent { at, tokens })
        .collect();
    if let Err(wait) = admit(limit, now, &sent, blocked, tokens) {
        tx.rollback().await?;
        return Ok(Err(wait));
    }
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO llm_rate_log (bucket, at, tokens) VALUES ($1, $2, $3) RETURNING id",
    )
    .bind(bucket)
    .bind(now)
    .bind(tokens)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Ok(id))
}

/// Replaces a request's estimated tokens with what the provider counted.
pub async fn settle(pool: &PgPool, id: i64, tokens: i64) -> sqlx::Result<()> {
    sqlx::query("UPDATE llm_rate_log SET tokens = $2 WHERE id = $1")
        .bind(id)
        .bind(tokens)
        .execute(pool)
        .await?;
    Ok(())
}

/// Holds the whole bucket for `for_ms` (a 429's Retry-After), unless it is held longer.
pub async fn block(pool: &PgPool, limit: &RateLimit, for_ms: i64) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO llm_rate_blocks (bucket, until) \
         VALUES ($1, now() + make_interval(secs => $2::float8 / 1000)) \
         ON CONFLICT (bucket) DO UPDATE SET until = GREATEST(llm_rate_blocks.until, EXCLUDED.until)",
    )
    .bind(limit.bucket())
    .bind(for_ms as f64)
    .execute(pool)
    .await?;
    Ok(())
}
