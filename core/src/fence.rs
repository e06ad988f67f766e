//! The fence of a batch settle: which (task id, fencing token) pairs the
//! caller named, for the statement that deletes the tasks still in flight
//! under one of them.

/// The least fencing token a claim on WAL timeline `timeline` hands out:
/// `(timeline - 1) * 2^32`, so 0 on a cluster never promoted. A standby
/// promoted after asynchronous replication lost the primary's last
/// claims starts a new timeline; without a floor its claims would count
/// on from the tokens it replicated and hand the lost claims' tokens out
/// again, and a worker still holding one would settle another worker's
/// lease. A claim takes `max(token + 1, floor)`: each timeline's tokens lie
/// above every earlier timeline's (for fewer than 2^32 claims of one task
/// on one timeline; past timeline 2^31 the floor stays at `i64::MAX`).
pub fn token_floor(timeline: u32) -> i64 {
    (i64::from(timeline.max(1)) - 1).saturating_mul(1 << 32)
}

/// The pairs, sorted, so a task is checked with a binary search: one probe
/// per task the statement finds, instead of SQL hashing every pair.
#[derive(Debug, Clone, Default)]
pub struct FencePairs(Vec<(i64, i64)>);

impl FencePairs {
    /// The pairs `task_ids[i]`, `fencing_tokens[i]`; the longer slice's
    /// extra elements are ignored (callers check the lengths first).
    pub fn new(task_ids: &[i64], fencing_tokens: &[i64]) -> Self {
        let mut pairs: Vec<(i64, i64)> = task_ids
            .iter()
            .copied()
            .zip(fencing_tokens.iter().copied())
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        FencePairs(pairs)
    }

    /// Whether the caller named this task under this token.
    pub fn contains(&self, task_id: i64, fencing_token: i64) -> bool {
        self.0.binary_search(&(task_id, fencing_token)).is_ok()
    }
}

/// Which entries of a batch settle report their settlement applied, given
/// the pairs the statement settled: each settlement once, on the first entry
/// naming it; a repeat of it, or the same task under another token, is
/// fenced out. Sorted pairs and a binary search per entry, no hashing.
pub fn report_once(
    task_ids: &[i64],
    fencing_tokens: &[i64],
    mut settled: Vec<(i64, i64)>,
) -> Vec<bool> {
    settled.sort_unstable();
    settled.dedup();
    let mut reported = vec![false; settled.len()];
    task_ids
        .iter()
        .zip(fencing_tokens)
        .map(|(&id, &token)| match settled.binary_search(&(id, token)) {
            Ok(i) if !reported[i] => {
                reported[i] = true;
                true
            }
            _ => false,
        })
        .collect()
}

/// The pairs named in a batch settle that the statement did not settle, in
/// the order named (a repeated pair as often as named): the tasks that may
/// be parents, which the plain delete leaves. Sorts `settled` in place and
/// searches it per entry (hashing the pairs cost about 1,000 instructions a
/// pair); `report_once` then finds it sorted.
pub fn unsettled(
    task_ids: &[i64],
    fencing_tokens: &[i64],
    settled: &mut [(i64, i64)],
) -> Vec<(i64, i64)> {
    settled.sort_unstable();
    task_ids
        .iter()
        .copied()
        .zip(fencing_tokens.iter().copied())
        .filter(|pair| settled.binary_search(pair).is_err())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_timeline_s_tokens_lie_above_the_earlier_ones() {
        assert_eq!(
            token_floor(1),
            0,
            "a cluster never promoted keeps its tokens"
        );
        assert_eq!(token_floor(0), 0, "no timeline (in recovery) is no floor");
        assert_eq!(token_floor(2), 1 << 32);
        // A task claimed 5 times on timeline 1 (tokens 1..=5), its last two
        // claims lost with the old primary: the standby had token 3.
        let claim = |token: i64, timeline| (token + 1).max(token_floor(timeline));
        let on_new = claim(3, 2);
        assert!(on_new > 5, "a lost claim's token is not handed out again");
        assert_eq!(claim(on_new, 2), on_new + 1, "then one by one");
        assert!(claim(token_floor(3) - 1, 3) > claim(on_new, 2));
        assert_eq!(token_floor(1 << 31), ((1i64 << 31) - 1) << 32);
        assert_eq!(token_floor(u32::MAX), i64::MAX, "saturates, never wraps");
    }

    #[test]
    fn a_task_matches_only_under_the_token_it_was_named_with() {
        let pairs = FencePairs::new(&[7, 3, 9], &[2, 5, 1]);
        assert!(pairs.contains(7, 2));
        assert!(pairs.contains(3, 5));
        assert!(pairs.contains(9, 1));
        assert!(!pairs.contains(7, 5), "another pair's token");
        assert!(!pairs.contains(3, 2), "another pair's token");
        assert!(!pairs.contains(8, 2), "a task not named");
    }

    #[test]
    fn a_task_named_twice_matches_under_each_token() {
        let pairs = FencePairs::new(&[4, 4, 4], &[1, 2, 1]);
        assert!(pairs.contains(4, 1));
        assert!(pairs.contains(4, 2));
        assert!(!pairs.contains(4, 3));
    }

    #[test]
    fn extremes_and_no_pairs() {
        let pairs = FencePairs::new(&[i64::MIN, i64::MAX], &[i64::MAX, i64::MIN]);
        assert!(pairs.contains(i64::MIN, i64::MAX));
        assert!(pairs.contains(i64::MAX, i64::MIN));
        assert!(!pairs.contains(i64::MIN, i64::MIN));
        assert!(!FencePairs::default().contains(0, 0));
        assert!(!FencePairs::new(&[1, 2], &[1]).contains(2, 1));
    }

    #[test]
    fn matches_a_linear_search_of_the_pairs() {
        // Every (id, token) over a small grid, against pairs with repeats.
        let ids = [5, 1, 5, 3, 1, 0, -2];
        let tokens = [0, 2, 1, 3, 2, -1, 4];
        let pairs = FencePairs::new(&ids, &tokens);
        for id in -3..7 {
            for token in -2..6 {
                let named = ids
                    .iter()
                    .zip(&tokens)
                    .any(|(&i, &t)| (i, t) == (id, token));
                assert_eq!(pairs.contains(id, token), named, "({id}, {token})");
            }
        }
    }

    #[test]
    fn each_settlement_is_reported_once_on_its_first_entry() {
        // 4 settled under 1 and named twice; 4 under 2 was not settled; 9 not at all.
        let applied = report_once(
            &[4, 9, 4, 4, 6],
            &[1, 1, 2, 1, 3],
            vec![(6, 3), (4, 1), (4, 1)],
        );
        assert_eq!(applied, [true, false, false, false, true]);
        assert_eq!(report_once(&[1], &[1], Vec::new()), [false]);
        assert!(report_once(&[], &[], vec![(1, 1)]).is_empty());
    }

    #[test]
    fn report_once_matches_a_set_taken_from_in_order() {
        let ids = [5, 1, 5, 3, 1, 0, 5, 3];
        let tokens = [0, 2, 1, 3, 2, -1, 0, 4];
        let settled = vec![(5, 0), (1, 2), (3, 4), (7, 7)];
        let mut left: std::collections::HashSet<(i64, i64)> = settled.iter().copied().collect();
        let expected: Vec<bool> = ids
            .iter()
            .zip(&tokens)
            .map(|(&i, &t)| left.remove(&(i, t)))
            .collect();
        assert_eq!(report_once(&ids, &tokens, settled), expected);
    }

    #[test]
    fn unsettled_keeps_every_named_pair_the_statement_did_not_settle_in_order() {
        let ids = [5, 1, 5, 3, 1, 9];
        let tokens = [0, 2, 1, 3, 2, 9];
        // (7, 7) was never named: it cannot hide a named pair.
        let mut settled = [(7, 7), (5, 0), (3, 3)];
        assert_eq!(
            unsettled(&ids, &tokens, &mut settled),
            vec![(1, 2), (5, 1), (1, 2), (9, 9)]
        );
        assert_eq!(settled, [(3, 3), (5, 0), (7, 7)], "sorted in place");
        let mut all = [(9, 9), (5, 1), (1, 2), (3, 3), (5, 0)];
        assert!(unsettled(&ids, &tokens, &mut all).is_empty());
        assert_eq!(unsettled(&[4], &[4], &mut []), vec![(4, 4)]);
    }
}
