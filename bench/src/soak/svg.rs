//! Line charts as plain SVG: a measure over the run's minutes, with the
//! warm-up greyed and the two compared windows shaded.

use std::fmt::Write as _;

use super::Phases;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 320.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 45.0;
const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

pub struct Series<'a> {
    pub name: &'a str,
    /// (seconds from the start, value)
    pub points: Vec<(f64, f64)>,
}

/// A round step giving about five intervals up to `max`.
fn step(max: f64) -> f64 {
    let raw = (max / 5.0).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude)
}

fn label(v: f64) -> String {
    if v >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

pub fn chart(title: &str, unit: &str, phases: &Phases, series: &[Series]) -> String {
    let max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let y_step = step(max);
    let top = (max / y_step).ceil().max(1.0) * y_step;
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |t: f64| LEFT + t / phases.total * plot_w;
    let y = |v: f64| TOP + plot_h - v / top * plot_h;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{title}</text>"#
    );
    let band = |svg: &mut String, (a, b): (f64, f64), fill: &str, name: &str| {
        let _ = writeln!(
            svg,
            r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{plot_h}" fill="{fill}"/><text x="{:.1}" y="{:.1}" fill="#666" font-size="10">{name}</text>"##,
            x(a),
            x(b) - x(a),
            x(a) + 3.0,
            TOP + 12.0
        );
    };
    band(&mut svg, (0.0, phases.warm_up), "#eeeeee", "warm-up");
    band(&mut svg, phases.first, "#e8f0fb", "first");
    band(&mut svg, phases.last, "#fbeee8", "last");
    let mut v = 0.0;
    while v <= top + y_step / 2.0 {
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#ccc"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            y(v),
            y(v),
            LEFT - 6.0,
            y(v) + 4.0,
            label(v)
        );
        v += y_step;
    }
    let minutes = phases.total / 60.0;
    let minute_step = step(minutes).max(1.0);
    let mut m = 0.0;
    while m <= minutes + 1e-9 {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x(m * 60.0),
            HEIGHT - BOTTOM + 16.0,
            label(m)
        );
        m += minute_step;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">minutes</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{unit}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 8.0,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0
    );
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = s
            .points
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
            points.join(" ")
        );
        let lx = WIDTH - RIGHT - 190.0;
        let ly = TOP + 16.0 + i as f64 * 16.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="3"/><text x="{:.1}" y="{ly:.1}">{}</text>"#,
            lx + 18.0,
            ly - 4.0,
            ly - 4.0,
            lx + 24.0,
            s.name
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round_and_cover_the_maximum() {
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9 * b;
        assert!(near(step(9.0), 2.0));
        assert!(near(step(100.0), 20.0));
        assert!(near(step(0.7), 0.2));
        assert!(near(step(12.0), 2.5));
    }
}
