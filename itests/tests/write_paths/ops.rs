//! The operation sequence the differential test runs through both write
//! paths: drawn from a seeded PRNG, each call sent to both databases in
//! turn and its returned rows compared at once.

use aedb_queue_itests::{json, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::side::{Params, Side, Who};

/// A task the workers hold: (task id, fencing token).
type Held = (i64, i64);

/// What the test knows of the queue: the same on both sides as long as
/// every reply was.
struct Run {
    rng: StdRng,
    queue: &'static str,
    held: Vec<Held>,
    keys: Vec<String>,
    enqueued: usize,
}

/// Runs `count` operations drawn from `seed` through both sides; panics at
/// the first call whose replies differ, naming it.
pub fn run_sequence(sides: &mut [Side; 2], seed: u64, count: usize, queue: &'static str) {
    let mut run = Run {
        rng: StdRng::seed_from_u64(seed),
        queue,
        held: Vec::new(),
        keys: Vec::new(),
        enqueued: 0,
    };
    for step in 0..count {
        run.step(sides, step);
    }
}

impl Run {
    fn step(&mut self, sides: &mut [Side; 2], step: usize) {
        let pick = self.rng.gen_range(0..100);
        match pick {
            0..=19 => self.enqueue(sides, step),
            20..=29 => self.enqueue_batch(sides, step),
            30..=44 => self.claim(sides, step),
            45..=57 => self.complete(sides, step),
            58..=63 => self.complete_batch(sides, step),
            64..=71 => self.fail(sides, step),
            72..=77 => self.heartbeat(sides, step),
            78..=83 => self.release(sides, step),
            84..=91 => self.complete_and_claim(sides, step),
            92..=95 => self.fail_and_claim(sides, step),
            _ => self.in_transaction(sides, step),
        }
    }

    /// Runs one call on both sides; both must reply alike. Returns the
    /// first side's rows, parsed.
    fn both(
        sides: &mut [Side; 2],
        step: usize,
        who: Who,
        call: &str,
        params: &Params,
    ) -> Vec<Value> {
        let first = sides[0].call(who, call, params);
        let second = sides[1].call(who, call, params);
        if first != second {
            panic!(
                "step {step}: `{call}` replied differently\n  {}: {first:#?}\n  {}: {second:#?}",
                sides[0].db, sides[1].db
            );
        }
        first
            .iter()
            .map(|row| serde_json::from_str(row).unwrap_or_else(|_| json!({ "error": row })))
            .collect()
    }

    /// A payload of 10 bytes to 12 kB: one in twelve is random hex far
    /// past the TOAST threshold even compressed, one in six medium. With
    /// `refusable`, three in ten have a key of the user's unique index or
    /// exclusion constraint (not inside a transaction of several calls,
    /// whose later calls a refusal would abort).
    fn payload(&mut self, refusable: bool) -> Value {
        self.enqueued += 1;
        let pad_len = match self.rng.gen_range(0..12) {
            0 => 12_000,
            1 | 2 => 600,
            _ => 8,
        };
        let pad: String = (0..pad_len)
            .map(|_| char::from_digit(self.rng.gen_range(0..16), 16).unwrap())
            .collect();
        let kind = ["mail", "sms", "push"][self.rng.gen_range(0..3)];
        let mut payload = json!({ "kind": kind, "n": self.enqueued, "pad": pad });
        // Now and then a value the user's unique index or exclusion
        // constraint refuses while another live task has it.
        match self.rng.gen_range(0..20) {
            _ if !refusable => {}
            0..=2 => payload["uniq"] = json!(format!("u{}", self.rng.gen_range(0..3))),
            3..=5 => payload["excl"] = json!(format!("e{}", self.rng.gen_range(0..3))),
            _ => {}
        }
        payload
    }

    /// A held task (removed from what is held), with its token or, one
    /// time in eight, a stale one.
    fn take_held(&mut self) -> Option<(Held, bool)> {
        if self.held.is_empty() {
            return None;
        }
        let (id, token) = self
            .held
            .swap_remove(self.rng.gen_range(0..self.held.len()));
        if self.rng.gen_range(0..8) == 0 {
            self.held.push((id, token)); // fenced out: still held
            return Some(((id, token + 1), false));
        }
        Some(((id, token), true))
    }

    fn owner(&mut self) -> String {
        format!("w{}", self.rng.gen_range(0..3))
    }

    fn enqueue(&mut self, sides: &mut [Side; 2], step: usize) {
        let payload = self.payload(true);
        let delay = if self.rng.gen_range(0..5) == 0 {
            "1 hour"
        } else {
            "0"
        };
        let priority: i64 = self.rng.gen_range(0..3);
        let key: Option<String> = match self.rng.gen_range(0..6) {
            0 if !self.keys.is_empty() => {
                Some(self.keys[self.rng.gen_range(0..self.keys.len())].clone())
            }
            1 | 2 => {
                self.keys.push(format!("key-{step}"));
                self.keys.last().cloned()
            }
            _ => None,
        };
        let call = "SELECT * FROM aedb_queue.queue_enqueue($1::text, $2::jsonb, \
                    delay => $3::text::interval, priority => $4::int8, \
                    backoff_base => '1 hour', backoff_max => '2 hours', idempotency_key => $5::text)";
        Self::both(
            sides,
            step,
            Who::Producer,
            call,
            &vec![&self.queue, &payload, &delay, &priority, &key],
        );
    }

    fn enqueue_batch(&mut self, sides: &mut [Side; 2], step: usize) {
        let size = self.rng.gen_range(1..=8);
        let payloads: Vec<Value> = (0..size).map(|_| self.payload(true)).collect();
        let priority: i64 = self.rng.gen_range(0..3);
        let call = "SELECT * FROM aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[], \
                    priority => $3::int8, backoff_base => '1 hour', backoff_max => '2 hours')";
        Self::both(
            sides,
            step,
            Who::Producer,
            call,
            &vec![&self.queue, &payloads, &priority],
        );
    }

    /// Takes the claimed tasks of a reply (rows with a task id) as held.
    fn hold(&mut self, rows: &[Value]) {
        for row in rows {
            if let (Some(id), Some(token)) =
                (row["task_id"].as_i64(), row["fencing_token"].as_i64())
            {
                self.held.push((id, token));
            }
        }
    }

    fn claim(&mut self, sides: &mut [Side; 2], step: usize) {
        let owner = self.owner();
        let max: i32 = if self.rng.gen_bool(0.5) { 1 } else { 10 };
        let call = "SELECT * FROM aedb_queue.queue_claim($1::text, $2::text, '1 hour', $3::int4)";
        let rows = Self::both(
            sides,
            step,
            Who::Worker,
            call,
            &vec![&self.queue, &owner, &max],
        );
        self.hold(&rows);
    }

    fn complete(&mut self, sides: &mut [Side; 2], step: usize) {
        let Some(((id, token), _)) = self.take_held() else {
            return;
        };
        let call = "SELECT * FROM aedb_queue.queue_complete($1::text, $2::int8, $3::int8)";
        Self::both(
            sides,
            step,
            Who::Worker,
            call,
            &vec![&self.queue, &id, &token],
        );
    }

    fn complete_batch(&mut self, sides: &mut [Side; 2], step: usize) {
        let (mut ids, mut tokens) = (Vec::new(), Vec::new());
        for _ in 0..self.rng.gen_range(1..=4) {
            if let Some(((id, token), _)) = self.take_held() {
                ids.push(id);
                tokens.push(token);
            }
        }
        let call =
            "SELECT * FROM aedb_queue.queue_complete_batch($1::text, $2::int8[], $3::int8[])";
        Self::both(
            sides,
            step,
            Who::Worker,
            call,
            &vec![&self.queue, &ids, &tokens],
        );
    }

    fn fail(&mut self, sides: &mut [Side; 2], step: usize) {
        let Some(((id, token), _)) = self.take_held() else {
            return;
        };
        // Never a backoff that could come due during the run: each side
        // would promote it at its own moment.
        let (retry_in, dead_letter): (Option<&str>, bool) = match self.rng.gen_range(0..4) {
            0 => (Some("0"), false),
            1 => (Some("1 hour"), false),
            2 => (None, false), // the task's own backoff: 1 hour and more
            _ => (None, true),
        };
        let call = "SELECT * FROM aedb_queue.queue_fail($1::text, $2::int8, $3::int8, $4::text, \
                    retry_in => $5::text::interval, dead_letter => $6::bool)";
        let error = format!("error at step {step}");
        Self::both(
            sides,
            step,
            Who::Worker,
            call,
            &vec![&self.queue, &id, &token, &error, &retry_in, &dead_letter],
        );
    }

    fn heartbeat(&mut self, sides: &mut [Side; 2], step: usize) {
        let Some((held, valid)) = self.take_held() else {
            return;
        };
        if valid {
            self.held.push(held); // a heartbeat keeps the lease
        }
        let progress = json!({ "step": step });
        let call = "SELECT * FROM aedb_queue.queue_heartbeat($1::text, $2::int8, $3::int8, \
                    '1 hour', progress => $4::jsonb)";
        Self::both(
            sides,
            step,
            Who::Worker,
            call,
            &vec![&self.queue, &held.0, &held.1, &progress],
        );
    }

    fn release(&mut self, sides: &mut [Side; 2], step: usize) {
        let Some(((id, token), _)) = self.take_held() else {
            return;
        };
        let delay = if self.rng.gen_bool(0.5) {
            "0"
        } else {
            "1 hour"
        };
        let call = "SELECT * FROM aedb_queue.queue_release($1::text, $2::int8, $3::int8, \
                    delay => $4::text::interval)";
        Self::both(
            sides,
            step,
            Who::Worker,
            call,
            &vec![&self.queue, &id, &token, &delay],
        );
    }

    fn complete_and_claim(&mut self, sides: &mut [Side; 2], step: usize) {
        let Some(((id, token), _)) = self.take_held() else {
            return self.claim(sides, step);
        };
        let owner = self.owner();
        let max: i32 = self.rng.gen_range(1..=3);
        let call = "SELECT * FROM aedb_queue.queue_complete_and_claim($1::text, $2::text, \
                    $3::int8, $4::int8, lease => '1 hour', max => $5::int4)";
        let rows = Self::both(
            sides,
            step,
            Who::Worker,
            call,
            &vec![&self.queue, &owner, &id, &token, &max],
        );
        self.hold(&rows);
    }

    /// Calls in one transaction; what they claim they complete, so what
    /// is held is the same after a commit or a rollback.
    fn in_transaction(&mut self, sides: &mut [Side; 2], step: usize) {
        let payloads: Vec<Value> = (0..self.rng.gen_range(1..=3))
            .map(|_| self.payload(false))
            .collect();
        let max: i32 = self.rng.gen_range(1..=4);
        let commit = self.rng.gen_bool(0.7);
        let first = sides[0].transaction(self.queue, &payloads, max, commit);
        let second = sides[1].transaction(self.queue, &payloads, max, commit);
        assert_eq!(
            first, second,
            "step {step}: a transaction of calls (commit: {commit}) replied differently \
             ({} first)",
            sides[0].db
        );
    }

    fn fail_and_claim(&mut self, sides: &mut [Side; 2], step: usize) {
        let Some(((id, token), _)) = self.take_held() else {
            return self.claim(sides, step);
        };
        let owner = self.owner();
        let call = "SELECT * FROM aedb_queue.queue_fail_and_claim($1::text, $2::text, \
                    $3::int8, $4::int8, 'failed and claimed', retry_in => '0', \
                    lease => '1 hour', max => 1)";
        let rows = Self::both(
            sides,
            step,
            Who::Worker,
            call,
            &vec![&self.queue, &owner, &id, &token],
        );
        self.hold(&rows);
    }
}
