//! The summary at the top of the report: one row per scenario, the best
//! peer's value beside aedb_queue's and how far apart they are.
//!
//! Pure: it reads the collected `Results` and nothing else, so its choices
//! (which rows are peers, which direction is better, what a zero means) are
//! unit-tested below.

use std::fmt::Write as _;

use crate::report::{Results, Unit};

/// Rows that are not peers: ours, the hand-written baselines and the floor.
const NOT_PEERS: [&str; 5] = [
    "aedb_queue",
    "aedb-loop",
    "baseline",
    "baseline-loop",
    "insert + delete (pgbench)",
];

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Better {
    Higher,
    Lower,
}

/// One line of the summary: a cell of the detailed tables (`table`,
/// `column`), read for `ours` (aedb_queue, or its one-commit loop) and for
/// every peer.
pub struct Line {
    pub scenario: String,
    pub table: String,
    pub column: String,
    pub ours: &'static str,
    pub better: Better,
    pub unit: Unit,
}

impl Line {
    pub fn new(scenario: &str, table: &str, column: &str, better: Better, unit: Unit) -> Line {
        Line {
            scenario: scenario.into(),
            table: table.into(),
            column: column.into(),
            ours: "aedb_queue",
            better,
            unit,
        }
    }

    pub fn for_row(mut self, ours: &'static str) -> Line {
        self.ours = ours;
        self
    }
}

/// The best peer of `systems` in `line`'s cell, with its median.
pub fn best_peer<'a>(r: &Results, systems: &[&'a str], line: &Line) -> Option<(&'a str, f64)> {
    systems
        .iter()
        .filter(|s| !NOT_PEERS.contains(s))
        .filter_map(|s| Some((*s, r.median(&line.table, s, &line.column)?)))
        .reduce(|best, next| {
            let next_wins = match line.better {
                Better::Higher => next.1 > best.1,
                Better::Lower => next.1 < best.1,
            };
            if next_wins {
                next
            } else {
                best
            }
        })
}

/// How many times better ours is than the peer's value (above 1: ahead).
/// None when either is zero or missing: a ratio of counts such as "0 lost"
/// against "0 lost" says nothing, the values say it.
pub fn advantage(ours: f64, peer: f64, better: Better) -> Option<f64> {
    if ours <= 0.0 || peer <= 0.0 {
        return None;
    }
    Some(match better {
        Better::Higher => ours / peer,
        Better::Lower => peer / ours,
    })
}

fn verdict(ours: Option<f64>, peer: Option<f64>, better: Better) -> String {
    match (ours, peer) {
        (Some(o), Some(p)) => match advantage(o, p, better) {
            Some(a) if a >= 1.0 => format!("**{a:.2}×** ahead"),
            Some(a) => format!("**{a:.2}×** (behind)"),
            None if o == p => "even".into(),
            None => {
                let ours_better = match better {
                    Better::Higher => o > p,
                    Better::Lower => o < p,
                };
                if ours_better { "ahead" } else { "behind" }.into()
            }
        },
        _ => "–".into(),
    }
}

/// The summary table: a row per line with a value for ours or a peer.
pub fn table(r: &Results, systems: &[&str], lines: &[Line]) -> String {
    let mut out = String::from(
        "| scenario | best peer | its value | aedb_queue | aedb_queue against it |\n|---|---|---|---|---|\n",
    );
    for line in lines {
        let ours = systems
            .contains(&line.ours)
            .then(|| r.median(&line.table, line.ours, &line.column))
            .flatten();
        let peer = best_peer(r, systems, line);
        if ours.is_none() && peer.is_none() {
            continue;
        }
        let fmt = |v: Option<f64>| v.map_or("–".to_string(), |v| line.unit.format(v));
        let ours_cell = match (line.ours, ours) {
            ("aedb_queue", v) => fmt(v),
            (row, v) => format!("{} ({row})", fmt(v)),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            line.scenario,
            peer.map_or("–", |(name, _)| name),
            fmt(peer.map(|(_, v)| v)),
            ours_cell,
            verdict(ours, peer.map(|(_, v)| v), line.better),
        );
    }
    out
}

const RUNS_HEADER: &str = "# Full benchmark runs, newest first\n\nEvery full `bash bench/run.sh` adds its summary here when it writes `latest.md`, which holds the newest run's detail. Runs on these 2 shared cores move by tens of percent from one to the next: compare ratios within a run, not values across runs.\n";

/// `runs.md` with `entry` (one run's heading and summary) put first, after
/// the file's header; earlier entries are kept as they were.
pub fn with_run(existing: Option<&str>, entry: &str) -> String {
    // Earlier entries start at the first heading of a run; whatever stands
    // before it (the header, a note that no run was kept yet) is rewritten.
    let earlier = existing
        .and_then(|s| s.find("\n## ").map(|at| &s[at + 1..]))
        .unwrap_or("");
    let mut out = format!("{RUNS_HEADER}\n{}\n", entry.trim_end());
    if !earlier.is_empty() {
        out.push('\n');
        out.push_str(earlier);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results() -> Results {
        let mut r = Results::default();
        for (row, v) in [
            ("aedb_queue", 900.0),
            ("aedb-loop", 1500.0),
            ("baseline", 2000.0),
            ("pg-boss", 400.0),
            ("pgmq", 600.0),
        ] {
            r.add("drain", row, "8", v);
        }
        for (row, v) in [("aedb_queue", 3.0), ("pg-boss", 12.0), ("pgmq", 6.0)] {
            r.add("burst", row, "drain s", v);
        }
        for (row, v) in [("aedb_queue", 0.0), ("pg-boss", 2.0), ("pgmq", 0.0)] {
            r.add("faults", row, "twice", v);
        }
        r
    }

    const ALL: [&str; 5] = ["aedb_queue", "aedb-loop", "baseline", "pg-boss", "pgmq"];

    #[test]
    fn the_best_peer_is_never_ours_nor_a_baseline() {
        let line = Line::new("drain", "drain", "8", Better::Higher, Unit::PerSecond);
        assert_eq!(best_peer(&results(), &ALL, &line), Some(("pgmq", 600.0)));
    }

    #[test]
    fn lower_is_better_picks_the_smallest_and_inverts_the_ratio() {
        let line = Line::new("burst", "burst", "drain s", Better::Lower, Unit::Count);
        assert_eq!(best_peer(&results(), &ALL, &line), Some(("pgmq", 6.0)));
        assert_eq!(advantage(3.0, 6.0, Better::Lower), Some(2.0));
        assert_eq!(advantage(3.0, 6.0, Better::Higher), Some(0.5));
    }

    #[test]
    fn zeros_give_no_ratio_but_a_word() {
        assert_eq!(advantage(0.0, 2.0, Better::Lower), None);
        assert_eq!(verdict(Some(0.0), Some(0.0), Better::Lower), "even");
        assert_eq!(verdict(Some(0.0), Some(2.0), Better::Lower), "ahead");
        assert_eq!(verdict(Some(2.0), Some(0.0), Better::Lower), "behind");
    }

    #[test]
    fn the_table_has_a_row_per_measured_line_and_names_the_loop() {
        let lines = [
            Line::new("drain", "drain", "8", Better::Higher, Unit::PerSecond),
            Line::new("drain, loop", "drain", "8", Better::Higher, Unit::PerSecond)
                .for_row("aedb-loop"),
            Line::new("burst", "burst", "drain s", Better::Lower, Unit::Count),
            Line::new("faults", "faults", "twice", Better::Lower, Unit::Count),
            Line::new("never measured", "nothing", "x", Better::Higher, Unit::Count),
        ];
        let t = table(&results(), &ALL, &lines);
        let rows: Vec<&str> = t.lines().skip(2).collect();
        assert_eq!(rows.len(), 4, "{t}");
        assert_eq!(rows[0], "| drain | pgmq | 600 | 900 | **1.50×** ahead |");
        assert_eq!(rows[1], "| drain, loop | pgmq | 600 | 1,500 (aedb-loop) | **2.50×** ahead |");
        assert_eq!(rows[2], "| burst | pgmq | 6 | 3 | **2.00×** ahead |");
        assert_eq!(rows[3], "| faults | pgmq | 0 | 0 | even |");
    }

    #[test]
    fn runs_are_kept_newest_first_under_one_header() {
        let first = with_run(None, "## run 1\n\n| a |\n");
        assert!(first.starts_with(RUNS_HEADER));
        let second = with_run(Some(&first), "## run 2\n\n| b |\n");
        assert_eq!(second.matches("# Full benchmark runs").count(), 1, "{second}");
        let (r2, r1) = (second.find("## run 2").unwrap(), second.find("## run 1").unwrap());
        assert!(r2 < r1, "{second}");
        assert!(second.ends_with("| a |\n"), "{second:?}");
        let placeholder = format!("{RUNS_HEADER}\nNo full run kept yet.\n");
        let kept = with_run(Some(&placeholder), "## run 3\n");
        assert!(!kept.contains("No full run"), "{kept}");
    }

    #[test]
    fn a_system_left_out_of_the_run_is_not_read() {
        let line = Line::new("drain", "drain", "8", Better::Higher, Unit::PerSecond);
        let t = table(&results(), &["aedb_queue", "pg-boss"], &[line]);
        assert!(t.contains("| pg-boss | 400 | 900 | **2.25×** ahead |"), "{t}");
    }
}
