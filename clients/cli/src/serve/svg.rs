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

/// A task's colour by state (the dependency graph and its legend).
pub fn state_colour(state: &str) -> &'static str {
    match state {
        "ready" => "#36c",
        "in_flight" => "#c80",
        "scheduled" => "#888",
        "waiting" => "#96c",
        "blocked" => "#a60",
        "dead" => "#c33",
        "completed" => "#393",
        _ => "#555",
    }
}

/// The states the graph's legend names, in the order of a task's life.
pub const GRAPH_STATES: [&str; 7] = [
    "waiting",
    "scheduled",
    "ready",
    "blocked",
    "in_flight",
    "completed",
    "dead",
];

/// One task of a dependency graph.
pub struct Node<'a> {
    pub id: i64,
    pub queue: &'a str,
    pub state: &'a str,
}

/// Each node's column: the longest chain of parents before it (a DAG, so
/// this settles within one pass per node; a cycle could not, and stops).
pub fn layers(ids: &[i64], edges: &[(i64, i64)]) -> Vec<usize> {
    let index = |id: i64| ids.iter().position(|&i| i == id);
    let mut depth = vec![0usize; ids.len()];
    for _ in 0..ids.len() {
        let mut changed = false;
        for &(p, c) in edges {
            if let (Some(p), Some(c)) = (index(p), index(c)) {
                if depth[c] < depth[p] + 1 && depth[p] < ids.len() {
                    depth[c] = depth[p] + 1;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    depth
}

/// A dependency graph drawn left (parents) to right (children): a box per
/// task coloured by its state and linking to its page, an arrow per
/// (parent, child) edge, the task `current` outlined, and a legend of the
/// states. Every text is escaped by maud.
pub fn dag(nodes: &[Node], edges: &[(i64, i64)], current: i64) -> Markup {
    const BOX_W: f64 = 150.0;
    const BOX_H: f64 = 40.0;
    const COL: f64 = 200.0;
    const ROW: f64 = 54.0;
    const PAD: f64 = 10.0;
    const LEGEND: f64 = 26.0;
    let ids: Vec<i64> = nodes.iter().map(|n| n.id).collect();
    let depth = layers(&ids, edges);
    // Within a column, by task id.
    let cols = depth.iter().copied().max().map_or(0, |d| d + 1);
    let mut rows = vec![0usize; nodes.len()];
    let mut per_col = vec![0usize; cols];
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by_key(|&i| (depth[i], nodes[i].id));
    for i in order {
        rows[i] = per_col[depth[i]];
        per_col[depth[i]] += 1;
    }
    let tallest = per_col.iter().copied().max().unwrap_or(0);
    let w = (PAD * 2.0 + (cols.max(1) - 1) as f64 * COL + BOX_W)
        .max(GRAPH_STATES.len() as f64 * 96.0 + PAD);
    let h = PAD * 2.0 + tallest.max(1) as f64 * ROW + LEGEND;
    let at = |i: usize| (PAD + depth[i] as f64 * COL, PAD + rows[i] as f64 * ROW);
    let pos = |id: i64| ids.iter().position(|&x| x == id);
    let caption = format!(
        "dependency graph: {} tasks, {} links",
        nodes.len(),
        edges.len()
    );
    html! {
        svg.dag #dag width=(w) height=(h) viewBox={"0 0 " (w) " " (h)} role="img" aria-label=(caption) {
            title { (caption) }
            defs {
                marker #dag-arrow viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto" {
                    path d="M0,0 L10,5 L0,10 z" fill="#777" {}
                }
            }
            @for &(p, c) in edges {
                @if let (Some(pi), Some(ci)) = (pos(p), pos(c)) {
                    @let (px, py) = at(pi);
                    @let (cx, cy) = at(ci);
                    line.edge data-parent=(p) data-child=(c) x1=(px + BOX_W) y1=(py + BOX_H / 2.0)
                        x2=(cx) y2=(cy + BOX_H / 2.0) stroke="#777" stroke-width="1.2" marker-end="url(#dag-arrow)" {}
                }
            }
            @for (i, n) in nodes.iter().enumerate() {
                @let (x, y) = at(i);
                @let colour = state_colour(n.state);
                a href={"/tasks/" (n.id)} data-task-id=(n.id) data-state=(n.state) data-current[n.id == current] {
                    title { "task " (n.id) " in " (n.queue) ": " (n.state) }
                    rect x=(x) y=(y) width=(BOX_W) height=(BOX_H) rx="4" fill="#fff" stroke=(colour)
                        stroke-width=(if n.id == current { "3" } else { "1.5" }) {}
                    rect x=(x) y=(y) width="6" height=(BOX_H) fill=(colour) {}
                    text x=(x + 12.0) y=(y + 16.0) font-size="12" font-weight="600" { (n.id) " · " (n.state) }
                    text x=(x + 12.0) y=(y + 32.0) font-size="11" fill="#555" { (super::pages::shorten(n.queue, 22)) }
                }
            }
            g.legend {
                @for (i, s) in GRAPH_STATES.iter().enumerate() {
                    rect x=(PAD + i as f64 * 96.0) y=(h - 16.0) width="10" height="10" fill=(state_colour(s)) {}
                    text x=(PAD + 14.0 + i as f64 * 96.0) y=(h - 7.0) font-size="11" { (s) }
                }
            }
        }
    }
}

/// One step of a workflow's timeline.
pub struct Mark<'a> {
    pub name: &'a str,
    pub at: Option<&'a str>,
}

/// A workflow's steps in recording order, as dots on a line, then where
/// the task stands now (`state`, coloured as in the graph).
pub fn timeline(steps: &[Mark], state: &str) -> Markup {
    const STEP: f64 = 130.0;
    const PAD: f64 = 16.0;
    const H: f64 = 62.0;
    let w = PAD * 2.0 + steps.len() as f64 * STEP + 120.0;
    let y = 22.0;
    let end = PAD + steps.len() as f64 * STEP;
    html! {
        svg.timeline #step-timeline width=(w) height=(H) viewBox={"0 0 " (w) " " (H)} role="img"
            aria-label={"steps in order: " (steps.len())} {
            title { "the workflow's steps in the order they were recorded" }
            line x1=(PAD) y1=(y) x2=(end) y2=(y) stroke="#999" stroke-width="2" {}
            @for (i, s) in steps.iter().enumerate() {
                @let x = PAD + i as f64 * STEP;
                g data-step=(s.name) data-index=(i) {
                    title { (i + 1) ". " (s.name) @if let Some(at) = s.at { " at " (at) } }
                    circle cx=(x) cy=(y) r="6" fill="#393" {}
                    text x=(x) y=(y + 20.0) font-size="11" { (super::pages::shorten(s.name, 18)) }
                    @if let Some(at) = s.at {
                        text x=(x) y=(y + 34.0) font-size="10" fill="#777" { (super::pages::shorten(at.get(11..19).unwrap_or(at), 18)) }
                    }
                }
            }
            g data-state=(state) {
                circle cx=(end) cy=(y) r="7" fill="#fff" stroke=(state_colour(state)) stroke-width="3" {}
                text x=(end) y=(y + 20.0) font-size="11" fill=(state_colour(state)) { "now: " (state) }
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
    fn a_dag_is_drawn_in_layers_with_links_and_escaped_text() {
        // 1 -> 2 -> 4, 1 -> 3 -> 4: 4 is two steps from the root.
        let edges = [(1, 2), (1, 3), (2, 4), (3, 4)];
        assert_eq!(layers(&[4, 3, 2, 1], &edges), vec![2, 1, 1, 0]);
        // A cycle (the extension makes none) still ends.
        let _ = layers(&[1, 2], &[(1, 2), (2, 1)]);
        let nodes = [
            Node {
                id: 1,
                queue: "q",
                state: "completed",
            },
            Node {
                id: 2,
                queue: "<script>x</script>",
                state: "dead",
            },
        ];
        let s = dag(&nodes, &[(1, 2)], 2).into_string();
        assert!(s.contains("href=\"/tasks/1\""), "{s}");
        assert!(s.contains("data-state=\"completed\""), "{s}");
        assert!(s.contains("stroke=\"#393\""), "completed is green: {s}");
        assert!(s.contains("data-parent=\"1\" data-child=\"2\""), "{s}");
        assert!(s.contains("data-current"), "{s}");
        assert!(
            !s.contains("<script>") && s.contains("&lt;script&gt;"),
            "{s}"
        );
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
