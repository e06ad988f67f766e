//! Charts drawn on the server as inline SVG: pure functions of the sampled
//! series, so pages need no script and tests can read them.

use maud::{html, Markup};

/// One line of a chart: its name (legend and `data-series`), CSS colour and
/// values, oldest first. `None` is a gap (no sample, or counters missing).
pub struct Line<'a> {
    pub name: &'a str,
    pub colour: &'a str,
    pub values: &'a [Option<f64>],
}

/// The largest value of the lines (at least 1, so that an all-zero chart
/// still has a scale).
fn top(lines: &[Line]) -> f64 {
    lines
        .iter()
        .flat_map(|l| l.values.iter().flatten())
        .fold(1.0_f64, |m, &v| if v.is_finite() { m.max(v) } else { m })
}

/// `x,y` points of `values` scaled into `width` x `height` (y grows
/// downwards, 0 at the bottom), split into runs at gaps. A run of one value
/// is drawn as a flat segment so it is visible.
pub fn polyline_runs(values: &[Option<f64>], top: f64, width: f64, height: f64) -> Vec<String> {
    let n = values.len();
    let step = if n > 1 { width / (n - 1) as f64 } else { width };
    let y = |v: f64| height - (v.max(0.0) / top).min(1.0) * height;
    let mut runs = Vec::new();
    let mut run: Vec<(f64, f64)> = Vec::new();
    for (i, v) in values.iter().enumerate() {
        match v {
            Some(v) if v.is_finite() => run.push((i as f64 * step, y(*v))),
            _ => flush_run(&mut run, &mut runs, step),
        }
    }
    flush_run(&mut run, &mut runs, step);
    runs
}

fn flush_run(run: &mut Vec<(f64, f64)>, runs: &mut Vec<String>, step: f64) {
    if run.len() == 1 {
        let (x, y) = run[0];
        run.push((x + step.min(2.0), y));
    }
    if !run.is_empty() {
        let pts: Vec<String> = run.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        runs.push(pts.join(" "));
    }
    run.clear();
}

/// A short label for an axis value: 1234 -> "1.2k", 2500000 -> "2.5M".
pub fn axis_label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A small line without axes for a table cell. `series` names what it
/// shows (`data-series`); the title says the last value.
pub fn sparkline(series: &str, colour: &str, values: &[Option<f64>]) -> Markup {
    const W: f64 = 120.0;
    const H: f64 = 24.0;
    let line = Line {
        name: series,
        colour,
        values,
    };
    let top = top(std::slice::from_ref(&line));
    let last = values.iter().rev().flatten().next();
    let title = match last {
        Some(v) => format!("{series}: {} (max {})", axis_label(*v), axis_label(top)),
        None => format!("{series}: no samples yet"),
    };
    html! {
        svg.sparkline data-series=(series) width=(W) height=(H)
            viewBox={"0 0 " (W) " " (H)} role="img" aria-label=(title) {
            title { (title) }
            @for pts in polyline_runs(values, top, W, H - 2.0) {
                polyline points=(pts) fill="none" stroke=(colour) stroke-width="1.5" {}
            }
        }
    }
}

/// A chart with a y axis (0 and the maximum), one polyline per line, a
/// legend, the time span under the x axis ("-12m 0s" ... "now") when
/// `span` is given, and `caption` as its title.
pub fn chart(id: &str, lines: &[Line], caption: &str, span: Option<&str>) -> Markup {
    const W: f64 = 640.0;
    const H: f64 = 196.0;
    const LEFT: f64 = 44.0;
    const TOP: f64 = 8.0;
    const PLOT_H: f64 = 140.0;
    let plot_w = W - LEFT - 8.0;
    let top = top(lines);
    let empty = lines.iter().all(|l| l.values.iter().all(Option::is_none));
    html! {
        svg.chart id=(id) width=(W) height=(H) viewBox={"0 0 " (W) " " (H)} role="img"
            aria-label=(caption) {
            title { (caption) }
            line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(TOP + PLOT_H) stroke="#999" {}
            line x1=(LEFT) y1=(TOP + PLOT_H) x2=(W - 8.0) y2=(TOP + PLOT_H) stroke="#999" {}
            text x=(LEFT - 4.0) y=(TOP + 8.0) text-anchor="end" font-size="11" { (axis_label(top)) }
            text x=(LEFT - 4.0) y=(TOP + PLOT_H) text-anchor="end" font-size="11" { "0" }
            @if let Some(span) = span {
                text x=(LEFT) y=(TOP + PLOT_H + 13.0) font-size="11" fill="#666" { "-" (span) }
                text x=(W - 8.0) y=(TOP + PLOT_H + 13.0) text-anchor="end" font-size="11" fill="#666" { "now" }
            }
            @if empty {
                text x=(LEFT + plot_w / 2.0) y=(TOP + PLOT_H / 2.0) text-anchor="middle"
                    font-size="12" fill="#666" { "no samples yet" }
            }
            g transform={"translate(" (LEFT) "," (TOP) ")"} {
                @for l in lines {
                    g data-series=(l.name) {
                        @for pts in polyline_runs(l.values, top, plot_w, PLOT_H) {
                            polyline points=(pts) fill="none" stroke=(l.colour) stroke-width="1.5" {}
                        }
                    }
                }
            }
            @for (i, l) in lines.iter().enumerate() {
                rect x=(LEFT + i as f64 * 110.0) y=(H - 14.0) width="10" height="10" fill=(l.colour) {}
                text x=(LEFT + 14.0 + i as f64 * 110.0) y=(H - 5.0) font-size="11" { (l.name) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_scale_to_the_box_with_zero_at_the_bottom() {
        let runs = polyline_runs(&[Some(0.0), Some(5.0), Some(10.0)], 10.0, 100.0, 50.0);
        assert_eq!(runs, vec!["0.0,50.0 50.0,25.0 100.0,0.0".to_string()]);
    }

    #[test]
    fn gaps_split_the_line_and_a_lone_point_still_shows() {
        let runs = polyline_runs(&[Some(1.0), None, Some(1.0), Some(1.0)], 1.0, 30.0, 10.0);
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!(runs[0], "0.0,0.0 2.0,0.0");
        assert_eq!(runs[1], "20.0,0.0 30.0,0.0");
        assert!(polyline_runs(&[None, None], 1.0, 10.0, 10.0).is_empty());
        assert!(polyline_runs(&[], 1.0, 10.0, 10.0).is_empty());
    }

    #[test]
    fn values_above_the_top_and_below_zero_are_clamped() {
        let runs = polyline_runs(&[Some(-3.0), Some(20.0)], 10.0, 10.0, 10.0);
        assert_eq!(runs, vec!["0.0,10.0 10.0,0.0".to_string()]);
    }

    #[test]
    fn axis_labels_are_short() {
        assert_eq!(axis_label(0.0), "0");
        assert_eq!(axis_label(7.5), "7.5");
        assert_eq!(axis_label(999.0), "999");
        assert_eq!(axis_label(1234.0), "1.2k");
        assert_eq!(axis_label(45_000.0), "45k");
        assert_eq!(axis_label(2_500_000.0), "2.5M");
    }

    #[test]
    fn a_sparkline_names_its_series_and_its_last_value() {
        let s = sparkline("ready", "#36c", &[Some(1.0), Some(3.0)]).into_string();
        assert!(
            s.starts_with("<svg class=\"sparkline\" data-series=\"ready\""),
            "{s}"
        );
        assert!(s.contains("<polyline points=\"0.0,14.7 120.0,0.0\""), "{s}");
        assert!(s.contains("ready: 3 (max 3)"), "{s}");
        let empty = sparkline("completed", "#393", &[]).into_string();
        assert!(
            empty.contains("no samples yet") && !empty.contains("polyline"),
            "{empty}"
        );
    }

    #[test]
    fn a_chart_has_one_group_per_line_and_a_legend() {
        let a = [Some(0.0), Some(4.0)];
        let b = [None, Some(2.0)];
        let s = chart(
            "depth-chart",
            &[
                Line {
                    name: "ready",
                    colour: "#36c",
                    values: &a,
                },
                Line {
                    name: "dead",
                    colour: "#c33",
                    values: &b,
                },
            ],
            "last 2 samples",
            Some("10s"),
        )
        .into_string();
        assert!(s.contains("id=\"depth-chart\""), "{s}");
        assert!(s.contains("<g data-series=\"ready\">"), "{s}");
        assert!(s.contains("<g data-series=\"dead\">"), "{s}");
        assert!(s.contains(">4</text>"), "the maximum on the axis: {s}");
        assert!(!s.contains("no samples yet"), "{s}");
        assert!(
            s.contains(">-10s</text>") && s.contains(">now</text>"),
            "{s}"
        );
    }
}
