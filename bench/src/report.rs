//! Collected measurements, their medians, the markdown report and the chart.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

/// Every repetition's value of one cell: table → row → column → values.
#[derive(Default)]
pub struct Results {
    cells: BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<f64>>>>,
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
                        if base > 0.0 && *row != ratio_to.unwrap() {
                            let _ = write!(cell, " (**{:.2}×**)", m / base);
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

#[derive(Clone, Copy)]
pub enum Unit {
    PerSecond,
    Micros,
    Bytes,
    Count,
}

impl Unit {
    pub fn format(self, v: f64) -> String {
        match self {
            Unit::PerSecond | Unit::Count => thousands(v.round() as i64),
            Unit::Micros if v >= 10_000.0 => format!("{:.1} ms", v / 1000.0),
            Unit::Micros => format!("{:.2} ms", v / 1000.0),
            Unit::Bytes => format!("{:.1} MB", v / 1_048_576.0),
        }
    }
}

fn thousands(n: i64) -> String {
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
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

/// Jobs/s against worker count, one line per system, per-job and batched panels.
pub fn chart(
    results: &Results,
    path: &Path,
    systems: &[&str],
    workers: &[usize],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 2));
    let specs = [
        ("drain_per_job", "Drain, one job per claim (jobs/s)"),
        ("drain_batched_100", "Drain, claim batches of 100 (jobs/s)"),
    ];
    for (area, (table, title)) in panels.iter().zip(specs) {
        let max = systems
            .iter()
            .flat_map(|s| {
                workers
                    .iter()
                    .filter_map(move |w| results.median(table, s, &w.to_string()))
            })
            .fold(0.0f64, f64::max)
            .max(1.0);
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(
                0usize..(workers.iter().max().copied().unwrap_or(1) + 1),
                0.0..max * 1.1,
            )?;
        chart
            .configure_mesh()
            .x_desc("workers")
            .y_desc("jobs/s")
            .draw()?;
        for (i, system) in systems.iter().enumerate() {
            let points: Vec<(usize, f64)> = workers
                .iter()
                .filter_map(|w| {
                    results
                        .median(table, system, &w.to_string())
                        .map(|v| (*w, v))
                })
                .collect();
            if points.is_empty() {
                continue;
            }
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(*system)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn thousands_separators() {
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }
}
