//! Collected measurements, their medians, the markdown report and the chart.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

/// Every repetition's value of one cell: table → row → column → values.
#[derive(Default)]
pub struct Results {
    cells: BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<f64>>>>,
    /// The repetition each value of `cells` was measured in (0 = not a
    /// repetition of the throughput measurements), parallel to its values.
    reps: BTreeMap<(String, String, String), Vec<usize>>,
    pub notes: Vec<String>,
}

pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Some(if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    })
}

impl Results {
    pub fn add(&mut self, table: &str, row: &str, col: &str, value: f64) {
        self.add_in_rep(table, row, col, 0, value);
    }

    /// `add`, remembering the repetition so `paired_ratio` can pair values.
    pub fn add_in_rep(&mut self, table: &str, row: &str, col: &str, rep: usize, value: f64) {
        self.reps
            .entry((table.into(), row.into(), col.into()))
            .or_default()
            .push(rep);
        self.cells
            .entry(table.into())
            .or_default()
            .entry(row.into())
            .or_default()
            .entry(col.into())
            .or_default()
            .push(value);
    }

    pub fn values(&self, table: &str, row: &str, col: &str) -> &[f64] {
        self.cells
            .get(table)
            .and_then(|t| t.get(row))
            .and_then(|r| r.get(col))
            .map_or(&[], Vec::as_slice)
    }

    pub fn median(&self, table: &str, row: &str, col: &str) -> Option<f64> {
        median(self.values(table, row, col))
    }

    /// The median over repetitions of row / base measured in the same
    /// repetition (the two measured one after the other); None unless at
    /// least two repetitions hold both.
    pub fn paired_ratio(&self, table: &str, row: &str, base: &str, col: &str) -> Option<f64> {
        self.paired_cells((table, row, col), (table, base, col))
    }

    /// `paired_ratio` of any two cells, (table, row, column) each.
    pub fn paired_cells(&self, cell: (&str, &str, &str), base: (&str, &str, &str)) -> Option<f64> {
        let of = |(t, r, c): (&str, &str, &str)| -> Vec<(usize, f64)> {
            let reps = self.reps.get(&(t.into(), r.into(), c.into()));
            reps.map_or(Vec::new(), |reps| {
                reps.iter()
                    .copied()
                    .zip(self.values(t, r, c).iter().copied())
                    .collect()
            })
        };
        let base_values = of(base);
        let ratios: Vec<f64> = of(cell)
            .into_iter()
            .filter(|(rep, _)| *rep > 0)
            .filter_map(|(rep, v)| {
                let (_, b) = base_values.iter().find(|(r, _)| *r == rep)?;
                (*b > 0.0).then(|| v / b)
            })
            .collect();
        if ratios.len() < 2 {
            return None;
        }
        median(&ratios)
    }

    /// A markdown table; with `ratio_to`, each cell also shows its ratio to that row.
    pub fn table(
        &self,
        table: &str,
        rows: &[&str],
        cols: &[&str],
        unit: Unit,
        ratio_to: Option<&str>,
    ) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "| system | {} |", cols.join(" | "));
        let _ = writeln!(out, "|---|{}", "---|".repeat(cols.len()));
        for row in rows {
            let cells: Vec<String> = cols
                .iter()
                .map(|col| {
                    let values = self.values(table, row, col);
                    let Some(m) = median(values) else {
                        return "–".into();
                    };
                    let mut cell = unit.format(m);
                    if let Some(base) = ratio_to.and_then(|b| self.median(table, b, col)) {
                        let base_row = ratio_to.unwrap();
                        if base > 0.0 && *row != base_row {
                            let _ = write!(cell, " (**{:.2}×**", m / base);
                            if let Some(p) = self.paired_ratio(table, row, base_row, col) {
                                let _ = write!(cell, ", paired {p:.2}×");
                            }
                            cell.push(')');
                        }
                    }
                    if values.len() > 1 {
                        let raw: Vec<String> = values.iter().map(|v| unit.format(*v)).collect();
                        let _ = write!(cell, " [{}]", raw.join(", "));
                    }
                    cell
                })
                .collect();
            if cells.iter().all(|c| c == "–") {
                continue;
            }
            let _ = writeln!(out, "| {row} | {} |", cells.join(" | "));
        }
        out
    }
}

impl Results {
    /// Commits per job and WAL bytes per job of a jobs/s table's cells
    /// (recorded as `{table}_commits` and `{table}_wal`): "1.00 · 1,234 B".
    pub fn cost_table(&self, table: &str, rows: &[&str], cols: &[&str]) -> String {
        let commits = format!("{table}_commits");
        let wal = format!("{table}_wal");
        let mut out = String::new();
        let _ = writeln!(out, "| system | {} |", cols.join(" | "));
        let _ = writeln!(out, "|---|{}", "---|".repeat(cols.len()));
        let mut any = false;
        for row in rows {
            let cells: Vec<String> = cols
                .iter()
                .map(
                    |col| match (self.median(&commits, row, col), self.median(&wal, row, col)) {
                        (Some(c), Some(w)) => {
                            format!("{} · {} B", commits_format(c), thousands(w.round() as i64))
                        }
                        _ => "–".into(),
                    },
                )
                .collect();
            if cells.iter().all(|c| c == "–") {
                continue;
            }
            any = true;
            let _ = writeln!(out, "| {row} | {} |", cells.join(" | "));
        }
        if any {
            out
        } else {
            String::new()
        }
    }
}

/// Commits per job: three decimals below 0.1 (batched claims), two above.
fn commits_format(c: f64) -> String {
    if c < 0.1 {
        format!("{c:.3}")
    } else {
        format!("{c:.2}")
    }
}

#[derive(Clone, Copy)]
pub enum Unit {
    PerSecond,
    Micros,
    Bytes,
    Count,
    Seconds,
}

impl Unit {
    pub fn format(self, v: f64) -> String {
        match self {
            Unit::PerSecond | Unit::Count => thousands(v.round() as i64),
            Unit::Micros if v >= 10_000.0 => format!("{:.1} ms", v / 1000.0),
            Unit::Micros => format!("{:.2} ms", v / 1000.0),
            Unit::Bytes => format!("{:.1} MB", v / 1_048_576.0),
            Unit::Seconds => format!("{v:.1} s"),
        }
    }
}

fn thousands(n: i64) -> String {
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// Colours for the chart's systems, dark enough to read on white (Palette99's
/// third colour is a pale yellow that vanished against the grid).
const COLOURS: [RGBColor; 15] = [
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(44, 160, 44),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(255, 127, 14),
    RGBColor(188, 189, 34),
    RGBColor(31, 119, 180),
    RGBColor(227, 119, 194),
    RGBColor(80, 80, 80),
    RGBColor(0, 128, 128),
    RGBColor(128, 0, 0),
    RGBColor(107, 142, 35),
    RGBColor(0, 0, 160),
    RGBColor(184, 134, 11),
];

/// The chart's font. plotters' TrueType path rasterises each glyph on a
/// canvas that starts at the glyph's origin, so whatever a glyph draws left of
/// it is cut: in proportional faces that is the hook of "j" ("jobs/s" read
/// ",obs/s"). A monospaced face keeps every glyph inside its cell; DejaVu Sans
/// Mono comes with fonts-dejavu-core, which bench/run.sh installs.
const FONT: &str = "DejaVu Sans Mono";

/// The chart: jobs/s against worker count for the per-job and the claim-100
/// drains (log scale, so that systems three orders of magnitude apart can
/// all be read; a system measured at one worker count is a marker), and the
/// commits and WAL bytes per job of both drains at `cost_workers` workers.
pub fn chart(
    results: &Results,
    path: &Path,
    systems: &[&str],
    workers: &[usize],
    cost_workers: usize,
    batched_cost_workers: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    // The legend's rows, under the panels, set the chart's height.
    let widths: Vec<i32> = systems.iter().map(|s| legend_width(s)).collect();
    let (places, note_y) = legend_places(&widths, 1400);
    let height = 1010 + note_y as u32 + LEGEND_LINE as u32;
    let root = BitMapBackend::new(path, (1400, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (body, legend) = root.split_vertically(1010);
    let rows = body.split_evenly((2, 2));
    let colour = |i: usize| COLOURS[i % COLOURS.len()];
    let specs = [
        (
            "drain_per_job",
            "Drain, one job per claim: jobs/s (log scale)",
        ),
        (
            "drain_batched_100",
            "Drain, claim batches of 100: jobs/s (log scale)",
        ),
    ];
    let max_workers = workers.iter().max().copied().unwrap_or(1);
    for (area, (table, title)) in rows.iter().zip(specs) {
        let values: Vec<f64> = systems
            .iter()
            .flat_map(|s| {
                workers
                    .iter()
                    .filter_map(move |w| results.median(table, s, &w.to_string()))
            })
            .filter(|v| *v > 0.0)
            .collect();
        let lo = values
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
            .min(1e3);
        let hi = values.iter().copied().fold(0.0f64, f64::max).max(10.0);
        let mut chart = ChartBuilder::on(area)
            .caption(title, (FONT, 20))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(78)
            .build_cartesian_2d(
                0usize..max_workers + 1,
                ((lo / 1.6).max(0.5)..hi * 1.6).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_desc("workers")
            .y_desc("jobs/s")
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .light_line_style(WHITE)
            .y_label_formatter(&|v| thousands(v.round() as i64))
            .draw()?;
        for (i, system) in systems.iter().enumerate() {
            let points: Vec<(usize, f64)> = workers
                .iter()
                .filter_map(|w| {
                    results
                        .median(table, system, &w.to_string())
                        .filter(|v| *v > 0.0)
                        .map(|v| (*w, v))
                })
                .collect();
            let c = colour(i);
            if points.len() > 1 {
                chart.draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))?;
            }
            chart.draw_series(points.iter().map(|p| Circle::new(*p, 5, c.filled())))?;
            // A lone point gets its name beside it: it has no line to follow.
            if points.len() == 1 {
                let (x, y) = points[0];
                chart.draw_series(std::iter::once(Text::new(
                    format!("  {system}"),
                    (x, y),
                    (FONT, 14).into_font().color(&c),
                )))?;
            }
        }
    }
    let cost_specs = [
        ("_commits", "Commits per job (drains, {w} workers)", false),
        ("_wal", "WAL bytes per job (drains, {w} workers)", true),
    ];
    let col = cost_workers.to_string();
    let bcol = batched_cost_workers.to_string();
    for (area, (suffix, title, bytes)) in rows[2..].iter().zip(cost_specs) {
        let w = if col == bcol {
            col.clone()
        } else {
            format!("{col}; claim 100 at {bcol}")
        };
        let title = title.replace("{w}", &w);
        let per_job = format!("{PER_JOB_TABLE}{suffix}");
        let batched = format!("{BATCHED_TABLE}{suffix}");
        let bars: Vec<(usize, &str, Option<f64>, Option<f64>)> = systems
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    i,
                    *s,
                    results.median(&per_job, s, &col),
                    results.median(&batched, s, &bcol),
                )
            })
            .filter(|(_, _, a, b)| a.is_some() || b.is_some())
            .collect();
        let hi = bars
            .iter()
            .flat_map(|(_, _, a, b)| [*a, *b])
            .flatten()
            .fold(0.0f64, f64::max)
            .max(if bytes { 100.0 } else { 1.0 });
        let n = bars.len().max(1);
        let mut chart = ChartBuilder::on(area)
            .caption(&title, (FONT, 20))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(130)
            .build_cartesian_2d(0.0..hi * 1.35, 0.0..n as f64)?;
        let names: Vec<String> = bars.iter().map(|b| b.1.to_string()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n * 2 + 1)
            .y_label_formatter(&|y| {
                let k = (*y - 0.5).round();
                if (*y - 0.5 - k).abs() < 1e-6 && k >= 0.0 && (k as usize) < names.len() {
                    names[names.len() - 1 - k as usize].clone()
                } else {
                    String::new()
                }
            })
            .x_desc(if bytes {
                "bytes per job"
            } else {
                "commits per job"
            })
            .x_label_formatter(&|v| {
                if bytes {
                    thousands(v.round() as i64)
                } else {
                    format!("{v:.1}")
                }
            })
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .light_line_style(WHITE)
            .draw()?;
        for (row, (i, _, per, batch)) in bars.iter().enumerate() {
            let y = (n - 1 - row) as f64;
            let c = colour(*i);
            for (value, y0, y1, filled) in [
                (per, y + 0.52, y + 0.9, true),
                (batch, y + 0.1, y + 0.48, false),
            ] {
                let Some(v) = value else { continue };
                let style = if filled {
                    c.filled()
                } else {
                    c.mix(0.35).filled()
                };
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y0), (*v, y1)],
                    style,
                )))?;
                let label = if bytes {
                    format!(" {}", thousands(v.round() as i64))
                } else {
                    format!(" {v:.3}")
                };
                chart.draw_series(std::iter::once(Text::new(
                    label,
                    (*v, y1 - 0.06),
                    (FONT, 12).into_font(),
                )))?;
            }
        }
    }
    // One legend for every panel, below them.
    for (i, (system, (x, y))) in systems.iter().zip(places).enumerate() {
        let c = colour(i);
        legend.draw(&Rectangle::new([(x, y + 2), (x + 22, y + 16)], c.filled()))?;
        legend.draw(&Text::new(
            system.to_string(),
            (x + 28, y),
            (FONT, 15).into_font(),
        ))?;
    }
    legend.draw(&Text::new(
        LEGEND_NOTE,
        (LEGEND_MARGIN, note_y),
        (FONT, 15).into_font(),
    ))?;
    root.present()?;
    Ok(())
}

const LEGEND_NOTE: &str = "cost bars: solid = one job per claim, pale = claim 100";
const LEGEND_MARGIN: i32 = 20;
const LEGEND_LINE: i32 = 30;

/// A legend entry's width: its swatch, and its name in the monospaced
/// font at 15 px (9 px a character), and the gap to the next.
fn legend_width(name: &str) -> i32 {
    44 + 9 * name.chars().count() as i32
}

/// Where each legend entry goes, in rows that wrap before `width`, and the
/// row of the note under them (on a line of its own: beside the systems it
/// ran past the chart's edge).
fn legend_places(widths: &[i32], width: i32) -> (Vec<(i32, i32)>, i32) {
    let (mut x, mut y) = (LEGEND_MARGIN, 0);
    let mut places = Vec::with_capacity(widths.len());
    for w in widths {
        if x > LEGEND_MARGIN && x + w > width - LEGEND_MARGIN {
            (x, y) = (LEGEND_MARGIN, y + LEGEND_LINE);
        }
        places.push((x, y));
        x += w;
    }
    (places, y + LEGEND_LINE)
}

pub const PER_JOB_TABLE: &str = "drain_per_job";
pub const BATCHED_TABLE: &str = "drain_batched_100";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legend_wraps_inside_the_chart_and_puts_the_note_below() {
        let names = [
            "aedb_queue",
            "aedb-loop",
            "baseline",
            "baseline-loop",
            "pgq",
            "pgmq",
            "pgmq-pop",
            "pg-boss",
            "graphile-worker",
            "awa",
            "oban",
            "river",
            "solid-queue",
        ];
        let widths: Vec<i32> = names.iter().map(|n| legend_width(n)).collect();
        let (places, note_y) = legend_places(&widths, 1400);
        assert_eq!(places[0], (LEGEND_MARGIN, 0));
        for ((x, y), w) in places.iter().zip(&widths) {
            assert!(
                x + w <= 1400 - LEGEND_MARGIN,
                "entry at {x} runs past the edge"
            );
            assert!(*y < note_y);
        }
        assert!(
            places.iter().any(|(_, y)| *y > 0),
            "thirteen systems need a second row"
        );
        let note = LEGEND_MARGIN + legend_width(LEGEND_NOTE);
        assert!(note <= 1400, "the note fits on its own line");
        let last_row = places.last().unwrap().1;
        assert_eq!(note_y, last_row + LEGEND_LINE);
        let (one, one_note) = legend_places(&widths[..3], 1400);
        assert!(one.iter().all(|(_, y)| *y == 0));
        assert_eq!(one_note, LEGEND_LINE);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn table_shows_ratio_and_raw_values() {
        let mut r = Results::default();
        for v in [100.0, 90.0, 110.0] {
            r.add("t", "baseline", "c", v);
        }
        for v in [200.0, 210.0, 190.0] {
            r.add("t", "aedb_queue", "c", v);
        }
        let md = r.table(
            "t",
            &["aedb_queue", "baseline"],
            &["c"],
            Unit::PerSecond,
            Some("baseline"),
        );
        assert!(
            md.contains("| aedb_queue | 200 (**2.00×**) [200, 210, 190] |"),
            "{md}"
        );
        assert!(md.contains("| baseline | 100 [100, 90, 110] |"), "{md}");
    }

    #[test]
    fn paired_ratio_pairs_values_of_the_same_repetition() {
        let mut r = Results::default();
        // The baseline missed repetition 2; aedb_queue's value there pairs with nothing.
        for (rep, v) in [(1, 100.0), (3, 50.0)] {
            r.add_in_rep("t", "baseline", "c", rep, v);
        }
        for (rep, v) in [(1, 90.0), (2, 1000.0), (3, 60.0)] {
            r.add_in_rep("t", "aedb_queue", "c", rep, v);
        }
        // Pairs 0.9 and 1.2: their median, not the ratio of the medians.
        let p = r.paired_ratio("t", "aedb_queue", "baseline", "c").unwrap();
        assert!((p - 1.05).abs() < 1e-9, "{p}");
        let md = r.table(
            "t",
            &["aedb_queue"],
            &["c"],
            Unit::PerSecond,
            Some("baseline"),
        );
        assert!(md.contains("(**1.20×**, paired 1.05×)"), "{md}");
        // One pair is no estimate.
        r.add_in_rep("t", "pgmq", "c", 1, 80.0);
        assert_eq!(r.paired_ratio("t", "pgmq", "baseline", "c"), None);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }
}
