//! A rejected call changes nothing, seen from outside the failed call: for
//! every rejection (oversize values 54000, bad arguments 22023, NULLs 22004,
//! missing privileges and per-queue confinement 42501), once the failing
//! session's transaction has ended another session finds
//!
//! - no row of the extension's tables (tasks, queues, idempotency keys, kept
//!   completions, grants) added, removed or changed (whole tables compared,
//!   row by row, before and after),
//! - `aedb_queue.task_id_seq` not advanced (checks come before `nextval`),
//! - no NOTIFY delivered to a listener on a queue with `notify => true`,
//!
//! and the failing session's next valid call works (its backend caches were
//! not left in a state that only the failed call would have justified).
//!
//! Each rejection runs twice: as an autocommit statement, and inside
//! `BEGIN; SAVEPOINT s; <call>; ROLLBACK TO SAVEPOINT s; COMMIT` (an
//! application that catches the error and commits the rest of its work).
//!
//! Every queue involved has live state that a call reaching too far would
//! change: a ready task, a due timer, an expired lease and a live lease held
//! by `app_worker` (whose token the failing calls present), and the queues
//! of `t_a` and `t_b` a yearly schedule.
//!
//! The tests compare whole tables and the sequence, so they take turns
//! ([`exclusive`]); the binary has its own cluster, so no other test writes.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use aedb_queue_itests::*;

// More cases, on the same harness: confined admins, SET ROLE after a
// login, schedule upserts, fenced-out and bad settlements.
#[path = "rejections/admins.rs"]
mod admins;
#[path = "rejections/fences.rs"]
mod fences;
#[path = "rejections/schedules.rs"]
mod schedules;
#[path = "rejections/set_role.rs"]
mod set_role;

/// A worker confined to `t_a.*` (grant `worker`).
const CWORKER: &str = "app_cworker";
/// A producer confined to `t_a.*` (grant `producer`).
const CPRODUCER: &str = "app_cproducer";
/// A producer and worker confined to `worker` on `t_a.*` and `producer` on
/// `t_a.out.*`: it may complete with follow-ups into `t_a.out.*` only.
const CSERVICE: &str = "app_cservice";

/// An admin confined to `t_a.*` (grant `admin`).
const CADMIN: &str = "app_cadmin";
/// An admin confined to `t_a.*` that revoked its own grant (at set-up), so
/// it may administer no queue at all.
const CADMIN_SHED: &str = "app_cadmin_shed";
/// Another tenant's worker, confined to `t_b.*`.
const BWORKER: &str = "app_bworker";
/// A NOLOGIN role of tenant B (worker on `t_b.*`).
const TENANT_B: &str = "app_tenant_b";
/// A login with a worker grant on `t_a.*` of its own, member of
/// [`TENANT_B`]: after `SET ROLE app_tenant_b` it may work in `t_b.*` only.
const BOTH: &str = "app_both";

/// Every fixture queue's own payload limit (bytes).
const PAYLOAD_LIMIT: i32 = 1000;

fn exclusive() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

/// The confined roles and their grants, once per cluster; the grants are
/// made by an aedb_queue admin, as an operator would.
fn confined_roles(cluster: &Cluster) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        cluster
            .connect()
            .batch_execute(&format!(
                "CREATE ROLE {CWORKER} LOGIN IN ROLE aedb_queue_worker;
                 CREATE ROLE {CPRODUCER} LOGIN IN ROLE aedb_queue_producer;
                 CREATE ROLE {CSERVICE} LOGIN IN ROLE aedb_queue_producer, aedb_queue_worker;
                 CREATE ROLE {CADMIN} LOGIN IN ROLE aedb_queue_admin;
                 CREATE ROLE {CADMIN_SHED} LOGIN IN ROLE aedb_queue_admin;
                 CREATE ROLE {BWORKER} LOGIN IN ROLE aedb_queue_worker;
                 CREATE ROLE {TENANT_B} NOLOGIN IN ROLE aedb_queue_worker;
                 CREATE ROLE {BOTH} LOGIN IN ROLE {TENANT_B};"
            ))
            .unwrap();
        let mut admin = cluster.connect_as(ADMIN);
        for (pattern, role, privilege) in [
            ("t_a.*", CWORKER, "worker"),
            ("t_a.*", CPRODUCER, "producer"),
            ("t_a.*", CSERVICE, "worker"),
            ("t_a.out.*", CSERVICE, "producer"),
            ("t_a.*", CADMIN, "admin"),
            ("t_a.*", CADMIN_SHED, "admin"),
            ("t_b.*", BWORKER, "worker"),
            ("t_b.*", TENANT_B, "worker"),
            ("t_a.*", BOTH, "worker"),
        ] {
            let changed: bool = admin
                .query_one(
                    "SELECT aedb_queue.queue_grant($1::text, $2::text, $3::text)",
                    &[&pattern, &role, &privilege],
                )
                .unwrap_or_else(|e| panic!("queue_grant {pattern} {role}: {}", describe(&e)))
                .get(0);
            assert!(changed, "queue_grant({pattern}, {role}, {privilege})");
        }
        let revoked: bool = cluster
            .connect_as(CADMIN_SHED)
            .query_one(
                "SELECT aedb_queue.queue_revoke('t_a.*', $1::text, 'admin')",
                &[&CADMIN_SHED],
            )
            .unwrap_or_else(|e| panic!("{CADMIN_SHED} revokes its grant: {}", describe(&e)))
            .get(0);
        assert!(revoked, "{CADMIN_SHED} revoked its own grant");
    });
}

/// A task in flight: its id and the token that settles it.
#[derive(Debug, Clone, Copy)]
struct Held {
    id: i64,
    token: i64,
}

/// The name of the yearly schedule every fixture queue of `t_a` and `t_b`
/// has (payload `{"v": 1}`), which a wrongly accepted upsert would change.
const SCHEDULE: &str = "nightly";

/// One queue with a task in every state a call could disturb.
#[derive(Debug, Clone)]
struct Filled {
    name: String,
    /// In flight under a live lease (1 hour), claimed by `app_worker`.
    held: Held,
    /// In flight under a lease that expired a minute ago (backdated).
    expired: Held,
    /// Scheduled, due a minute ago (backdated), not yet promoted.
    due_timer: i64,
}

/// The queues of one case, all with `notify => true` and a payload limit of
/// [`PAYLOAD_LIMIT`] bytes.
struct Fixture {
    /// `t_a.jobs_…`: inside every confined role's grants.
    a: Filled,
    /// `t_b.jobs_…`: outside every confined role's grants.
    b: Filled,
    /// `t_a.out.…`: where `app_cservice` may enqueue.
    a_out: String,
    /// `t_a.other_…`: `app_cservice` may work here, not enqueue.
    a_other: String,
    /// `t_b.fresh_…`: a name nobody has used, so not registered.
    b_fresh: String,
    /// `fresh_…`: unconfined and not registered.
    fresh: String,
}

/// The sessions that build fixtures and watch the tables.
struct Setup<'c> {
    cluster: &'c Cluster,
    su: Client,
    producer: Client,
    worker: Client,
    admin: Client,
}

impl<'c> Setup<'c> {
    fn new(cluster: &'c Cluster) -> Self {
        confined_roles(cluster);
        Setup {
            cluster,
            su: cluster.connect(),
            producer: cluster.connect_as(PRODUCER),
            worker: cluster.connect_as(WORKER),
            admin: cluster.connect_as(ADMIN),
        }
    }

    fn configure(&mut self, queue: &str) {
        self.admin
            .query_one(
                "SELECT notify FROM aedb_queue.queue_configure($1::text, notify => true, \
                 max_payload_bytes => $2::int4)",
                &[&queue, &PAYLOAD_LIMIT],
            )
            .unwrap_or_else(|e| panic!("queue_configure {queue}: {}", describe(&e)));
    }

    fn fill(&mut self, name: String) -> Filled {
        self.configure(&name);
        let claim_next = |s: &mut Self, id: i64| {
            let t =
                claim_one(&mut s.worker, &name, "fixture-worker", "1 hour").expect("fixture claim");
            assert_eq!(t.task_id, id, "fixture claim order");
            Held {
                id,
                token: t.fencing_token,
            }
        };
        let id = enqueue(&mut self.producer, &name, &json!({"fixture": "held"})).task_id;
        let held = claim_next(self, id);
        let id = enqueue(&mut self.producer, &name, &json!({"fixture": "expired"})).task_id;
        let expired = claim_next(self, id);
        self.su
            .execute(
                "UPDATE aedb_queue.task SET lease_deadline = now() - interval '1 minute' \
                 WHERE task_id = $1",
                &[&expired.id],
            )
            .unwrap();
        enqueue(&mut self.producer, &name, &json!({"fixture": "ready"}));
        let due_timer = enqueue_with(
            &mut self.producer,
            &name,
            Some(&json!({"fixture": "timer"})),
            &EnqueueOpts::default().delay("1 hour"),
        )
        .task_id;
        self.su
            .execute(
                "UPDATE aedb_queue.task SET not_before = now() - interval '1 minute' \
                 WHERE task_id = $1",
                &[&due_timer],
            )
            .unwrap();
        Filled {
            name,
            held,
            expired,
            due_timer,
        }
    }

    fn fixture(&mut self) -> Fixture {
        let tag = unique_queue("r");
        let a = self.fill(format!("t_a.jobs_{tag}"));
        let b = self.fill(format!("t_b.jobs_{tag}"));
        let a_out = format!("t_a.out.{tag}");
        let a_other = format!("t_a.other_{tag}");
        self.configure(&a_out);
        self.configure(&a_other);
        for queue in [&a.name, &b.name] {
            self.admin
                .batch_execute(&format!(
                    "SELECT aedb_queue.queue_schedule_upsert('{queue}', '{SCHEDULE}', '0 0 1 1 *', \
                     payload => '{{\"v\": 1}}')"
                ))
                .unwrap_or_else(|e| panic!("schedule of {queue}: {}", describe(&e)));
        }
        Fixture {
            a,
            b,
            a_out,
            a_other,
            b_fresh: format!("t_b.fresh_{tag}"),
            fresh: format!("fresh_{tag}"),
        }
    }
}

/// Everything a call could change, read by the superuser: every row of
/// every table of the extension's schemas (tasks, queues, idempotency keys,
/// kept completions, grants, confinements, whatever the installed version
/// has), and the task id sequence.
#[derive(Debug, PartialEq)]
struct State {
    tables: Vec<(String, BTreeSet<String>)>,
    /// `(last_value, is_called)` of `aedb_queue.task_id_seq`.
    seq: (i64, bool),
}

impl State {
    fn read(su: &mut Client) -> State {
        let names: Vec<String> = first_column(
            su,
            "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname IN ('aedb_queue', 'aedb_queue_internal') \
               AND c.relkind IN ('r', 'p') ORDER BY 1",
            &[],
        );
        assert!(
            names.iter().any(|t| t == "aedb_queue.task"),
            "no aedb_queue.task among {names:?}"
        );
        let tables = names
            .into_iter()
            .map(|t| {
                let rows = su
                    .query(
                        format!("SELECT row_to_json(r)::text FROM {t} r").as_str(),
                        &[],
                    )
                    .unwrap_or_else(|e| panic!("read {t}: {}", describe(&e)));
                let rows = rows.iter().map(|r| r.get::<_, String>(0)).collect();
                (t, rows)
            })
            .collect();
        let row = su
            .query_one(
                "SELECT last_value, is_called FROM aedb_queue.task_id_seq",
                &[],
            )
            .unwrap();
        State {
            tables,
            seq: (row.get(0), row.get(1)),
        }
    }

    /// What changed from `self` to `after`, one line per difference.
    fn diff(&self, after: &State) -> Vec<String> {
        let mut out = Vec::new();
        for ((name, before), (_, now)) in self.tables.iter().zip(&after.tables) {
            for row in before.difference(now) {
                out.push(format!("{name} lost or changed row {row}"));
            }
            for row in now.difference(before) {
                out.push(format!("{name} gained or changed row {row}"));
            }
        }
        if self.seq != after.seq {
            out.push(format!(
                "aedb_queue.task_id_seq advanced: (last_value, is_called) {:?} -> {:?}",
                self.seq, after.seq
            ));
        }
        out
    }
}

/// Payloads of the notifications about any of `queues` that `listener`
/// receives until none has come for `quiet` (or, with `first`, until the
/// first one).
fn notified(listener: &mut Client, queues: &[&str], quiet: Duration, first: bool) -> Vec<String> {
    use postgres::fallible_iterator::FallibleIterator;
    let mut got = Vec::new();
    let mut notifications = listener.notifications();
    let mut incoming = notifications.timeout_iter(quiet);
    while let Some(n) = incoming.next().expect("notifications") {
        if n.channel() == "aedb_queue" && queues.contains(&n.payload()) {
            got.push(n.payload().to_string());
            if first {
                break;
            }
        }
    }
    got
}

/// How the call must be rejected.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Raises this SQLSTATE.
    Error(&'static str),
    /// Returns this value (text of the first column of the first row): a
    /// refusal that is an answer, such as `lease_lost`.
    Returns(&'static str),
}

/// One rejected call and what proves the session still works afterwards.
struct Case {
    what: String,
    /// The role of the failing session.
    role: &'static str,
    /// A valid call made first in the failing session (so its caches hold
    /// the queue's settings and grants), before the "before" snapshot.
    warm_up: Option<String>,
    /// The rejected call.
    call: String,
    expect: Expect,
    /// A valid call of the same session after both rejections; must work.
    then: String,
    /// Run by the superuser after `then`: must return true.
    then_check: Option<String>,
    /// A queue `then` must wake listeners of (proves the listener listens).
    then_notifies: Option<String>,
}

impl Case {
    fn new(what: impl Into<String>, role: &'static str, sqlstate: &'static str) -> Case {
        Case::expecting(what, role, Expect::Error(sqlstate))
    }
    fn expecting(what: impl Into<String>, role: &'static str, expect: Expect) -> Case {
        Case {
            what: what.into(),
            role,
            warm_up: None,
            call: String::new(),
            expect,
            then: String::new(),
            then_check: None,
            then_notifies: None,
        }
    }
    fn warm_up(mut self, sql: impl Into<String>) -> Self {
        self.warm_up = Some(sql.into());
        self
    }
    fn call(mut self, sql: impl Into<String>) -> Self {
        self.call = sql.into();
        self
    }
    fn then(mut self, sql: impl Into<String>) -> Self {
        self.then = sql.into();
        self
    }
    fn then_check(mut self, sql: impl Into<String>) -> Self {
        self.then_check = Some(sql.into());
        self
    }
    fn then_notifies(mut self, queue: &str) -> Self {
        self.then_notifies = Some(queue.to_string());
        self
    }
}

/// Runs every case on a fresh fixture; panics at the end with every
/// failure of every case.
fn run_cases(cluster: &Cluster, cases: impl Fn(&Fixture) -> Vec<Case>) {
    let _turn = exclusive();
    let mut setup = Setup::new(cluster);
    let mut failures = Vec::new();
    let mut count = 1;
    let mut i = 0;
    while i < count {
        // A fresh fixture per case: a call wrongly accepted in one case
        // cannot disturb the next.
        let fixture = setup.fixture();
        let mut all = cases(&fixture);
        count = all.len();
        let case = all.remove(i);
        i += 1;
        let problems = run_case(&mut setup, &fixture, &case);
        eprintln!(
            "{} {} [{}]",
            if problems.is_empty() { "ok  " } else { "FAIL" },
            case.what,
            case.role
        );
        for p in &problems {
            eprintln!("       {p}");
        }
        failures.extend(
            problems
                .into_iter()
                .map(|p| format!("{} [{}]: {p}", case.what, case.role)),
        );
    }
    assert!(
        failures.is_empty(),
        "{} problem(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn run_case(setup: &mut Setup, fx: &Fixture, case: &Case) -> Vec<String> {
    let mut problems = Vec::new();
    let queues = [
        fx.a.name.as_str(),
        fx.b.name.as_str(),
        &fx.a_out,
        &fx.a_other,
        &fx.b_fresh,
        &fx.fresh,
    ];
    let mut session = setup.cluster.connect_as(case.role);
    if let Some(sql) = &case.warm_up {
        if let Err(e) = session.batch_execute(sql) {
            return vec![format!("warm-up failed: {}", describe(&e))];
        }
    }
    // Listening from after the set-up: only what happens from here reaches it.
    let mut listener = setup.cluster.connect_as(WORKER);
    listener.batch_execute("LISTEN aedb_queue").unwrap();

    let modes = [
        ("autocommit", None),
        (
            "in a savepoint, then COMMIT",
            Some(("BEGIN; SAVEPOINT s", "ROLLBACK TO SAVEPOINT s; COMMIT")),
        ),
    ];
    for (mode, wrap) in modes {
        let before = State::read(&mut setup.su);
        if let Some((open, _)) = wrap {
            session.batch_execute(open).unwrap();
        }
        let result = first_value(session.simple_query(&case.call));
        if let Some((_, close)) = wrap {
            if let Err(e) = session.batch_execute(close) {
                problems.push(format!("{mode}: closing the transaction: {}", describe(&e)));
            }
        }
        let accepted = match (&result, case.expect) {
            (Ok(v), Expect::Error(code)) => {
                problems.push(format!(
                    "{mode}: accepted (returned {v:?}), expected SQLSTATE {code}"
                ));
                true
            }
            (Err(e), Expect::Error(code)) => {
                if sqlstate(e).as_deref() != Some(code) {
                    problems.push(format!(
                        "{mode}: expected SQLSTATE {code}, got {}",
                        describe(e)
                    ));
                }
                false
            }
            (Ok(v), Expect::Returns(want)) => {
                if v.as_deref() != Some(want) {
                    problems.push(format!("{mode}: returned {v:?}, expected {want:?}"));
                    true
                } else {
                    false
                }
            }
            (Err(e), Expect::Returns(want)) => {
                problems.push(format!(
                    "{mode}: raised {}, expected to return {want:?}",
                    describe(e)
                ));
                false
            }
        };
        let after = State::read(&mut setup.su);
        problems.extend(
            before
                .diff(&after)
                .into_iter()
                .map(|d| format!("{mode}: {d}")),
        );
        let woken = notified(&mut listener, &queues, Duration::from_millis(250), false);
        if !woken.is_empty() {
            problems.push(format!("{mode}: listeners were notified: {woken:?}"));
        }
        if accepted {
            // The rest would only repeat the first mode's findings.
            return problems;
        }
    }

    if let Err(e) = session.batch_execute(&case.then) {
        problems.push(format!(
            "the session's next valid call failed: {} ({})",
            describe(&e),
            case.then
        ));
        return problems;
    }
    if let Some(check) = &case.then_check {
        let ok: bool = setup
            .su
            .query_one(check.as_str(), &[])
            .unwrap_or_else(|e| panic!("{check}: {}", describe(&e)))
            .get(0);
        if !ok {
            problems.push(format!("after the next valid call, not true: {check}"));
        }
    }
    if let Some(queue) = &case.then_notifies {
        let woken = notified(&mut listener, &[queue], Duration::from_secs(3), true);
        if woken.is_empty() {
            problems.push(format!(
                "the next valid call did not wake the listener of {queue} (is it listening?)"
            ));
        }
    }
    problems
}

/// The first column of the first row a simple query returned, as text.
fn first_value(
    r: Result<Vec<postgres::SimpleQueryMessage>, postgres::Error>,
) -> Result<Option<String>, postgres::Error> {
    Ok(r?
        .iter()
        .find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_string)),
            _ => None,
        })
        .flatten())
}

/// A jsonb literal of about `bytes` bytes.
fn big(bytes: usize) -> String {
    format!("'{{\"pad\": \"{}\"}}'::jsonb", "x".repeat(bytes))
}

fn task_exists(queue: &str, payload: &str) -> String {
    format!(
        "SELECT EXISTS (SELECT FROM aedb_queue.task WHERE queue = '{queue}' \
         AND payload = '{payload}'::jsonb)"
    )
}

fn task_gone(id: i64) -> String {
    format!("SELECT NOT EXISTS (SELECT FROM aedb_queue.task WHERE task_id = {id})")
}

fn enqueue_sql(queue: &str, payload: &str) -> String {
    format!("SELECT * FROM aedb_queue.queue_enqueue('{queue}', '{payload}'::jsonb)")
}

fn claim_sql(queue: &str) -> String {
    format!("SELECT * FROM aedb_queue.queue_claim('{queue}', 'w', max => 1)")
}

fn complete_sql(queue: &str, h: Held) -> String {
    format!(
        "SELECT aedb_queue.queue_complete('{queue}', {}, {})",
        h.id, h.token
    )
}

fn complete_with_follow_up_sql(queue: &str, h: Held, follow_ups: &str) -> String {
    format!(
        "SELECT aedb_queue.queue_complete('{queue}', {}, {}, follow_ups => '{follow_ups}'::jsonb)",
        h.id, h.token
    )
}

#[test]
fn rejected_enqueues_change_nothing() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let a = &fx.a.name;
        let ok = r#"{"ok": 1}"#;
        let then_enqueue = |c: Case, q: &str| {
            c.then(enqueue_sql(q, ok))
                .then_check(task_exists(q, ok))
                .then_notifies(q)
        };
        vec![
            then_enqueue(
                Case::new("payload over the queue's limit, with a key", PRODUCER, "54000")
                    .warm_up(enqueue_sql(a, r#"{"warm": 1}"#))
                    .call(format!(
                        "SELECT * FROM aedb_queue.queue_enqueue('{a}', {}, idempotency_key => 'k-big')",
                        big(2000)
                    )),
                a,
            )
            // The key was not taken by the rejected call.
            .then(format!(
                "SELECT * FROM aedb_queue.queue_enqueue('{a}', '{ok}'::jsonb, idempotency_key => 'k-big')"
            )),
            then_enqueue(
                Case::new("batch whose payloads[3] is over the limit", PRODUCER, "54000")
                    .warm_up(enqueue_sql(a, r#"{"warm": 1}"#))
                    .call(format!(
                        "SELECT aedb_queue.queue_enqueue_batch('{a}', \
                         ARRAY['1'::jsonb, '2'::jsonb, {}, '4'::jsonb])",
                        big(2000)
                    )),
                a,
            ),
            // The queue must be registered by the next valid enqueue,
            // whatever the rejected one left in the session's cache.
            Case::new("batch over the server-wide limit into a fresh queue", PRODUCER, "54000")
                .call(format!(
                    "SELECT aedb_queue.queue_enqueue_batch('{}', ARRAY['1'::jsonb, {}])",
                    fx.fresh,
                    big(1_100_000)
                ))
                .then(format!("{}; {}", enqueue_sql(&fx.fresh, ok), enqueue_sql(a, ok)))
                .then_check(format!(
                    "SELECT EXISTS (SELECT FROM aedb_queue.queue WHERE name = '{0}') AND ({1})",
                    fx.fresh,
                    task_exists(&fx.fresh, ok)
                ))
                .then_notifies(a),
            then_enqueue(
                Case::new("negative delay, with a key", PRODUCER, "22023").call(format!(
                    "SELECT * FROM aedb_queue.queue_enqueue('{a}', '{{}}', delay => '-1 second', \
                     idempotency_key => 'k-neg')"
                )),
                a,
            ),
            Case::new("max_attempts 0 into a fresh (unregistered) queue", PRODUCER, "22023")
                .call(format!(
                    "SELECT * FROM aedb_queue.queue_enqueue('{}', '{{}}', max_attempts => 0)",
                    fx.fresh
                ))
                .then(format!("{}; {}", enqueue_sql(&fx.fresh, ok), enqueue_sql(a, ok)))
                .then_check(format!(
                    "SELECT EXISTS (SELECT FROM aedb_queue.queue WHERE name = '{0}') AND ({1})",
                    fx.fresh,
                    task_exists(&fx.fresh, ok)
                ))
                .then_notifies(a),
            then_enqueue(
                Case::new("batch with backoff_max < backoff_base", PRODUCER, "22023").call(
                    format!(
                        "SELECT aedb_queue.queue_enqueue_batch('{a}', ARRAY['1'::jsonb], \
                         backoff_base => '10 seconds', backoff_max => '1 second')"
                    ),
                ),
                a,
            ),
            then_enqueue(
                Case::new("empty queue name", PRODUCER, "22023")
                    .call(enqueue_sql("", "{}")),
                a,
            ),
            then_enqueue(
                Case::new("NULL queue", PRODUCER, "22004")
                    .call("SELECT * FROM aedb_queue.queue_enqueue(NULL, '{}')"),
                a,
            ),
            then_enqueue(
                Case::new("NULL payloads array", PRODUCER, "22004")
                    .call(format!("SELECT aedb_queue.queue_enqueue_batch('{a}', NULL)")),
                a,
            ),
            then_enqueue(
                Case::new("NULL priority, with a key", PRODUCER, "22004").call(format!(
                    "SELECT * FROM aedb_queue.queue_enqueue('{a}', '{{}}', priority => NULL, \
                     idempotency_key => 'k-null')"
                )),
                a,
            ),
            then_enqueue(
                Case::new("a producer claims (no EXECUTE)", PRODUCER, "42501")
                    .call(claim_sql(a)),
                a,
            ),
            then_enqueue(
                Case::new("a producer completes a held task (no EXECUTE)", PRODUCER, "42501")
                    .call(complete_sql(a, fx.a.held)),
                a,
            ),
            then_enqueue(
                Case::new("a confined producer enqueues outside its grant, with a key", CPRODUCER, "42501")
                    .warm_up(enqueue_sql(a, r#"{"warm": 1}"#))
                    .call(format!(
                        "SELECT * FROM aedb_queue.queue_enqueue('{}', '{{}}', idempotency_key => 'k-out')",
                        fx.b.name
                    )),
                a,
            ),
            then_enqueue(
                Case::new("a confined producer batches outside its grant", CPRODUCER, "42501")
                    .call(format!(
                        "SELECT aedb_queue.queue_enqueue_batch('{}', ARRAY['1'::jsonb, '2'::jsonb])",
                        fx.b.name
                    )),
                a,
            ),
            then_enqueue(
                Case::new("a confined producer enqueues into a fresh queue outside its grant", CPRODUCER, "42501")
                    .call(enqueue_sql(&fx.b_fresh, "{}")),
                a,
            ),
        ]
    });
}

#[test]
fn rejected_worker_calls_change_nothing() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let a = &fx.a.name;
        let held = fx.a.held;
        let then_complete = |c: Case| c.then(complete_sql(a, held)).then_check(task_gone(held.id));
        vec![
            // A claim that got past its checks would first promote the due
            // timer and reclaim the expired lease.
            Case::new("claim with max 0", WORKER, "22023")
                .warm_up(format!("SELECT * FROM aedb_queue.queue_list('{a}')"))
                .call(format!(
                    "SELECT * FROM aedb_queue.queue_claim('{a}', 'w', max => 0)"
                ))
                .then(claim_sql(a))
                .then_check(format!(
                    "SELECT state <> 'scheduled' FROM aedb_queue.task WHERE task_id = {}",
                    fx.a.due_timer
                )),
            Case::new("claim with a zero lease", WORKER, "22023")
                .call(format!(
                    "SELECT * FROM aedb_queue.queue_claim('{a}', 'w', lease => '0')"
                ))
                .then(claim_sql(a)),
            Case::new("claim with a NULL owner", WORKER, "22004")
                .call(format!("SELECT * FROM aedb_queue.queue_claim('{a}', NULL)"))
                .then(claim_sql(a)),
            then_complete(
                Case::new("complete with a result over the limit", WORKER, "54000").call(format!(
                    "SELECT aedb_queue.queue_complete('{a}', {}, {}, result => {})",
                    held.id,
                    held.token,
                    big(2000)
                )),
            ),
            then_complete(
                Case::new("heartbeat with progress over the limit", WORKER, "54000").call(format!(
                    "SELECT aedb_queue.queue_heartbeat('{a}', {}, {}, '1 hour', progress => {})",
                    held.id,
                    held.token,
                    big(2000)
                )),
            ),
            then_complete(
                Case::new("heartbeat with a negative extend", WORKER, "22023").call(format!(
                    "SELECT aedb_queue.queue_heartbeat('{a}', {}, {}, '-1 second')",
                    held.id, held.token
                )),
            ),
            then_complete(
                Case::new("fail with a negative retry_in", WORKER, "22023").call(format!(
                    "SELECT aedb_queue.queue_fail('{a}', {}, {}, 'e', retry_in => '-1 second')",
                    held.id, held.token
                )),
            ),
            then_complete(
                Case::new("complete with a NULL token", WORKER, "22004").call(format!(
                    "SELECT aedb_queue.queue_complete('{a}', {}, NULL)",
                    held.id
                )),
            ),
            then_complete(
                Case::new(
                    "complete_batch with arrays of different lengths",
                    WORKER,
                    "22023",
                )
                .call(format!(
                    "SELECT * FROM aedb_queue.queue_complete_batch('{a}', ARRAY[{}, {}]::int8[], \
                         ARRAY[{}]::int8[])",
                    held.id, fx.a.expired.id, held.token
                )),
            ),
            // Follow-up specs are all checked before anything is written;
            // a producer and worker, so only the spec can be wrong.
            Case::new(
                "complete whose follow_ups[2] has a bad delay",
                SERVICE,
                "22023",
            )
            .call(complete_with_follow_up_sql(
                a,
                held,
                &format!(r#"[{{"queue": "{a}"}}, {{"queue": "{a}", "delay": "soon"}}]"#),
            ))
            .then(complete_with_follow_up_sql(
                a,
                held,
                &format!(r#"[{{"queue": "{a}", "payload": {{"next": 1}}}}]"#),
            ))
            .then_check(format!(
                "SELECT ({}) AND ({})",
                task_gone(held.id),
                task_exists(a, r#"{"next": 1}"#)
            ))
            .then_notifies(a),
            Case::new(
                "complete whose follow_ups[2] payload is over the limit",
                SERVICE,
                "54000",
            )
            .call(complete_with_follow_up_sql(
                a,
                held,
                &format!(
                    r#"[{{"queue": "{a}"}}, {{"queue": "{a}", "payload": {{"pad": "{}"}}}}]"#,
                    "x".repeat(2000)
                ),
            ))
            .then(complete_with_follow_up_sql(
                a,
                held,
                &format!(r#"[{{"queue": "{a}", "payload": {{"next": 1}}}}]"#),
            ))
            .then_check(format!(
                "SELECT ({}) AND ({})",
                task_gone(held.id),
                task_exists(a, r#"{"next": 1}"#)
            ))
            .then_notifies(a),
            then_complete(
                Case::new("a worker enqueues (no EXECUTE)", WORKER, "42501")
                    .call(enqueue_sql(a, "{}")),
            ),
            then_complete(
                Case::new("a worker batches (no EXECUTE)", WORKER, "42501").call(format!(
                    "SELECT aedb_queue.queue_enqueue_batch('{a}', ARRAY['1'::jsonb])"
                )),
            ),
            then_complete(
                Case::new("a worker reaps (no EXECUTE)", WORKER, "42501")
                    .call(format!("SELECT * FROM aedb_queue.queue_reap('{a}')")),
            ),
            then_complete(
                Case::new("a worker turns notify off (no EXECUTE)", WORKER, "42501").call(format!(
                    "SELECT * FROM aedb_queue.queue_configure('{a}', notify => false)"
                )),
            ),
        ]
    });
}

/// Completion follow-ups are enqueues: the completing role needs the right to
/// enqueue into each follow-up's queue (docs/sql.md: 42501 when "the role lacks
/// EXECUTE ... or a per-queue grant confines it to other queues").
#[test]
fn follow_ups_into_queues_the_caller_may_not_enqueue_into_are_rejected() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let a = &fx.a.name;
        let held = fx.a.held;
        let follow_up = |q: &str| format!(r#"[{{"queue": "{q}", "payload": {{"next": 1}}}}]"#);
        let then_complete = |c: Case| c.then(complete_sql(a, held)).then_check(task_gone(held.id));
        vec![
            then_complete(
                Case::new(
                    "a worker without producer rights: follow-up into its own queue",
                    WORKER,
                    "42501",
                )
                .call(complete_with_follow_up_sql(a, held, &follow_up(a))),
            ),
            then_complete(
                Case::new(
                    "a worker without producer rights: follow-up into a fresh queue",
                    WORKER,
                    "42501",
                )
                .call(complete_with_follow_up_sql(a, held, &follow_up(&fx.fresh))),
            ),
            then_complete(
                Case::new(
                    "a confined worker (no producer rights): follow-up into its own queue",
                    CWORKER,
                    "42501",
                )
                .call(complete_with_follow_up_sql(a, held, &follow_up(a))),
            ),
            then_complete(
                Case::new(
                    "a confined worker: follow-up outside its grant",
                    CWORKER,
                    "42501",
                )
                .call(complete_with_follow_up_sql(a, held, &follow_up(&fx.b.name))),
            ),
            // app_cservice may enqueue into t_a.out.* only; the valid call
            // shows that one goes through.
            Case::new(
                "a confined service: follow-up outside its grants",
                CSERVICE,
                "42501",
            )
            .call(complete_with_follow_up_sql(a, held, &follow_up(&fx.b.name)))
            .then(complete_with_follow_up_sql(a, held, &follow_up(&fx.a_out)))
            .then_check(format!(
                "SELECT ({}) AND ({})",
                task_gone(held.id),
                task_exists(&fx.a_out, r#"{"next": 1}"#)
            ))
            .then_notifies(&fx.a_out),
            Case::new(
                "a confined service: follow-up where it may only work",
                CSERVICE,
                "42501",
            )
            .call(complete_with_follow_up_sql(
                a,
                held,
                &follow_up(&fx.a_other),
            ))
            .then(complete_with_follow_up_sql(a, held, &follow_up(&fx.a_out)))
            .then_check(format!(
                "SELECT ({}) AND ({})",
                task_gone(held.id),
                task_exists(&fx.a_out, r#"{"next": 1}"#)
            ))
            .then_notifies(&fx.a_out),
            Case::new(
                "a confined service: second follow-up outside its grants",
                CSERVICE,
                "42501",
            )
            .call(complete_with_follow_up_sql(
                a,
                held,
                &format!(
                    r#"[{{"queue": "{}"}}, {{"queue": "{}"}}]"#,
                    fx.a_out, fx.b_fresh
                ),
            ))
            .then(complete_with_follow_up_sql(a, held, &follow_up(&fx.a_out)))
            .then_check(format!(
                "SELECT ({}) AND ({})",
                task_gone(held.id),
                task_exists(&fx.a_out, r#"{"next": 1}"#)
            ))
            .then_notifies(&fx.a_out),
        ]
    });
}

/// `app_cworker` is confined to `t_a.*`: in `t_b.*` it may not claim, read
/// or settle, even with the right token, and a call there must not reach
/// anything (a claim that got past the check would promote the due timer
/// and reclaim the expired lease; a settlement would apply).
#[test]
fn a_confined_worker_changes_nothing_outside_its_queues() {
    let cluster = Cluster::shared();
    run_cases(cluster, |fx| {
        let a = &fx.a.name;
        let b = &fx.b.name;
        let hb = fx.b.held;
        let then_claim = |c: Case| {
            c.warm_up(claim_sql(a))
                .then(claim_sql(a))
                .then_check(format!(
                    "SELECT count(*) = 2 FROM aedb_queue.task WHERE queue = '{a}' \
                     AND owner_id = 'w' AND state = 'in_flight'"
                ))
        };
        vec![
            then_claim(Case::new("claim outside its grant", CWORKER, "42501").call(claim_sql(b))),
            then_claim(
                Case::new("claim in a fresh queue outside its grant", CWORKER, "42501")
                    .call(claim_sql(&fx.b_fresh)),
            ),
            then_claim(
                Case::new("queue_get outside its grant", CWORKER, "42501")
                    .call(format!("SELECT * FROM aedb_queue.queue_get('{b}', {})", hb.id)),
            ),
            then_claim(
                Case::new("queue_list outside its grant", CWORKER, "42501")
                    .call(format!("SELECT * FROM aedb_queue.queue_list('{b}')")),
            ),
            then_claim(
                Case::new("complete outside its grant, with the right token", CWORKER, "42501")
                    .call(complete_sql(b, hb)),
            ),
            then_claim(
                Case::new("complete_batch outside its grant, with the right tokens", CWORKER, "42501")
                    .call(format!(
                        "SELECT * FROM aedb_queue.queue_complete_batch('{b}', ARRAY[{}]::int8[], \
                         ARRAY[{}]::int8[])",
                        hb.id, hb.token
                    )),
            ),
            then_claim(
                Case::new("fail outside its grant, with the right token", CWORKER, "42501")
                    .call(format!(
                        "SELECT aedb_queue.queue_fail('{b}', {}, {}, 'nope', dead_letter => true)",
                        hb.id, hb.token
                    )),
            ),
            then_claim(
                Case::new("heartbeat outside its grant, with the right token", CWORKER, "42501")
                    .call(format!(
                        "SELECT aedb_queue.queue_heartbeat('{b}', {}, {}, '1 hour', progress => '{{}}')",
                        hb.id, hb.token
                    )),
            ),
            // The task id of another queue's task, through a queue it may use.
            then_claim(
                Case::expecting(
                    "complete another queue's task through its own queue",
                    CWORKER,
                    Expect::Returns("lease_lost"),
                )
                .call(complete_sql(a, hb)),
            ),
        ]
    });
}
