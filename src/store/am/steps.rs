//! Every step PostgreSQL's executor takes for a plain INSERT, UPDATE or
//! DELETE of a table, and what the direct path does about it: the same
//! thing (through the same function, or because the step happens inside
//! the access method both paths call), or declines so that the statement
//! runs, or never meets it (with why).
//!
//! Read from PostgreSQL 15's source (15.18: executor/nodeModifyTable.c
//! `ExecInsert`, `ExecUpdate`, `ExecDelete`, `ExecInitModifyTable`;
//! execMain.c `standard_ExecutorStart` .. `ExecutorEnd`, `InitPlan`,
//! `CheckValidResultRel`, `ExecConstraints`; execIndexing.c;
//! execReplication.c `CheckCmdReplicaIdentity`; and the parser, rewriter
//! and planner steps a statement takes before its executor starts), and
//! what changed in them in 16, 17 and 18 (their sources: 16.15, 17.4,
//! 18.6), each such step marked with its major. The
//! ids follow the executor's order: P before the executor, a start and
//! result-relation set-up, b per inserted row, c per updated row, d per
//! deleted row, e end. `docs/write-path.md` explains the decisions.

// The list is read by people and by the test that checks it against
// `Decline`; nothing else runs it.
#![cfg_attr(not(any(test, feature = "pg_test")), allow(dead_code))]

use super::guards::Decline;

/// What the direct path does about one executor step.
#[derive(Clone, Copy, Debug)]
pub enum Decision {
    /// Done as the executor does it; says where.
    Done(&'static str),
    /// Declined: the statement runs when this step would act.
    Declined(Decline),
    /// Never met by the writes the direct path makes; says why.
    NotMet(&'static str),
}

pub struct Step {
    pub id: &'static str,
    /// The PostgreSQL function that takes the step.
    pub source: &'static str,
    pub step: &'static str,
    pub decision: Decision,
}

use Decision::{Declined, Done, NotMet};

const HEAP: &str = "inside the table access method both paths call (heap_insert, heap_multi_insert, heap_update, heap_delete, heap_lock_tuple)";

macro_rules! steps {
    ($(($id:literal, $source:literal, $step:literal, $decision:expr)),* $(,)?) => {
        &[$(Step { id: $id, source: $source, step: $step, decision: $decision }),*]
    };
}

pub const STEPS: &[Step] = steps![
    // Before the executor.
    ("P1", "setTargetTable", "RowExclusiveLock on the table until the end of the transaction", Done("table_open(RowExclusiveLock), closed with NoLock; index locks kept likewise")),
    ("P2", "rewriteTargetListIU", "column defaults and identity values for columns left out", Declined(Decline::LeftOutColumn)),
    ("P3", "expand_insert_targetlist", "NULL (coerced to a domain) for the remaining columns", Declined(Decline::Shape)),
    ("P4", "coerce_to_target_type", "domain constraints checked in the plan's projection", Declined(Decline::Shape)),
    ("P5", "preprocess_targetlist", "ctid junk column to find the row", Done("the row's tid from the index scan's slot")),
    ("P6", "get_row_security_policies", "row-level security quals and WITH CHECK options", Declined(Decline::RowSecurity)),
    ("P7", "scan nodes", "rows found under the statement's snapshot, SIREAD locks taken", Done("index_beginscan/index_getnext_slot under the snapshot a new statement gets; predicate locks taken by the btree and heap fetch code")),
    ("P7", "build_index_paths", "only valid indexes (indisvalid) are read to find rows", Declined(Decline::ScanIndex)),
    ("P9", "PortalRunMulti / _SPI_execute_plan", "a snapshot per statement, CommandCounterIncrement between statements", Done("CommandCounterIncrement before and after, PushActiveSnapshot(GetTransactionSnapshot()) with UpdateActiveSnapshotCommandId")),
    // Statement start and result relation set-up.
    ("a1", "ExecutorStart", "ExecutorStart_hook (pg_stat_statements, auto_explain, pgaudit)", Declined(Decline::ExecutorHooks)),
    ("a2", "ExecCheckXactReadOnly", "refuse writes in a read-only transaction", Done("PreventCommandIfReadOnly before any write")),
    ("a2", "ExecCheckXactReadOnly", "refuse writes in parallel mode", Declined(Decline::ParallelMode)),
    ("a4", "standard_ExecutorStart", "es_output_cid = GetCurrentCommandId(true)", Done("GetCurrentCommandId(true) for every write and lock")),
    ("a5", "standard_ExecutorStart", "crosscheck snapshot (RI queries only)", NotMet("only foreign-key checks run with one; ours pass none, as a statement of ours does")),
    ("a6", "AfterTriggerBeginQuery", "open an AFTER trigger query level", Declined(Decline::Triggers)),
    ("a7", "ExecCheckRTPerms", "table and column privileges of the statement's role", Done("pg_class_aclmask for the write and SELECT, as the role our statements run as (the tables' owner); declined (Privileges) when short, so the statement raises the error")),
    ("a7", "ExecCheckRTEPerms", "a role short of a table privilege gets the permission error", Declined(Decline::Privileges)),
    ("a8", "ExecCheckRTPerms", "ExecutorCheckPerms_hook (sepgsql, pgaudit)", Declined(Decline::ExecutorHooks)),
    ("a8", "ExecCheckPermissions", "16: ExecutorCheckPerms_hook is given the RTEPermissionInfo list", Declined(Decline::ExecutorHooks)),
    ("a10", "InitPlan", "row marks for joins and FOR UPDATE", Done("a SKIP LOCKED claim locks each row with table_tuple_lock(LockTupleExclusive, LockWaitSkip) as FOR UPDATE SKIP LOCKED does")),
    ("a12", "InitResultRelInfo", "result relation with its trigger descriptor and constraints", Done("InitResultRelInfo")),
    ("a12", "InitResultRelInfo", "a table access method other than heap (heap_multi_insert is heap's)", Declined(Decline::NotHeap)),
    ("a14", "ExecSetupTransitionCaptureState", "transition tables of AFTER triggers", Declined(Decline::Triggers)),
    ("a16", "CheckValidResultRel", "a view, materialized view, foreign, partitioned or other relation", Declined(Decline::NotPlainTable)),
    ("a16", "CheckValidResultRel", "17: the MERGE actions checked against the relation", NotMet("no direct write is a MERGE")),
    ("a17", "CheckCmdReplicaIdentity", "an UPDATE or DELETE of a table published without a usable replica identity, or with a row filter or column list outside it, fails", Done("CheckCmdReplicaIdentity itself, before any row, for updates and deletes")),
    ("a17", "CheckCmdReplicaIdentity", "18: published generated columns outside the replica identity", Done("CheckCmdReplicaIdentity itself, whose 18 body checks them")),
    ("a21", "ExecInitStoredGenerated", "stored generated column expressions", Declined(Decline::StoredGenerated)),
    ("a22", "ExecConstraints", "18: virtual generated columns (their NOT NULL, CHECK expressions expanded over them)", Declined(Decline::VirtualGenerated)),
    ("a23", "ExecSetupPartitionTupleRouting", "tuple routing into partitions", Declined(Decline::NotPlainTable)),
    ("a24", "ExecInitModifyTable", "WITH CHECK OPTIONs (row security, views)", Declined(Decline::RowSecurity)),
    ("a25", "ExecInitModifyTable", "RETURNING projection", Done("the caller's read of the new or deleted version (Row)")),
    ("a25", "ExecInitModifyTable", "18: RETURNING OLD and NEW", NotMet("no statement of ours asks for OLD; the caller reads the version the write made, or the deleted one")),
    ("a26", "ExecInitModifyTable", "ON CONFLICT arbiters", NotMet("no direct write uses ON CONFLICT; idempotent enqueues look the key up before writing, as the statement path does")),
    ("a32", "ExecutorRun", "ExecutorRun_hook", Declined(Decline::ExecutorHooks)),
    ("a32", "ExecutorRun", "18: ExecutorRun_hook loses execute_once", Declined(Decline::ExecutorHooks)),
    ("a33", "ExecModifyTable", "CHECK_FOR_INTERRUPTS per call", Done("the scans and heap calls check for interrupts as the executor's do")),
    ("a34", "fireBSTriggers", "BEFORE STATEMENT triggers", Declined(Decline::Triggers)),
    // Per inserted row.
    ("b1", "ExecCheckPlanOutput", "the row's types match the table's columns", Declined(Decline::Shape)),
    ("b2", "ExecFindPartition", "partition routing", Declined(Decline::NotPlainTable)),
    ("b4", "ExecOpenIndices", "open every live index; ii_ReadyForInserts = indisready", Done("index_cache: the same IndexInfos (BuildIndexInfo), kept only if no invalidation came while they were built; ExecOpenIndices when not cached")),
    ("b5", "ExecBRInsertTriggers", "BEFORE ROW INSERT triggers", Declined(Decline::Triggers)),
    ("b8", "ExecInsert", "slot's table oid", Done("heap_multi_insert sets it")),
    ("b9", "ExecComputeStoredGenerated", "stored generated columns computed", Declined(Decline::StoredGenerated)),
    ("b10", "ExecWithCheckOptions", "row security WITH CHECK", Declined(Decline::RowSecurity)),
    ("b11", "ExecConstraints", "NOT NULL and CHECK constraints (NOT VALID ones too)", Done("ExecConstraints on every row")),
    ("b11", "ExecConstraints", "18: NOT ENFORCED CHECK constraints are skipped", Done("ExecConstraints itself, on every row")),
    ("b12", "ExecPartitionCheck", "partition constraint of a partition written directly", Declined(Decline::Partition)),
    ("b13", "ExecInsert", "speculative insertion (ON CONFLICT)", NotMet("no direct write uses ON CONFLICT")),
    ("b14", "heap_insert", "xid, TOAST, SSI conflict check, WAL with what logical decoding needs, statistics counters", Done(HEAP)),
    ("b15", "ExecInsertIndexTuples", "index entries of ready indexes: partial predicates, expressions, unique and exclusion checks", Done("ExecInsertIndexTuples; indexes whose predicates the row's constant columns refute are left out, as their predicates would leave them; where a unique or exclusion index other than the primary key could refuse a row, rows go to the heap one at a time, each followed by its index entries, so a refused batch leaves what the INSERT's would")),
    ("b15", "ExecInsertIndexTuples", "18: WITHOUT OVERLAPS unique constraints, checked as exclusion constraints", Done("ExecInsertIndexTuples; such an index other than the primary key sends rows one at a time, as any unique or exclusion index does; a primary key that is not a btree is declined (ScanIndex)")),
    ("b15", "ExecInsertIndexTuples", "deferred unique and exclusion rechecks (returned recheck list)", Declined(Decline::Triggers)),
    ("b16", "ExecInsert", "es_processed for the command tag", NotMet("our functions return their own rows, not a command tag")),
    ("b18", "ExecARInsertTriggers", "AFTER ROW INSERT triggers: foreign keys, deferred unique checks, user triggers", Declined(Decline::Triggers)),
    ("b19", "ExecWithCheckOptions", "view WITH CHECK OPTION", Declined(Decline::NotPlainTable)),
    // Per updated row.
    ("c2", "ExecModifyTable", "fetch the old version", Done("the locked version in the scan's slot")),
    ("c3", "ExecGetUpdateNewTuple", "new version: set columns from the statement, the rest from the old version", Done("update::Writer copies the old values and applies the caller's Changes")),
    ("c6", "ExecBRUpdateTriggers", "BEFORE ROW UPDATE triggers", Declined(Decline::Triggers)),
    ("c9", "ExecUpdatePrepareSlot", "stored generated columns recomputed", Declined(Decline::StoredGenerated)),
    ("c10", "ExecPartitionCheck", "partition constraint", Declined(Decline::Partition)),
    ("c11", "ExecWithCheckOptions", "row security UPDATE check", Declined(Decline::RowSecurity)),
    ("c12", "ExecCrossPartitionUpdate", "row movement between partitions", Declined(Decline::NotPlainTable)),
    ("c13", "ExecConstraints", "NOT NULL and CHECK constraints", Done("ExecConstraints on every new version")),
    ("c14", "heap_update", "lock mode, waits, TOAST, SSI, HOT, replica identity for logical decoding, WAL, statistics", Done(HEAP)),
    ("c14", "heap_update", "16: TU_UpdateIndexes: TU_Summarizing when only columns of summarizing (BRIN) indexes changed, HOT kept", Done("pg_compat::tuple_update; ExecInsertIndexTuples(onlySummarizing) then, as ExecUpdateEpilogue does")),
    ("c15", "ExecUpdate", "a row changed since the snapshot: READ COMMITTED re-checks the newest version (EvalPlanQual); REPEATABLE READ and SERIALIZABLE raise 40001", Done("a claim passes over a row locked or changed since the snapshot (SKIP LOCKED, whose statement locks before it updates); under REPEATABLE READ and SERIALIZABLE it raises 40001 (update::lock_at_once)")),
    ("c17", "ExecUpdateEpilogue", "new index entries unless HOT, with the keys-unchanged hint", Done("ExecInsertIndexTuples(update = true) when heap_update asks for them, with ii_IndexUnchanged set per index as index_unchanged_by_update would")),
    ("c18", "ExecARUpdateTriggers", "AFTER ROW UPDATE triggers", Declined(Decline::Triggers)),
    ("c20", "ExecProcessReturning", "RETURNING", Done("the caller reads the new version")),
    // Per deleted row.
    ("d1", "ExecBRDeleteTriggers", "BEFORE ROW DELETE triggers", Declined(Decline::Triggers)),
    ("d4", "heap_delete", "waits, SSI, replica identity for logical decoding, WAL, TOAST, statistics", Done(HEAP)),
    ("d5", "ExecDelete", "a row changed since the snapshot: READ COMMITTED locks the newest version and judges it again (EvalPlanQual); REPEATABLE READ and SERIALIZABLE raise 40001", Done("delete::delete_newest: table_tuple_lock(FIND_LAST_VERSION) and the caller's holds again; 40001 under REPEATABLE READ and SERIALIZABLE")),
    ("d6", "ExecDelete", "no index maintenance", Done("none: VACUUM removes the entries, and the primary key scan leaves dead entries unmarked as the statement's bitmap scan does")),
    ("d8", "ExecARDeleteTriggers", "AFTER ROW DELETE triggers (foreign key actions)", Declined(Decline::Triggers)),
    ("d9", "ExecDelete", "RETURNING of the deleted version", Done("the caller reads the deleted version")),
    // Statement end.
    ("e2", "fireASTriggers", "AFTER STATEMENT triggers", Declined(Decline::Triggers)),
    ("e3", "ExecutorFinish", "ExecutorFinish_hook; AfterTriggerEndQuery fires AFTER triggers", Declined(Decline::ExecutorHooks)),
    ("e4", "ExecutorEnd", "ExecutorEnd_hook; close indexes (releasing their locks) and relations", Done("indexes closed keeping their locks until the end of the transaction, as the table's (a stronger hold than the executor's, never a weaker one); ExecutorEnd_hook declined with the other hooks")),
];

#[cfg(any(test, feature = "pg_test"))]
pub(crate) const ALL_DECLINES: &[Decline] = &[
    Decline::SwitchedOff,
    Decline::ExecutorHooks,
    Decline::ParallelMode,
    Decline::NotPlainTable,
    Decline::NotHeap,
    Decline::Partition,
    Decline::Triggers,
    Decline::RowSecurity,
    Decline::StoredGenerated,
    Decline::VirtualGenerated,
    Decline::Privileges,
    Decline::Shape,
    Decline::ScanIndex,
    Decline::LeftOutColumn,
    Decline::Schema,
];
