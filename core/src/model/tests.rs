//! The model's own checks: scenarios from the README, worked by hand.

use super::*;

fn config() -> Config {
    Config {
        keep_completed: false,
        concurrency_limit: 1,
    }
}

fn args() -> EnqueueArgs {
    EnqueueArgs {
        priority: 0,
        delay: Delay::Now,
        max_attempts: None,
        idempotency_key: None,
        wait_for: Vec::new(),
        run_on_parent_failure: false,
        concurrency_key: None,
        ordering_key: None,
    }
}

fn enqueue(m: &mut Model, args: EnqueueArgs) -> Reply {
    m.apply(&Op::Enqueue {
        by: Session::Producer,
        args,
        commit: true,
    })
}

fn claim(m: &mut Model, max: i32) -> Vec<Claimed> {
    match m.apply(&Op::Claim {
        by: Session::Worker,
        owner: 0,
        max,
    }) {
        Reply::Claimed(c) => c,
        other => panic!("{other:?}"),
    }
}

fn complete(m: &mut Model, task: u8, token: TokenRef, strict: bool) -> Reply {
    m.apply(&Op::Complete {
        by: Session::Worker,
        task: TaskRef::Known(task),
        token,
        result: None,
        follow_up: None,
        strict,
    })
}

#[test]
fn a_stale_token_is_fenced_out_and_strict_raises_40002() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    assert_eq!(claim(&mut m, 1)[0].fencing_token, 1);
    m.apply(&Op::Fail {
        by: Session::Worker,
        task: TaskRef::Known(0),
        token: TokenRef::Current,
        how: FailHow::RetryNow,
    });
    assert_eq!(claim(&mut m, 1)[0].attempts, 2);
    assert_eq!(
        complete(&mut m, 0, TokenRef::Stale, false),
        Reply::Outcome(Outcome::LeaseLost)
    );
    assert_eq!(
        complete(&mut m, 0, TokenRef::Stale, true),
        Reply::Error(LEASE_LOST)
    );
    assert_eq!(
        complete(&mut m, 0, TokenRef::Current, false),
        Reply::Outcome(Outcome::Applied)
    );
    assert!(m.rows().is_empty(), "completed and not kept");
}

#[test]
fn claims_serve_priority_then_id_and_keys_outlive_tasks() {
    let mut m = Model::new(config());
    let keyed = EnqueueArgs {
        idempotency_key: Some(1),
        ..args()
    };
    enqueue(&mut m, keyed.clone());
    enqueue(
        &mut m,
        EnqueueArgs {
            priority: 2,
            ..args()
        },
    );
    let got: Vec<Handle> = claim(&mut m, 5).iter().map(|c| c.task).collect();
    assert_eq!(got, [1, 0]);
    complete(&mut m, 0, TokenRef::Current, false);
    assert_eq!(
        enqueue(&mut m, keyed),
        Reply::Enqueued {
            task: 0,
            deduplicated: true
        }
    );
}

#[test]
fn a_concurrency_key_holds_one_slot_and_hands_it_on() {
    let mut m = Model::new(config());
    let keyed = EnqueueArgs {
        concurrency_key: Some(0),
        ..args()
    };
    enqueue(&mut m, keyed.clone());
    enqueue(&mut m, keyed);
    assert_eq!(m.task(1).state, State::Blocked);
    claim(&mut m, 1);
    complete(&mut m, 0, TokenRef::Current, false);
    assert_eq!(m.task(1).state, State::Ready);
}

#[test]
fn a_cancelled_parent_dead_letters_its_child_and_grandchild() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    let child = |of| EnqueueArgs {
        wait_for: vec![TaskRef::Known(of)],
        ..args()
    };
    enqueue(&mut m, child(0));
    enqueue(&mut m, child(1));
    assert_eq!(m.task(2).state, State::Waiting);
    m.apply(&Op::Cancel {
        by: Session::Admin,
        task: TaskRef::Known(0),
    });
    assert_eq!(
        m.task(2).last_error,
        Some(LastError::Parent {
            parent: 1,
            why: "was dead-lettered"
        })
    );
    // The cancelled parent is missing now: a new child is refused.
    assert_eq!(enqueue(&mut m, child(0)), Reply::Error(INVALID_PARAMETER));
}

#[test]
fn an_expired_lease_still_belongs_to_its_holder_until_reclaimed() {
    let mut m = Model::new(config());
    enqueue(
        &mut m,
        EnqueueArgs {
            max_attempts: Some(1),
            ..args()
        },
    );
    enqueue(&mut m, args());
    claim(&mut m, 1);
    m.apply(&Op::ExpireLease {
        task: TaskRef::Known(0),
    });
    assert_eq!(m.task(0).state, State::InFlight);
    // The next claim reclaims it first: its last attempt, so dead.
    assert_eq!(claim(&mut m, 1)[0].task, 1);
    assert_eq!(m.task(0).state, State::Dead);
    assert_eq!(
        complete(&mut m, 0, TokenRef::Current, false),
        Reply::Outcome(Outcome::LeaseLost)
    );
}

#[test]
fn a_refused_call_changes_nothing() {
    let mut m = Model::new(config());
    let r = m.apply(&Op::Enqueue {
        by: Session::Worker,
        args: args(),
        commit: true,
    });
    assert_eq!(r, Reply::Error(INSUFFICIENT_PRIVILEGE));
    assert_eq!(m.created(), 0);
    let r = m.apply(&Op::Enqueue {
        by: Session::Producer,
        args: args(),
        commit: false,
    });
    assert_eq!(
        r,
        Reply::RolledBack {
            deduplicated_to: None
        }
    );
    assert_eq!(m.created(), 0);
}

#[test]
fn a_rolled_back_child_leaves_its_parent_unmarked() {
    // Found by the property test: the model kept the parent's
    // has_dependents mark of a child enqueue that rolled back.
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    claim(&mut m, 1);
    let r = m.apply(&Op::Enqueue {
        by: Session::Producer,
        args: EnqueueArgs {
            wait_for: vec![TaskRef::Known(0)],
            ..args()
        },
        commit: false,
    });
    assert_eq!(
        r,
        Reply::RolledBack {
            deduplicated_to: None
        }
    );
    complete(&mut m, 0, TokenRef::Current, false);
    assert_eq!(m.task(0).state, State::Gone, "no dependents: not kept");
}

#[test]
fn complete_and_claim_claims_after_a_lost_lease_unless_strict() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    let op = |strict| Op::CompleteAndClaim {
        by: Session::Worker,
        task: TaskRef::Unknown,
        token: TokenRef::Current,
        strict,
        owner: 1,
        max: 1,
    };
    assert_eq!(m.apply(&op(true)), Reply::Error(LEASE_LOST));
    assert_eq!(m.task(0).state, State::Ready);
    match m.apply(&op(false)) {
        Reply::SettledAndClaimed(Outcome::LeaseLost, claimed) => assert_eq!(claimed[0].task, 0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_ordering_keys_line_runs_one_at_a_time_in_id_order() {
    let mut m = Model::new(config());
    let ordered = |priority| EnqueueArgs {
        ordering_key: Some(0),
        priority,
        ..args()
    };
    enqueue(&mut m, ordered(0));
    enqueue(&mut m, ordered(2));
    assert_eq!(m.task(1).state, State::Blocked);
    assert_eq!(claim(&mut m, 5).len(), 1, "only the head");
    m.apply(&Op::Fail {
        by: Session::Worker,
        task: TaskRef::Known(0),
        token: TokenRef::Current,
        how: FailHow::DeadLetter,
    });
    assert_eq!(
        m.task(1).state,
        State::Blocked,
        "a dead head stops the line"
    );
    m.apply(&Op::Cancel {
        by: Session::Admin,
        task: TaskRef::Known(0),
    });
    assert_eq!(m.task(1).state, State::Ready);
    let both = EnqueueArgs {
        concurrency_key: Some(0),
        ..ordered(0)
    };
    assert_eq!(enqueue(&mut m, both), Reply::Error(INVALID_PARAMETER));
}

#[test]
fn a_batch_settles_a_task_named_twice_once() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    claim(&mut m, 1);
    let batch = |strict| Op::CompleteBatch {
        by: Session::Worker,
        entries: vec![
            (TaskRef::InFlight(0), TokenRef::Current),
            (TaskRef::InFlight(0), TokenRef::Current),
        ],
        strict,
    };
    assert_eq!(m.apply(&batch(true)), Reply::Error(LEASE_LOST));
    assert_eq!(m.task(0).state, State::InFlight, "strict: nothing applied");
    assert_eq!(
        m.apply(&batch(false)),
        Reply::Outcomes(vec![Outcome::Applied, Outcome::LeaseLost])
    );
}

#[test]
fn a_child_of_a_failed_parent_and_of_its_child_names_the_parent() {
    // Found by the property test (shrunk to 6 ops): the model dead-lettered
    // depth first, so the grandchild named the child.
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    let waits = |on: Vec<u8>| EnqueueArgs {
        wait_for: on.into_iter().map(TaskRef::Known).collect(),
        ..args()
    };
    enqueue(&mut m, waits(vec![0]));
    enqueue(&mut m, waits(vec![0, 1]));
    m.apply(&Op::Cancel {
        by: Session::Admin,
        task: TaskRef::Known(0),
    });
    let cancelled = Some(LastError::Parent {
        parent: 0,
        why: "was cancelled",
    });
    assert_eq!(m.task(1).last_error, cancelled);
    assert_eq!(m.task(2).last_error, cancelled);
}

#[test]
fn a_kept_completed_task_reads_with_its_result_and_no_error() {
    let mut m = Model::new(Config {
        keep_completed: true,
        ..config()
    });
    enqueue(&mut m, args());
    claim(&mut m, 1);
    m.apply(&Op::Fail {
        by: Session::Worker,
        task: TaskRef::Known(0),
        token: TokenRef::Current,
        how: FailHow::RetryNow,
    });
    claim(&mut m, 1);
    m.apply(&Op::Complete {
        by: Session::Worker,
        task: TaskRef::Known(0),
        token: TokenRef::Current,
        result: Some(7),
        follow_up: None,
        strict: false,
    });
    let row = &m.rows()[0];
    assert_eq!(
        (row.state, row.result, &row.last_error),
        ("completed", Some(7), &None)
    );
}

fn batch(m: &mut Model, args: EnqueueArgs, entries: u8, commit: bool) -> Reply {
    m.apply(&Op::EnqueueBatch {
        by: Session::Producer,
        args,
        entries,
        commit,
    })
}

fn purge(m: &mut Model, by: Session, state: PurgeState, force: bool) -> Reply {
    m.apply(&Op::Purge { by, state, force })
}

#[test]
fn a_batch_returns_its_tasks_in_payload_order_and_a_line_takes_them_so() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    let ordered = EnqueueArgs {
        ordering_key: Some(0),
        priority: 2,
        ..args()
    };
    assert_eq!(
        batch(&mut m, ordered, 3, true),
        Reply::EnqueuedBatch(vec![1, 2, 3])
    );
    let entries: Vec<_> = m.rows().iter().map(|r| r.payload_entry).collect();
    assert_eq!(entries, [None, Some(0), Some(1), Some(2)]);
    let states: Vec<_> = m.rows().iter().map(|r| r.state).collect();
    assert_eq!(states, ["ready", "ready", "blocked", "blocked"]);
    // Priority orders the heads, never the line.
    let got: Vec<Handle> = claim(&mut m, 5).iter().map(|c| c.task).collect();
    assert_eq!(got, [1, 0]);
}

#[test]
fn a_batch_of_a_concurrency_key_fills_the_free_slots_first() {
    let mut m = Model::new(Config {
        concurrency_limit: 2,
        ..config()
    });
    let keyed = EnqueueArgs {
        concurrency_key: Some(1),
        ..args()
    };
    enqueue(&mut m, keyed.clone());
    batch(&mut m, keyed, 3, true);
    let states: Vec<_> = m.rows().iter().map(|r| r.state).collect();
    assert_eq!(states, ["ready", "ready", "blocked", "blocked"]);
}

#[test]
fn a_batch_waits_for_its_parents_named_once_and_dies_with_a_dead_one() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    // Known(1) names task 0 (1 % 1) as the call is made; named again once
    // the batch's first task exists, it would name that one (1 % 2).
    let children = EnqueueArgs {
        wait_for: vec![TaskRef::Known(1)],
        ..args()
    };
    assert_eq!(
        batch(&mut m, children.clone(), 2, true),
        Reply::EnqueuedBatch(vec![1, 2])
    );
    assert_eq!(m.task(1).state, State::Waiting);
    assert_eq!(m.task(0).children, [1, 2]);
    claim(&mut m, 1);
    m.apply(&Op::Fail {
        by: Session::Worker,
        task: TaskRef::Known(0),
        token: TokenRef::Current,
        how: FailHow::DeadLetter,
    });
    // Task 0 dead: a new batch waiting for it is enqueued dead.
    let of_dead = EnqueueArgs {
        wait_for: vec![TaskRef::Known(0)],
        ..args()
    };
    assert_eq!(
        batch(&mut m, of_dead, 2, true),
        Reply::EnqueuedBatch(vec![3, 4])
    );
    let dead = Some(LastError::Parent {
        parent: 0,
        why: "is dead",
    });
    assert_eq!(
        (m.task(4).state, &m.task(4).last_error),
        (State::Dead, &dead)
    );
    // A missing parent refuses the whole batch.
    let missing = EnqueueArgs {
        wait_for: vec![TaskRef::Unknown],
        ..args()
    };
    assert_eq!(
        batch(&mut m, missing, 3, true),
        Reply::Error(INVALID_PARAMETER)
    );
    assert_eq!(m.created(), 5);
}

#[test]
fn a_batch_rolled_back_or_refused_leaves_nothing() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    assert_eq!(batch(&mut m, args(), 4, false), Reply::RolledBackBatch(4));
    let both = EnqueueArgs {
        concurrency_key: Some(0),
        ordering_key: Some(0),
        ..args()
    };
    assert_eq!(
        batch(&mut m, both, 2, true),
        Reply::Error(INVALID_PARAMETER)
    );
    let r = m.apply(&Op::EnqueueBatch {
        by: Session::Worker,
        args: args(),
        entries: 1,
        commit: true,
    });
    assert_eq!(r, Reply::Error(INSUFFICIENT_PRIVILEGE));
    assert_eq!(m.created(), 1);
}

#[test]
fn a_purge_needs_an_admin_a_known_state_and_force_for_in_flight() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    claim(&mut m, 1);
    for by in [Session::Producer, Session::Worker, Session::Service] {
        assert_eq!(
            purge(&mut m, by, PurgeState::InFlight, true),
            Reply::Error(INSUFFICIENT_PRIVILEGE)
        );
    }
    assert_eq!(
        purge(&mut m, Session::Admin, PurgeState::InFlight, false),
        Reply::Error(INVALID_PARAMETER)
    );
    assert_eq!(
        purge(&mut m, Session::Admin, PurgeState::Unknown, true),
        Reply::Error(INVALID_PARAMETER)
    );
    assert_eq!(m.task(0).state, State::InFlight);
    assert_eq!(
        purge(&mut m, Session::Admin, PurgeState::InFlight, true),
        Reply::Count(1)
    );
    // Its holder is fenced out.
    assert_eq!(
        complete(&mut m, 0, TokenRef::Current, false),
        Reply::Outcome(Outcome::LeaseLost)
    );
}

#[test]
fn a_purge_hands_on_slots_and_lines_and_keeps_keys() {
    let mut m = Model::new(config());
    let keyed = EnqueueArgs {
        concurrency_key: Some(0),
        idempotency_key: Some(2),
        ..args()
    };
    enqueue(&mut m, keyed);
    enqueue(
        &mut m,
        EnqueueArgs {
            concurrency_key: Some(0),
            ..args()
        },
    );
    let ordered = EnqueueArgs {
        ordering_key: Some(0),
        ..args()
    };
    batch(&mut m, ordered, 2, true);
    assert_eq!(m.task(1).state, State::Blocked);
    assert_eq!(m.task(3).state, State::Blocked);
    // The ready slot holder and line head go: the blocked ones get on.
    assert_eq!(
        purge(&mut m, Session::Admin, PurgeState::Ready, false),
        Reply::Count(2)
    );
    assert_eq!(m.task(1).state, State::Ready);
    assert_eq!(m.task(3).state, State::Ready);
    assert_eq!(
        enqueue(
            &mut m,
            EnqueueArgs {
                idempotency_key: Some(2),
                ..args()
            }
        ),
        Reply::Enqueued {
            task: 0,
            deduplicated: true
        }
    );
    assert_eq!(
        purge(&mut m, Session::Admin, PurgeState::Blocked, false),
        Reply::Count(0)
    );
}

#[test]
fn a_purged_parent_dead_letters_children_breadth_first_or_lets_them_run() {
    let mut m = Model::new(config());
    enqueue(&mut m, args()); // 0
    enqueue(&mut m, args()); // 1
    let waits = |on: Vec<u8>, run| EnqueueArgs {
        wait_for: on.into_iter().map(TaskRef::Known).collect(),
        run_on_parent_failure: run,
        ..args()
    };
    enqueue(&mut m, waits(vec![0], false)); // 2
    enqueue(&mut m, waits(vec![2, 1], false)); // 3
    enqueue(&mut m, waits(vec![0, 1], true)); // 4
    assert_eq!(
        purge(&mut m, Session::Admin, PurgeState::Ready, false),
        Reply::Count(2)
    );
    let purged = |parent| {
        Some(LastError::Parent {
            parent,
            why: "was purged",
        })
    };
    assert_eq!(m.task(2).last_error, purged(0));
    // 3 waited for a purged task too: it names it, not its sibling 2.
    assert_eq!(m.task(3).last_error, purged(1));
    assert_eq!(m.task(4).state, State::Ready, "'run': both parents count");
}

#[test]
fn a_purged_child_of_a_purged_parent_is_not_dead_lettered_and_counts_once() {
    let mut m = Model::new(config());
    enqueue(&mut m, args()); // 0
    let waits = |on| EnqueueArgs {
        wait_for: vec![TaskRef::Known(on)],
        ..args()
    };
    enqueue(&mut m, waits(0)); // 1
    enqueue(&mut m, waits(1)); // 2
    assert_eq!(
        purge(&mut m, Session::Admin, PurgeState::Waiting, false),
        Reply::Count(2)
    );
    assert_eq!(m.rows().len(), 1);
}

#[test]
fn purging_kept_completed_tasks_leaves_their_children_waiting() {
    let mut m = Model::new(config());
    enqueue(&mut m, args()); // 0
    enqueue(&mut m, args()); // 1
    enqueue(
        &mut m,
        EnqueueArgs {
            wait_for: vec![TaskRef::Known(0), TaskRef::Known(1)],
            ..args()
        },
    ); // 2
    claim(&mut m, 1);
    complete(&mut m, 0, TokenRef::Current, false);
    assert_eq!(m.task(0).state, State::Completed, "kept for its child");
    assert_eq!(
        purge(&mut m, Session::Admin, PurgeState::Completed, false),
        Reply::Count(1)
    );
    assert_eq!(m.task(2).state, State::Waiting);
    assert_eq!(m.task(2).waiting_on, 1);
}

// --- Durable workflows ---

fn record(m: &mut Model, token: TokenRef, step: u8, strict: bool) -> Reply {
    m.apply(&Op::StepRecord {
        by: Session::Worker,
        task: TaskRef::Known(0),
        token,
        step,
        result: Some(step),
        strict,
    })
}

fn sleep(m: &mut Model, step: u8, how: SleepFor) -> Reply {
    m.apply(&Op::Sleep {
        by: Session::Worker,
        task: TaskRef::Known(0),
        token: TokenRef::Current,
        step,
        how,
        strict: false,
    })
}

fn await_event(m: &mut Model, step: u8) -> Reply {
    m.apply(&Op::AwaitEvent {
        by: Session::Worker,
        task: TaskRef::Known(0),
        token: TokenRef::Current,
        step,
        strict: false,
    })
}

fn awaited(waiting: bool, wake_at: Option<usize>, payload: Option<u8>, timed_out: bool) -> Reply {
    Reply::Awaited {
        outcome: Outcome::Applied,
        waiting,
        wake_at: wake_at.map(At),
        payload,
        timed_out,
    }
}

#[test]
fn a_step_is_recorded_once_under_the_current_token() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    claim(&mut m, 1);
    assert_eq!(
        record(&mut m, TokenRef::Stale, 0, false),
        Reply::Outcome(Outcome::LeaseLost)
    );
    assert_eq!(
        record(&mut m, TokenRef::Ahead, 0, true),
        Reply::Error(LEASE_LOST)
    );
    assert_eq!(
        record(&mut m, TokenRef::Current, 0, false),
        Reply::Outcome(Outcome::Applied)
    );
    assert_eq!(
        record(&mut m, TokenRef::Current, 0, false),
        Reply::Error(UNIQUE_VIOLATION)
    );
    // A stale worker is fenced out before the name is looked at.
    assert_eq!(
        record(&mut m, TokenRef::Stale, 0, false),
        Reply::Outcome(Outcome::LeaseLost)
    );
    let t = m.task(0);
    assert_eq!(t.state, State::InFlight, "a step leaves the task in flight");
    assert_eq!(
        t.steps,
        vec![Step {
            name: 0,
            kind: StepKind::Record(Some(0)),
            attempt: 1,
            fencing_token: 1
        }]
    );
}

#[test]
fn a_sleep_parks_without_counting_the_attempt_and_keeps_its_first_wake_time() {
    let mut m = Model::new(config());
    enqueue(&mut m, args()); // op 0
    claim(&mut m, 1); // op 1
    let over = sleep(&mut m, 0, SleepFor::NoTime); // op 2
    assert_eq!(
        over,
        Reply::Slept {
            outcome: Outcome::Applied,
            waiting: false,
            wake_at: Some(At(2))
        }
    );
    let parked = sleep(&mut m, 1, SleepFor::ADay); // op 3
    assert_eq!(
        parked,
        Reply::Slept {
            outcome: Outcome::Applied,
            waiting: true,
            wake_at: Some(At(3))
        }
    );
    let row = &m.rows()[0];
    assert_eq!((row.state, row.attempts, row.owner), ("scheduled", 0, None));
    // The clock reaches the wake time: due, promoted by the next claim.
    m.apply(&Op::TimePasses {
        task: TaskRef::Parked(0),
    }); // op 4
    assert_eq!(m.rows()[0].state, "scheduled");
    let c = claim(&mut m, 1); // op 5
    assert_eq!((c[0].attempts, c[0].fencing_token), (1, 2));
    // The wake time reads as the clock's at op 4 now; a new duration is ignored.
    assert_eq!(
        sleep(&mut m, 1, SleepFor::UntilTomorrow),
        Reply::Slept {
            outcome: Outcome::Applied,
            waiting: false,
            wake_at: Some(At(4))
        }
    );
    // A step that is not a sleep: 22023.
    record(&mut m, TokenRef::Current, 2, false);
    assert_eq!(
        sleep(&mut m, 2, SleepFor::ADay),
        Reply::Error(INVALID_PARAMETER)
    );
}

#[test]
fn an_event_emitted_before_the_wait_ends_it_and_a_later_emit_wakes_a_waiter() {
    let mut m = Model::new(config());
    enqueue(&mut m, args()); // op 0
    claim(&mut m, 1); // op 1
    let emit = |m: &mut Model, key, payload| {
        m.apply(&Op::Emit {
            by: Session::Producer,
            key,
            payload,
        })
    };
    assert_eq!(emit(&mut m, 0, Some(7)), Reply::Bool(true)); // op 2
    assert_eq!(
        emit(&mut m, 0, Some(8)),
        Reply::Bool(false),
        "the first emit stands"
    );
    assert_eq!(await_event(&mut m, 0), awaited(false, None, Some(7), false));
    // Not emitted yet: parked until the deadline (this op's), attempt given back.
    assert_eq!(await_event(&mut m, 1), awaited(true, Some(5), None, false)); // op 5
    assert_eq!((m.rows()[0].state, m.rows()[0].attempts), ("scheduled", 0));
    assert_eq!(m.task(0).waits.len(), 1);
    assert_eq!(emit(&mut m, 1, None), Reply::Bool(true));
    assert_eq!(
        m.rows()[0].state,
        "ready",
        "woken in the emit's transaction"
    );
    claim(&mut m, 1);
    assert_eq!(await_event(&mut m, 1), awaited(false, None, None, false));
    assert!(m.task(0).waits.is_empty(), "the wait ended");
    // Recorded: a later call returns the same end.
    assert_eq!(await_event(&mut m, 1), awaited(false, None, None, false));
}

#[test]
fn a_wait_past_its_deadline_times_out_and_a_later_emit_changes_nothing() {
    let mut m = Model::new(config());
    enqueue(&mut m, args()); // op 0
    claim(&mut m, 1); // op 1
    assert_eq!(await_event(&mut m, 0), awaited(true, Some(2), None, false)); // op 2
    m.apply(&Op::TimePasses {
        task: TaskRef::Known(0),
    }); // op 3
    claim(&mut m, 1); // op 4
    assert_eq!(await_event(&mut m, 0), awaited(false, Some(3), None, true));
    m.apply(&Op::Emit {
        by: Session::Producer,
        key: 0,
        payload: Some(1),
    });
    assert_eq!(await_event(&mut m, 0), awaited(false, None, None, true));
    assert_eq!(
        m.task(0).steps[0].kind,
        StepKind::Event {
            payload: None,
            timed_out: true
        }
    );
}

#[test]
fn retry_from_a_step_drops_it_and_later_ones_and_wakes_a_parked_or_dead_task() {
    let mut m = Model::new(config());
    let retry = |m: &mut Model, by, step| {
        m.apply(&Op::RetryFromStep {
            by,
            task: TaskRef::Known(0),
            step: StepRef::Named(step),
        })
    };
    enqueue(&mut m, args());
    claim(&mut m, 1);
    record(&mut m, TokenRef::Current, 2, false);
    record(&mut m, TokenRef::Current, 0, false);
    assert_eq!(
        retry(&mut m, Session::Admin, 2),
        Reply::Error(OBJECT_NOT_IN_PREREQUISITE_STATE)
    );
    await_event(&mut m, 1); // parks
    assert_eq!(
        retry(&mut m, Session::Worker, 2),
        Reply::Error(INSUFFICIENT_PRIVILEGE)
    );
    assert_eq!(
        retry(&mut m, Session::Admin, 3),
        Reply::Error(INVALID_PARAMETER)
    );
    assert_eq!(retry(&mut m, Session::Admin, 0), Reply::Steps(vec![0]));
    assert!(m.task(0).waits.is_empty(), "the waits go with it");
    assert_eq!(m.rows()[0].state, "ready", "parked: due now");
    claim(&mut m, 1);
    m.apply(&Op::Fail {
        by: Session::Worker,
        task: TaskRef::Known(0),
        token: TokenRef::Current,
        how: FailHow::DeadLetter,
    });
    assert_eq!(m.rows()[0].state, "dead");
    assert_eq!(retry(&mut m, Session::Admin, 2), Reply::Steps(vec![2]));
    let row = &m.rows()[0];
    assert_eq!((row.state, row.attempts), ("ready", 0), "dead: retried");
    assert!(m.task(0).steps.is_empty());
    // Completed and gone: not a live task.
    claim(&mut m, 1);
    record(&mut m, TokenRef::Current, 1, false);
    complete(&mut m, 0, TokenRef::Current, false);
    assert_eq!(
        retry(&mut m, Session::Admin, 1),
        Reply::Error(INVALID_PARAMETER)
    );
}

#[test]
fn an_emit_that_wakes_a_waiter_promotes_the_due_timers_too() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    enqueue(&mut m, args());
    claim(&mut m, 2);
    let wait = |m: &mut Model, task, step| {
        m.apply(&Op::AwaitEvent {
            by: Session::Worker,
            task: TaskRef::Known(task),
            token: TokenRef::Current,
            step,
            strict: false,
        })
    };
    wait(&mut m, 1, 0);
    wait(&mut m, 0, 1);
    m.apply(&Op::TimePasses {
        task: TaskRef::Known(1),
    });
    assert_eq!(m.task(1).state, State::Scheduled, "due, not yet promoted");
    m.apply(&Op::Emit {
        by: Session::Producer,
        key: 1,
        payload: None,
    });
    assert_eq!(m.task(0).state, State::Ready, "woken");
    assert_eq!(m.task(1).state, State::Ready, "promoted with it");
}

#[test]
fn a_follow_up_does_not_exist_yet_when_its_completion_frees_a_slot() {
    let mut m = Model::new(config());
    let keyed = EnqueueArgs {
        concurrency_key: Some(0),
        ..args()
    };
    enqueue(&mut m, keyed.clone());
    enqueue(&mut m, keyed);
    claim(&mut m, 1);
    assert!(m.apply(&Op::Complete {
        by: Session::Service,
        task: TaskRef::Known(0),
        token: TokenRef::Current,
        result: None,
        follow_up: Some(FollowUp {
            priority: 5,
            idempotency_key: None,
            concurrency_key: Some(0),
        }),
        strict: false,
    }) == Reply::Outcome(Outcome::Applied));
    assert_eq!(m.task(1).state, State::Ready, "the blocked task takes the slot");
    assert_eq!(m.task(2).state, State::Blocked, "the follow-up waits, whatever its priority");
}

// --- Finished workflows and DAGs stay readable (0.9.0) ---

#[test]
fn a_task_that_recorded_a_step_is_kept_with_its_steps() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    enqueue(&mut m, args());
    claim(&mut m, 2);
    assert_eq!(
        record(&mut m, TokenRef::Current, 1, false),
        Reply::Outcome(Outcome::Applied)
    );
    complete(&mut m, 0, TokenRef::Current, false);
    complete(&mut m, 1, TokenRef::Current, false);
    assert_eq!(
        m.task(0).state,
        State::Completed,
        "a workflow's task is kept"
    );
    assert_eq!(m.task(0).steps.len(), 1);
    assert_eq!(m.task(1).state, State::Gone, "a plain task is not");
}

#[test]
fn a_child_linked_to_its_parent_is_kept_after_completing() {
    let mut m = Model::new(config());
    enqueue(&mut m, args());
    let child = EnqueueArgs {
        wait_for: vec![TaskRef::Known(0)],
        ..args()
    };
    enqueue(&mut m, child);
    claim(&mut m, 1);
    complete(&mut m, 0, TokenRef::Current, false);
    claim(&mut m, 1);
    complete(&mut m, 1, TokenRef::Current, false);
    assert_eq!(m.task(0).state, State::Completed);
    assert_eq!(m.task(1).state, State::Completed, "the leaf of the DAG too");
}
