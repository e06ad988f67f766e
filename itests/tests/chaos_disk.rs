//! A disk that fills (docs/chaos.md): every table and index of the
//! extension moved to a tablespace on a small tmpfs (pg_wal stays on the
//! real disk), producers enqueue until Postgres refuses, and:
//!
//! - the refusal is a clean error (53100 `disk_full`), no backend crashes
//!   (the server never restarts, the log has no PANIC), and the refused
//!   call leaves nothing behind;
//! - claims and completions of the tasks already there end cleanly too;
//! - once space is freed (a ballast file removed), enqueues work again at
//!   once, every acknowledged task is claimed and completed exactly once,
//!   and amcheck finds every index consistent with its heap.
//!
//! Needs root (mount); the tmpfs is unmounted at the end, also on failure.

use std::collections::HashMap;
use std::fs;
use std::time::Instant;

use aedb_queue_itests::chaos::ledger::amcheck_all;
use aedb_queue_itests::chaos::recovery::report;
use aedb_queue_itests::chaos::tmpfs::Tmpfs;
use aedb_queue_itests::*;

const TABLESPACE: &str = "chaos_small_disk";
const DISK: &str = "16m";
const BALLAST_BYTES: usize = 3 << 20;

/// Moves every table and index of schema `aedb_queue` (TOAST goes with its
/// table) to `TABLESPACE`; returns how many relations moved.
fn move_extension_to(su: &mut Client, dir: &std::path::Path) -> i64 {
    su.batch_execute(&format!(
        "CREATE TABLESPACE {TABLESPACE} LOCATION '{}'",
        dir.display()
    ))
    .unwrap_or_else(|e| panic!("CREATE TABLESPACE: {}", describe(&e)));
    su.batch_execute(&format!(
        "DO $$ DECLARE r record; BEGIN
           FOR r IN SELECT c.oid::regclass AS rel, c.relkind FROM pg_class c
                    WHERE c.relnamespace = 'aedb_queue'::regnamespace AND c.relkind IN ('r', 'i')
           LOOP
             EXECUTE format('ALTER %s %s SET TABLESPACE {TABLESPACE}',
                            CASE r.relkind WHEN 'r' THEN 'TABLE' ELSE 'INDEX' END, r.rel);
           END LOOP;
         END $$;"
    ))
    .unwrap_or_else(|e| panic!("moving the extension's tables: {}", describe(&e)));
    let left: i64 = su
        .query_one(
            &format!(
                "SELECT count(*) FROM pg_class WHERE relnamespace = 'aedb_queue'::regnamespace \
                 AND relkind IN ('r', 'i') AND reltablespace IS DISTINCT FROM \
                     (SELECT oid FROM pg_tablespace WHERE spcname = '{TABLESPACE}')"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        left, 0,
        "relations of aedb_queue left outside the tablespace"
    );
    su.query_one(
        &format!(
            "SELECT count(*) FROM pg_class WHERE reltablespace = \
             (SELECT oid FROM pg_tablespace WHERE spcname = '{TABLESPACE}')"
        ),
        &[],
    )
    .unwrap()
    .get(0)
}

/// Incompressible payloads of about 1 KiB (stored as they are).
fn payloads(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let pad: String = (0..128)
                .map(|_| format!("{:08x}", rand::random::<u32>()))
                .collect();
            json!({ "i": i, "pad": pad })
        })
        .collect()
}

fn task_count(su: &mut Client, q: &str) -> i64 {
    su.query_one(
        "SELECT count(*) FROM aedb_queue.task WHERE queue = $1",
        &[&q],
    )
    .unwrap()
    .get(0)
}

fn try_batch(p: &mut Client, q: &str, n: usize) -> Result<Vec<i64>, postgres::Error> {
    Ok(p.query(
        "SELECT id FROM aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[]) AS id",
        &[&q, &payloads(n)],
    )?
    .iter()
    .map(|r| r.get(0))
    .collect())
}

/// Batches until the first refusal; returns the acknowledged ids and the
/// refusal.
fn enqueue_until_refused(p: &mut Client, q: &str) -> (Vec<i64>, postgres::Error) {
    let mut acked = Vec::new();
    for _ in 0..1_000 {
        match try_batch(p, q, 100) {
            Ok(ids) => acked.extend(ids),
            Err(e) => return (acked, e),
        }
    }
    panic!(
        "{} tasks enqueued into a {DISK} tablespace without a refusal",
        acked.len()
    );
}

/// The call's outcome as it should be on a full disk: done, or 53100.
fn ok_or_disk_full<T>(r: Result<T, postgres::Error>, what: &str) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            assert_eq!(
                sqlstate(&e).as_deref(),
                Some("53100"),
                "{what}: {}",
                describe(&e)
            );
            None
        }
    }
}

/// No backend crashed: the postmaster never reinitialized, no PANIC.
fn assert_no_crash(cluster: &Cluster) {
    let log = cluster.server_log();
    for bad in [
        "PANIC",
        "terminated by signal",
        "all server processes terminated",
        "was interrupted",
    ] {
        assert!(!log.contains(bad), "server log has {bad:?}:\n{log}");
    }
}

/// Claims and completes everything left in `q` (a ledger row per
/// completion, in its transaction); the ledger's rows per task.
fn drain(cluster: &Cluster, q: &str, ledger: &str) -> HashMap<i64, i64> {
    let mut w = cluster.connect_as(WORKER);
    loop {
        let got = claim(&mut w, q, "after", "5 minutes", 500);
        if got.is_empty() {
            break;
        }
        let mut tx = w.transaction().unwrap();
        let ids: Vec<i64> = got.iter().map(|t| t.task_id).collect();
        let tokens: Vec<i64> = got.iter().map(|t| t.fencing_token).collect();
        let n = tx
            .execute(
                &format!(
                    "INSERT INTO {ledger} (task_id) SELECT task_id FROM \
                     aedb_queue.queue_complete_batch($1::text, $2::int8[], $3::int8[]) \
                     WHERE outcome = 'applied'"
                ),
                &[&q, &ids, &tokens],
            )
            .unwrap();
        assert_eq!(n as usize, ids.len());
        tx.commit().unwrap();
    }
    let mut su = cluster.connect();
    ledger_counts(&mut su, ledger)
}

fn free_bytes(dir: &std::path::Path) -> String {
    let out = std::process::Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .expect("df");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("?")
        .trim()
        .to_string()
}

#[test]
fn a_full_tablespace_refuses_cleanly_and_recovers_when_space_returns() {
    // Declared first, dropped last: the cluster stops before the unmount.
    let disk = Tmpfs::mount(DISK);
    let cluster = Cluster::start();
    let mut su = cluster.connect();
    let moved = move_extension_to(&mut su, disk.path());
    let ballast = disk.path().join("ballast");
    fs::write(&ballast, vec![0xa5u8; BALLAST_BYTES]).expect("write the ballast");
    su.batch_execute("CREATE TABLE disk_ledger (task_id bigint NOT NULL)")
        .unwrap();
    let q = unique_queue("disk");
    let mut p = cluster.connect_as(PRODUCER);

    let (mut acked, refusal) = enqueue_until_refused(&mut p, &q);
    let free = free_bytes(disk.path());
    let at_refusal = acked.len();
    eprintln!(
        "refused after {} tasks ({free} bytes free): {}",
        acked.len(),
        describe(&refusal)
    );
    assert_eq!(
        sqlstate(&refusal).as_deref(),
        Some("53100"),
        "{}",
        describe(&refusal)
    );
    assert!(!acked.is_empty());
    // The refused batch left nothing; the server is up; no crash.
    assert_eq!(task_count(&mut su, &q), acked.len() as i64);
    let one: i32 = cluster.connect().query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);
    assert_no_crash(&cluster);

    // On the full disk: more enqueues, single and batched, and claims
    // and completions end cleanly (done or 53100), and change nothing
    // when refused.
    let mut refusals = 1;
    for round in 0..5 {
        match ok_or_disk_full(
            try_enqueue_with(&mut p, &q, Some(&json!(round)), &EnqueueOpts::default()),
            "queue_enqueue",
        ) {
            Some(e) => acked.push(e.task_id),
            None => refusals += 1,
        }
        match ok_or_disk_full(try_batch(&mut p, &q, 50), "queue_enqueue_batch") {
            Some(ids) => acked.extend(ids),
            None => refusals += 1,
        }
        assert_eq!(task_count(&mut su, &q), acked.len() as i64, "round {round}");
    }
    let mut w = cluster.connect_as(WORKER);
    let claimed = ok_or_disk_full(
        w.query("SELECT task_id, fencing_token FROM aedb_queue.queue_claim($1::text, 'full', '1 minute', 20)", &[&q]),
        "queue_claim",
    );
    let settled_while_full = match claimed {
        Some(rows) => {
            let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
            let tokens: Vec<i64> = rows.iter().map(|r| r.get(1)).collect();
            let mut tx = w.transaction().unwrap();
            let r = tx.execute(
                "INSERT INTO disk_ledger (task_id) SELECT task_id FROM \
                 aedb_queue.queue_complete_batch($1::text, $2::int8[], $3::int8[]) WHERE outcome = 'applied'",
                &[&q, &ids, &tokens],
            );
            let done = ok_or_disk_full(r, "queue_complete_batch").is_some();
            if done {
                tx.commit().unwrap();
            }
            format!(
                "claimed {}, completion {}",
                ids.len(),
                if done { "applied" } else { "refused" }
            )
        }
        None => "claim refused".to_string(),
    };
    let checkpoint = su.batch_execute("CHECKPOINT").map_err(|e| describe(&e));
    assert_no_crash(&cluster);

    // Space returns.
    fs::remove_file(&ballast).expect("remove the ballast");
    let freed_at = Instant::now();
    let ids = try_batch(&mut p, &q, 100)
        .unwrap_or_else(|e| panic!("after freeing space: {}", describe(&e)));
    let back_after = freed_at.elapsed();
    acked.extend(ids);
    let counts = drain(&cluster, &q, "disk_ledger");
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "completed more than once: {twice:?}");
    let mut done: Vec<i64> = counts.keys().copied().collect();
    done.sort();
    acked.sort();
    assert_eq!(
        done, acked,
        "the tasks completed are not the tasks acknowledged"
    );
    assert_eq!(task_count(&mut su, &q), 0);
    let indexes = amcheck_all(&mut su);
    assert_no_crash(&cluster);
    report(
        "disk full",
        &format!("{moved} relations of aedb_queue on a {DISK} tmpfs, filled with batch enqueues"),
        "space freed",
        &format!(
            "refused with 53100 ({}) after {} tasks, {refusals} refusals in all, nothing left by them; \
             while full: {settled_while_full}, CHECKPOINT {}; after freeing: first batch enqueued in {} ms, \
             {} tasks completed once each, amcheck clean on {indexes} indexes, no crash",
            refusal.as_db_error().map_or(String::new(), |d| d.message().to_string()),
            at_refusal,
            if checkpoint.is_ok() { "ok".to_string() } else { format!("failed: {checkpoint:?}") },
            back_after.as_millis(),
            done.len()
        ),
    );
    drop(su);
    drop(p);
    drop(w);
    drop(cluster);
    drop(disk);
}
