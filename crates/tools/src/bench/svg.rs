//! A grouped bar chart as SVG, written by hand: one chart does not justify a plotting
//! library. The y axis is logarithmic because the figures span three orders of magnitude
//! (a 16 KiB window gives a few Mbit/s where 3 × BDP gives near line rate).

use std::fmt::Write as _;

/// One group of bars (e.g. one RTT) with one value per series.
pub struct Group {
    pub label: String,
    pub values: Vec<f64>,
}

/// A bar chart: `series` names the bars within each group.
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub series: Vec<String>,
    pub groups: Vec<Group>,
    /// A horizontal reference line (e.g. line rate) and its label.
    pub reference: Option<(f64, String)>,
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 90.0;
const COLOURS: [&str; 6] = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

impl BarChart {
    /// Renders the chart; values ≤ 0 are drawn as empty bars at the axis.
    pub fn to_svg(&self) -> String {
        let positive =
            self.groups.iter().flat_map(|g| g.values.iter().copied()).filter(|v| *v > 0.0);
        let max = positive
            .clone()
            .fold(1.0f64, f64::max)
            .max(self.reference.as_ref().map_or(0.0, |r| r.0));
        let min = positive.fold(f64::INFINITY, f64::min).min(max);
        let (low, high) =
            (10f64.powf(min.log10().floor()).min(1.0), 10f64.powf(max.log10().ceil()));
        let plot_height = HEIGHT - TOP - BOTTOM;
        let y = |value: f64| {
            let clamped = value.max(low);
            TOP + plot_height
                * (1.0 - (clamped.log10() - low.log10()) / (high.log10() - low.log10()))
        };
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="25" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        // Decades: grid lines and labels.
        let mut decade = low;
        while decade <= high * 1.0001 {
            let at = y(decade);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{at:.1}" x2="{}" y2="{at:.1}" stroke="#ddd"/>"##,
                WIDTH - RIGHT
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                at + 4.0,
                trim_number(decade)
            );
            decade *= 10.0;
        }
        let _ = writeln!(
            svg,
            r#"<text transform="translate(20,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + plot_height / 2.0,
            escape(&self.y_label)
        );
        let group_width = (WIDTH - LEFT - RIGHT) / self.groups.len().max(1) as f64;
        let bar_width = group_width * 0.8 / self.series.len().max(1) as f64;
        for (index, group) in self.groups.iter().enumerate() {
            let group_left = LEFT + group_width * index as f64 + group_width * 0.1;
            for (series, value) in group.values.iter().enumerate() {
                let x = group_left + bar_width * series as f64;
                let top = y(*value);
                let colour = COLOURS[series % COLOURS.len()];
                let _ = writeln!(
                    svg,
                    r#"<rect x="{x:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{colour}"/>"#,
                    bar_width * 0.9,
                    (TOP + plot_height - top).max(0.0)
                );
                let _ = writeln!(
                    svg,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                    x + bar_width * 0.45,
                    top - 4.0,
                    format_value(*value)
                );
            }
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{}</text>"#,
                group_left + group_width * 0.4,
                TOP + plot_height + 18.0,
                escape(&group.label)
            );
        }
        if let Some((value, label)) = &self.reference {
            let at = y(*value);
            let _ = writeln!(
                svg,
                r#"<line x1="{LEFT}" y1="{at:.1}" x2="{}" y2="{at:.1}" stroke="black" stroke-dasharray="6,4"/>"#,
                WIDTH - RIGHT
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{:.1}" text-anchor="start">{}</text>"#,
                LEFT + 4.0,
                at - 4.0,
                escape(label)
            );
        }
        let _ = writeln!(
            svg,
            r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>"#,
            TOP + plot_height
        );
        // Legend.
        for (series, name) in self.series.iter().enumerate() {
            let x = LEFT + 10.0 + 200.0 * series as f64;
            let y = HEIGHT - 30.0;
            let _ = writeln!(
                svg,
                r#"<rect x="{x}" y="{}" width="14" height="14" fill="{}"/>"#,
                y - 11.0,
                COLOURS[series % COLOURS.len()]
            );
            let _ = writeln!(svg, r#"<text x="{}" y="{y}">{}</text>"#, x + 20.0, escape(name));
        }
        svg.push_str("</svg>\n");
        svg
    }
}

fn format_value(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn trim_number(value: f64) -> String {
    if value >= 1.0 { format!("{value:.0}") } else { format!("{value}") }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_bar_with_its_value_and_escapes_text() {
        let chart = BarChart {
            title: "a < b & c".into(),
            y_label: "Mbit/s".into(),
            series: vec!["16 KiB".into(), "3 × BDP".into()],
            groups: vec![
                Group { label: "25 ms".into(), values: vec![5.6, 940.0] },
                Group { label: "100 ms".into(), values: vec![1.4, 0.0] },
            ],
            reference: Some((941.0, "line rate".into())),
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<rect x=").count(), 4 + 2, "4 bars and 2 legend boxes");
        assert!(svg.contains(">5.60<") && svg.contains(">940<") && svg.contains(">1.40<"));
        assert!(svg.contains("a &lt; b &amp; c"));
        assert!(svg.contains(">1000<") && svg.contains(">1<"), "decades from 1 to 1000");
    }
}
