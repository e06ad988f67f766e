//! Rate limits' token buckets (`aedb_queue.rate_bucket`).

use aedb_queue_core::flow::{Bucket, RateLimit};
use pgrx::spi::SpiClient;

use super::super::{execute, Statement, INT8, TEXT, TIMESTAMPTZ};
use crate::errors::Result;

/// The bucket of queue $1, taken: a claim that finds it taken by another
/// gets no tokens (SKIP LOCKED) rather than waiting.
static TAKE_BUCKET: Statement = Statement {
    sql: "SELECT micro_tokens, at FROM aedb_queue.rate_bucket WHERE queue = $1
          FOR NO KEY UPDATE SKIP LOCKED",
    args: &[TEXT],
    clock: false,
};

static BUCKET_EXISTS: Statement = Statement {
    sql: "SELECT EXISTS (SELECT 1 FROM aedb_queue.rate_bucket WHERE queue = $1)",
    args: &[TEXT],
    clock: false,
};

/// A full bucket ($2 micro-tokens) for a queue that has none (its rows
/// were restored without it): the first claim makes it.
static MAKE_BUCKET: Statement = Statement {
    sql: "INSERT INTO aedb_queue.rate_bucket (queue, micro_tokens, at) VALUES ($1, $2, $3)
          ON CONFLICT DO NOTHING RETURNING micro_tokens, at",
    args: &[TEXT, INT8],
    clock: true,
};

static PUT_BUCKET: Statement = Statement {
    sql: "UPDATE aedb_queue.rate_bucket SET micro_tokens = $2, at = $3 WHERE queue = $1",
    args: &[TEXT, INT8, TIMESTAMPTZ],
    clock: false,
};

/// A new limit: a full bucket for a queue newly limited, else the tokens
/// it holds, up to the new burst ($2).
static SET_BUCKET: Statement = Statement {
    sql: "INSERT INTO aedb_queue.rate_bucket AS b (queue, micro_tokens, at) VALUES ($1, $2, $3)
          ON CONFLICT (queue) DO UPDATE SET micro_tokens = least(b.micro_tokens, $2)",
    args: &[TEXT, INT8],
    clock: true,
};

static DROP_BUCKET: Statement = Statement {
    sql: "DELETE FROM aedb_queue.rate_bucket WHERE queue = $1",
    args: &[TEXT],
    clock: false,
};

/// After `queue_configure`: the queue's bucket for its limit, or none.
pub(crate) fn rate_changed_in(
    client: &mut SpiClient<'_>,
    queue: &str,
    limit: Option<RateLimit>,
) -> Result<()> {
    match limit {
        Some(limit) => execute(
            client,
            &SET_BUCKET,
            &[queue.into(), limit.full(0).micro_tokens.into()],
        )?,
        None => execute(client, &DROP_BUCKET, &[queue.into()])?,
    };
    Ok(())
}

/// Claims through `claim` at most what the queue's bucket holds (and at
/// most `want`), taking a token per task claimed. Never waits: with the
/// bucket empty, or taken by a claim in another transaction, it claims
/// nothing.
pub(crate) fn claim_with_tokens<T>(
    queue: &str,
    limit: RateLimit,
    want: i32,
    claim: impl FnOnce(i32) -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    let now = crate::clock::now();
    let micros = crate::clock::unix_micros(now);
    let Some(bucket) = super::super::with_client(|client| take_bucket(client, queue, limit))?
    else {
        return Ok(Vec::new());
    };
    let (got, left) = limit.take(bucket, micros, want.max(0) as u32);
    if got == 0 {
        return Ok(Vec::new());
    }
    let tasks = claim(got as i32)?;
    let left = limit.give_back(left, got - tasks.len() as u32);
    super::super::with_client(|client| {
        let at = crate::clock::from_unix_micros(left.at);
        execute(
            client,
            &PUT_BUCKET,
            &[queue.into(), left.micro_tokens.into(), at.into()],
        )?;
        Ok(())
    })?;
    Ok(tasks)
}

/// The bucket, locked by this transaction; None when another holds it.
fn take_bucket(
    client: &mut SpiClient<'_>,
    queue: &str,
    limit: RateLimit,
) -> Result<Option<Bucket>> {
    let read = |row: &super::super::Row<'_>| {
        Ok(Bucket {
            micro_tokens: row.required(1)?,
            at: crate::clock::unix_micros(row.required(2)?),
        })
    };
    if let Some(bucket) = execute(client, &TAKE_BUCKET, &[queue.into()])?.first(read)? {
        return Ok(Some(bucket));
    }
    let exists = execute(client, &BUCKET_EXISTS, &[queue.into()])?
        .first(|row| row.get::<bool>(1))?
        .flatten()
        == Some(true);
    if exists {
        return Ok(None);
    }
    let full = limit.full(0).micro_tokens;
    execute(client, &MAKE_BUCKET, &[queue.into(), full.into()])?.first(read)
}
