//! Recovery times, from the ledger's commit times alone (server clock).
//!
//! The rate before a fault is the completions per second over the
//! [`PRE_WINDOW`] before it. The workers are back when, from the reference
//! moment on (the fault, or the database accepting connections again), a
//! [`WINDOW`] first holds at least [`BACK_AT`] of that rate; the recovery
//! time is how long after the reference that window starts. That time is
//! reported, not asserted: what the tests check is that the workers work
//! again, a completion within [`WORKING_BOUND`] of the reference.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Once;
use std::thread;
use std::time::Duration;

use postgres::Client;

pub const PRE_WINDOW: f64 = 2.0;
pub const WINDOW: f64 = 0.5;
pub const BACK_AT: f64 = 0.8;
/// Seconds from the reference within which the workers must complete
/// something: generous, only workers the fault broke miss it (the machine
/// the tests share can halve the rate by itself, so no rate is asserted).
pub const WORKING_BOUND: f64 = 60.0;

/// The server's clock now, in seconds since the epoch.
pub fn server_epoch(c: &mut Client) -> f64 {
    c.query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .unwrap()
        .get(0)
}

/// What one fault did to the workers' rate.
#[derive(Debug, Clone)]
pub struct Recovery {
    /// Completions per second before the fault.
    pub pre_rate: f64,
    /// Seconds from the reference to the first window back at the rate;
    /// `None`: not within the bound.
    pub back_after: Option<f64>,
    /// Seconds from the reference to the first completion at or after it;
    /// `None`: none within [`WORKING_BOUND`].
    pub first_after: Option<f64>,
    /// The longest time without any completion around the fault.
    pub longest_gap: f64,
    /// Completions per second in 0.5 s steps from 1 s before the fault to
    /// the end of the measurement (at most 40 steps).
    pub timeline: Vec<f64>,
}

impl Recovery {
    /// The timeline as text: `620 610 | 0 0 140 590` (the bar: the fault).
    pub fn describe_timeline(&self) -> String {
        let rates: Vec<String> = self.timeline.iter().map(|r| format!("{r:.0}")).collect();
        let (before, after) = rates.split_at(rates.len().min(2));
        format!("{} | {}", before.join(" "), after.join(" "))
    }

    pub fn describe(&self) -> String {
        format!(
            "{:.0}/s before, back (>= {:.0}%) after {}, first completion after {}, \
             longest gap {:.2} s",
            self.pre_rate,
            BACK_AT * 100.0,
            seconds_or_never(self.back_after),
            seconds_or_never(self.first_after),
            self.longest_gap
        )
    }
}

fn seconds_or_never(s: Option<f64>) -> String {
    s.map_or("not within the bound".to_string(), |s| format!("{s:.2} s"))
}

/// Commit times of the ledger's rows from `since` on, sorted.
fn completion_times(su: &mut Client, ledger: &str, since: f64) -> Vec<f64> {
    su.query(
        &format!(
            "SELECT extract(epoch FROM done_at)::float8 FROM {ledger} \
             WHERE done_at >= to_timestamp($1) ORDER BY 1"
        ),
        &[&since],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn rate_in(times: &[f64], from: f64, to: f64) -> f64 {
    let lo = times.partition_point(|t| *t < from);
    let hi = times.partition_point(|t| *t < to);
    (hi - lo) as f64 / (to - from)
}

/// The first window start at or after `reference` (in 50 ms steps, up to
/// `until - WINDOW`) whose rate is back at `share` of `pre_rate`.
fn first_back(times: &[f64], pre_rate: f64, share: f64, reference: f64, until: f64) -> Option<f64> {
    let mut t = reference;
    while t + WINDOW <= until {
        if rate_in(times, t, t + WINDOW) >= share * pre_rate {
            return Some(t - reference);
        }
        t += 0.05;
    }
    None
}

/// Seconds from `reference` to the first of `times` at or after it.
fn first_completion(times: &[f64], reference: f64) -> Option<f64> {
    let i = times.partition_point(|t| *t < reference);
    times.get(i).map(|t| t - reference)
}

fn longest_gap(times: &[f64], from: f64, to: f64) -> f64 {
    let mut last = from;
    let mut gap: f64 = 0.0;
    for t in times.iter().copied().filter(|t| *t >= from && *t <= to) {
        gap = gap.max(t - last);
        last = t;
    }
    gap.max(to - last)
}

/// Polls the ledger until the rate is back (and one window past it) or
/// `bound` seconds after `reference`, and beyond that, up to
/// [`WORKING_BOUND`], until the first completion after `reference`.
/// `fault_at` and `reference` are server clock readings ([`server_epoch`]).
pub fn measure(
    su: &mut Client,
    ledger: &str,
    fault_at: f64,
    reference: f64,
    bound: f64,
) -> Recovery {
    loop {
        let times = completion_times(su, ledger, fault_at - PRE_WINDOW);
        let now = server_epoch(su);
        let pre_rate = rate_in(&times, fault_at - PRE_WINDOW, fault_at);
        let back = first_back(&times, pre_rate, BACK_AT, reference, now);
        let first_after = first_completion(&times, reference);
        let measured = back.is_some() || now >= reference + bound;
        if (measured && first_after.is_some()) || now >= reference + WORKING_BOUND {
            let end = back.map_or(now, |b| reference + b + WINDOW);
            // From the last completion before the fault.
            let before = times
                .iter()
                .copied()
                .rfind(|t| *t < fault_at)
                .unwrap_or(fault_at);
            let timeline = (0..40)
                .map(|i| fault_at - 1.0 + 0.5 * i as f64)
                .take_while(|t| *t + 0.5 <= end.max(fault_at + 0.5))
                .map(|t| rate_in(&times, t, t + 0.5))
                .collect();
            return Recovery {
                pre_rate,
                back_after: back,
                first_after,
                longest_gap: longest_gap(&times, before, end),
                timeline,
            };
        }
        thread::sleep(Duration::from_millis(250));
    }
}

/// Where the report goes: `$AEDB_CHAOS_REPORT`, else `chaos/recovery.md`
/// in the cargo target directory the test binary was built into.
pub fn report_path() -> PathBuf {
    if let Ok(p) = std::env::var("AEDB_CHAOS_REPORT") {
        if !p.trim().is_empty() {
            return PathBuf::from(p);
        }
    }
    let exe = std::env::current_exe().expect("current_exe");
    // <target>/<profile>/deps/<test binary>
    let target = exe.ancestors().nth(3).expect("target dir").to_path_buf();
    target.join("chaos").join("recovery.md")
}

/// The test binary's name (`chaos`, `chaos_timeouts`, ...): its section of
/// the report.
fn section_name() -> String {
    let exe = std::env::current_exe().expect("current_exe");
    let stem = exe.file_stem().unwrap().to_string_lossy().to_string();
    match stem.rsplit_once('-') {
        Some((name, _hash)) => name.to_string(),
        None => stem,
    }
}

const HEADER: &str = "# Chaos: recovery after each fault\n\n\
    Written by `cargo test -p aedb_queue_itests --test 'chaos*'` (docs/chaos.md), one \
    section per test binary, replaced by its next run. Back: the first 0.5 s window \
    at >= 80% of the completion rate of the 2 s before the fault.\n";

/// The report without `section` (the other binaries' sections stay).
fn without_section(text: &str, section: &str) -> String {
    let heading = format!("## {section}");
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if line.starts_with("## ") {
            skipping = line == heading;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Appends one row to this binary's section of the report (the section is
/// started afresh by the first row of a test process) and prints it.
pub fn report(scenario: &str, fault: &str, reference: &str, figure: &str) {
    report_in(&section_name(), scenario, fault, reference, figure);
}

/// As [`report`], in the section `section`: for a test binary whose name
/// another package's binary has too (one section per test process).
pub fn report_in(section: &str, scenario: &str, fault: &str, reference: &str, figure: &str) {
    static SECTION: Once = Once::new();
    let path = report_path();
    SECTION.call_once(|| {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).expect("create the report's directory");
        }
        let old = fs::read_to_string(&path).unwrap_or_else(|_| HEADER.to_string());
        let mut text = without_section(&old, section).trim_end().to_string();
        text.push('\n');
        text.push_str(&format!(
            "\n## {section}\n\n| scenario | fault | measured from | recovery |\n| --- | --- | --- | --- |\n"
        ));
        fs::write(&path, text).expect("write the report");
    });
    let row = format!("| {scenario} | {fault} | {reference} | {figure} |\n");
    eprint!("chaos report: {row}");
    OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(row.as_bytes()))
        .expect("append to the report");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_is_the_first_window_back_at_the_rate() {
        // 100/s until 10.0, nothing until 11.0, then 100/s again.
        let mut times: Vec<f64> = (0..1000).map(|i| i as f64 * 0.01).collect();
        times.extend((0..300).map(|i| 11.0 + i as f64 * 0.01));
        let pre = rate_in(&times, 8.0, 10.0);
        assert!((pre - 100.0).abs() < 1.0);
        let back = first_back(&times, pre, BACK_AT, 10.0, 14.0).unwrap();
        // The first window holding 80% starts at 10.9 (0.4 s of it at 100/s).
        assert!((back - 0.9).abs() < 0.06, "{back}");
        assert!((longest_gap(&times, 9.99, 12.0) - 1.01).abs() < 0.001);
        assert_eq!(first_back(&times[..1000], pre, BACK_AT, 10.0, 14.0), None);
        // Working again: the first completion after the gap.
        assert!((first_completion(&times, 10.0).unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(first_completion(&times[..1000], 10.0), None);
    }

    #[test]
    fn a_binary_s_section_is_replaced_and_the_others_kept() {
        let text = "# H\n\n## chaos\n\n| a |\n\n## chaos_disk\n\n| b |\n";
        assert_eq!(
            without_section(text, "chaos"),
            "# H\n\n## chaos_disk\n\n| b |\n"
        );
        assert_eq!(
            without_section(text, "chaos_disk"),
            "# H\n\n## chaos\n\n| a |\n\n"
        );
    }
}
