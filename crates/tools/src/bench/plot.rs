//! Benchmark figures as SVG, drawn with plotters (its SVG backend only: no fonts or system
//! libraries; text is left to the viewer). A figure is panels of grouped bars, one group per
//! case (an RTT, a client count, ...), one bar per series, with the physical limit of the run
//! drawn as a dashed line: across the panel when it is one figure, over each group when it
//! differs by group (a round trip plus an fdatasync, say). A figure may also hold line panels
//! (a quantity over time, one line per case), drawn above its bars.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::element::DashedPathElement;
use plotters::prelude::*;

/// A figure: a title over panels stacked top to bottom: the line panels, then the bar panels.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub title: String,
    pub panels: Vec<BarPanel>,
    /// Quantities over time (empty in most figures).
    pub lines: Vec<LinePanel>,
}

/// Lines on a linear x axis (time, say): one per series, with events as dashed vertical lines.
#[derive(Debug, Clone, PartialEq)]
pub struct LinePanel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Line>,
    pub events: Vec<Event>,
}

/// One series of (x, y) points, drawn in the order given; non-finite points are left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Something that happened at `x` (the end of a batch, a restored link): a dashed vertical line.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub label: String,
    pub x: f64,
}

/// Grouped bars: `series` names the bars within each group.
#[derive(Debug, Clone, PartialEq)]
pub struct BarPanel {
    pub title: String,
    pub y_label: String,
    /// A logarithmic y axis, for figures that span orders of magnitude.
    pub log_y: bool,
    pub series: Vec<String>,
    pub groups: Vec<Group>,
    pub limits: Vec<Limit>,
}

/// One group of bars, with one value per series (`None`: not measured; left empty).
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub label: String,
    pub values: Vec<Option<f64>>,
}

/// A physical limit drawn as a dashed line.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    pub label: String,
    pub value: LimitValue,
}

#[derive(Debug, Clone, PartialEq)]
pub enum LimitValue {
    /// The same for every group: a line across the panel.
    All(f64),
    /// One per group (`None`: none for that group): a line over each group.
    PerGroup(Vec<Option<f64>>),
}

const WIDTH: u32 = 1100;
const PANEL_HEIGHT: u32 = 400;
const TITLE_HEIGHT: u32 = 40;
const SERIES_COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];
const LIMIT_COLOURS: [RGBColor; 3] =
    [RGBColor(214, 39, 40), RGBColor(188, 140, 0), RGBColor(60, 60, 60)];

impl Figure {
    /// The figure as an SVG document.
    pub fn to_svg(&self) -> anyhow::Result<String> {
        let panels = (self.lines.len() + self.panels.len()).max(1) as u32;
        let mut svg = String::new();
        {
            let size = (WIDTH, TITLE_HEIGHT + panels * PANEL_HEIGHT);
            let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
            root.fill(&WHITE).map_err(plot_error)?;
            let body =
                root.titled(&self.title, ("sans-serif", 20).into_font().style(FontStyle::Bold));
            let body = body.map_err(plot_error)?;
            let areas = body.split_evenly((panels as usize, 1));
            let (line_areas, bar_areas) = areas.split_at(self.lines.len().min(areas.len()));
            for (panel, area) in self.lines.iter().zip(line_areas) {
                panel.draw(area)?;
            }
            for (panel, area) in self.panels.iter().zip(bar_areas) {
                panel.draw(&root, area)?;
            }
            root.present().map_err(plot_error)?;
        }
        Ok(svg)
    }

    /// Writes the figure to `path`.
    pub fn write(&self, path: &std::path::Path) -> anyhow::Result<()> {
        let svg = self.to_svg()?;
        std::fs::write(path, svg)
            .map_err(|error| anyhow::anyhow!("write {}: {error}", path.display()))
    }
}

fn plot_error<E: std::fmt::Debug>(error: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the figure: {error:?}")
}

impl BarPanel {
    /// Every value the y axis must show: bars and limits.
    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        let bars = self.groups.iter().flat_map(|group| group.values.iter().flatten().copied());
        let limits = self.limits.iter().flat_map(|limit| match &limit.value {
            LimitValue::All(value) => vec![*value],
            LimitValue::PerGroup(values) => values.iter().flatten().copied().collect(),
        });
        bars.chain(limits).filter(|value| value.is_finite())
    }

    fn draw(
        &self,
        root: &DrawingArea<SVGBackend<'_>, Shift>,
        area: &DrawingArea<SVGBackend<'_>, Shift>,
    ) -> anyhow::Result<()> {
        // The top of each panel is left to the legend (about 17 px per entry of ~300), so that
        // it covers no bar.
        let entries = (self.series.len() + self.limits.len()) as f64;
        let legend_share = ((entries * 17.0 + 20.0) / 300.0).clamp(0.15, 0.6);
        let max = self.values().fold(0.0f64, f64::max);
        if self.log_y {
            let positive = self.values().filter(|value| *value > 0.0);
            let min = positive.fold(f64::INFINITY, f64::min).min(max.max(1e-9));
            let low = 10f64.powf(min.max(1e-9).log10().floor());
            let top = max.max(low * 10.0).log10();
            let decades = (top - low.log10()) / (1.0 - legend_share);
            let high = 10f64.powf(low.log10() + decades);
            self.draw_on(root, area, (low..high).log_scale(), low)
        } else {
            let high = if max > 0.0 { max / (1.0 - legend_share) } else { 1.0 };
            self.draw_on(root, area, 0.0..high, 0.0)
        }
    }

    fn draw_on<Y>(
        &self,
        root: &DrawingArea<SVGBackend<'_>, Shift>,
        area: &DrawingArea<SVGBackend<'_>, Shift>,
        y_range: Y,
        floor: f64,
    ) -> anyhow::Result<()>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let groups = self.groups.len().max(1);
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, ("sans-serif", 16))
            .margin(12)
            .margin_left(20)
            .x_label_area_size(48)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..groups as f64, y_range)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(&self.y_label)
            .y_label_formatter(&|value| short_number(*value))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(plot_error)?;
        // Bars: each group's width is 1; its bars share 80 % of it.
        let bars = self.series.len().max(1) as f64;
        let width = 0.8 / bars;
        for (index, name) in self.series.iter().enumerate() {
            let colour = SERIES_COLOURS[index % SERIES_COLOURS.len()];
            let rectangles: Vec<_> = self
                .groups
                .iter()
                .enumerate()
                .filter_map(|(group, values)| {
                    let value = values.values.get(index).copied().flatten()?;
                    let left = group as f64 + 0.1 + index as f64 * width;
                    Some(Rectangle::new(
                        [(left, floor), (left + width * 0.92, value.max(floor))],
                        colour.filled(),
                    ))
                })
                .collect();
            chart.draw_series(rectangles).map_err(plot_error)?.label(name).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
            });
        }
        for (index, limit) in self.limits.iter().enumerate() {
            let colour = LIMIT_COLOURS[index % LIMIT_COLOURS.len()];
            let style = colour.stroke_width(2);
            let segments: Vec<(f64, f64, f64)> = match &limit.value {
                LimitValue::All(value) => vec![(0.0, groups as f64, *value)],
                LimitValue::PerGroup(values) => values
                    .iter()
                    .enumerate()
                    .filter_map(|(group, value)| {
                        value.map(|value| (group as f64 + 0.04, group as f64 + 0.96, value))
                    })
                    .collect(),
            };
            chart
                .draw_series(segments.into_iter().map(|(from, to, value)| {
                    DashedPathElement::new(vec![(from, value), (to, value)], 8, 5, style)
                }))
                .map_err(plot_error)?
                .label(&limit.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(plot_error)?;
        // Group labels under the axis, one line per " · " part.
        for (group, values) in self.groups.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(group as f64 + 0.5, floor_of(&chart, floor)));
            for (line, text) in values.label.split(" · ").enumerate() {
                let style = ("sans-serif", 12).into_font().color(&BLACK).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Top,
                    ),
                );
                root.draw(&Text::new(text.to_string(), (x, y + 8 + 15 * line as i32), style))
                    .map_err(plot_error)?;
            }
        }
        Ok(())
    }
}

impl LinePanel {
    fn points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.series
            .iter()
            .flat_map(|line| line.points.iter().copied())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    }

    fn draw(&self, area: &DrawingArea<SVGBackend<'_>, Shift>) -> anyhow::Result<()> {
        // As in bar panels, the top is left to the legend so that it covers no line.
        let entries = (self.series.len() + self.events.len()) as f64;
        let legend_share = ((entries * 17.0 + 20.0) / 300.0).clamp(0.15, 0.6);
        let event_xs = self.events.iter().map(|event| event.x).filter(|x| x.is_finite());
        let x_low = self.points().map(|(x, _)| x).chain(event_xs.clone()).fold(0.0f64, f64::min);
        let x_high = self.points().map(|(x, _)| x).chain(event_xs).fold(x_low, f64::max);
        let x_high = if x_high > x_low { x_high } else { x_low + 1.0 };
        let y_low = self.points().map(|(_, y)| y).fold(0.0f64, f64::min);
        let y_max = self.points().map(|(_, y)| y).fold(y_low, f64::max);
        let y_high = if y_max > y_low {
            y_low + (y_max - y_low) / (1.0 - legend_share)
        } else {
            y_low + 1.0
        };
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, ("sans-serif", 16))
            .margin(12)
            .margin_left(20)
            .x_label_area_size(48)
            .y_label_area_size(80)
            .build_cartesian_2d(x_low..x_high, y_low..y_high)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .x_label_formatter(&|value| short_number(*value))
            .y_label_formatter(&|value| short_number(*value))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(plot_error)?;
        for (index, line) in self.series.iter().enumerate() {
            let style = SERIES_COLOURS[index % SERIES_COLOURS.len()].stroke_width(2);
            let points: Vec<(f64, f64)> = line
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect();
            chart
                .draw_series(std::iter::once(PathElement::new(points, style)))
                .map_err(plot_error)?
                .label(&line.name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        }
        for (index, event) in self.events.iter().enumerate() {
            let style = LIMIT_COLOURS[index % LIMIT_COLOURS.len()].stroke_width(2);
            let from = (event.x, y_low);
            let to = (event.x, y_high);
            chart
                .draw_series(std::iter::once(DashedPathElement::new(vec![from, to], 8, 5, style)))
                .map_err(plot_error)?
                .label(&event.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(plot_error)?;
        Ok(())
    }
}

/// The y value at the bottom of the plotting area.
fn floor_of<X: Ranged<ValueType = f64>, Y: Ranged<ValueType = f64>>(
    chart: &ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    floor: f64,
) -> f64 {
    let range = chart.y_range();
    floor.max(range.start)
}

/// 1500 → "1.5k", 0.25 → "0.25": axis labels that stay short.
pub fn short_number(value: f64) -> String {
    let magnitude = value.abs();
    let (scaled, suffix) = if magnitude >= 1e9 {
        (value / 1e9, "G")
    } else if magnitude >= 1e6 {
        (value / 1e6, "M")
    } else if magnitude >= 1e4 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let text = if scaled.abs() >= 100.0 || scaled == scaled.trunc() {
        format!("{scaled:.0}")
    } else if scaled.abs() >= 1.0 {
        format!("{scaled:.1}")
    } else {
        let digits = (-scaled.abs().log10().floor()) as usize + 1;
        format!("{scaled:.digits$}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{text}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(log_y: bool) -> Figure {
        Figure {
            title: "Commit <throughput> & latency".into(),
            panels: vec![BarPanel {
                title: "commits/s".into(),
                y_label: "commits/s".into(),
                log_y,
                series: vec!["redoguard".into(), "raw".into()],
                groups: vec![
                    Group { label: "RTT 0 ms · 1 client".into(), values: vec![Some(900.0), None] },
                    Group {
                        label: "RTT 10 ms · 16 clients".into(),
                        values: vec![Some(42.0), Some(7.5)],
                    },
                ],
                limits: vec![
                    Limit { label: "line rate".into(), value: LimitValue::All(1200.0) },
                    Limit {
                        label: "RTT + fdatasync".into(),
                        value: LimitValue::PerGroup(vec![None, Some(95.0)]),
                    },
                ],
            }],
            lines: Vec::new(),
        }
    }

    /// The SVG holds every bar measured (and none for what was not), the limits as dashed
    /// lines, the labels (escaped), and nothing outside the document.
    #[test]
    fn a_figure_draws_its_bars_limits_and_labels() {
        for log_y in [false, true] {
            let svg = figure(log_y).to_svg().unwrap();
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
            assert!(svg.contains("Commit &lt;throughput&gt; &amp; latency"), "title escaped");
            for text in ["RTT 0 ms", "16 clients", "redoguard", "line rate", "RTT + fdatasync"] {
                assert!(svg.contains(text), "{text} missing");
            }
            // Three bars measured, one not; plus two legend swatches.
            let bars = svg.matches("<rect").count();
            assert!(bars >= 5, "{bars} rectangles");
            // Dashed limits are drawn as many short segments.
            assert!(svg.matches("<polyline").count() + svg.matches("<line").count() >= 10);
        }
    }

    /// A line panel draws one polyline per series (non-finite points left out), its events,
    /// its title and legend, above the bars; an empty series draws nothing and fails nothing.
    #[test]
    fn a_figure_draws_its_lines_above_its_bars() {
        let mut with_lines = figure(false);
        with_lines.lines.push(LinePanel {
            title: "Transport lag over time".into(),
            x_label: "s since the batch began".into(),
            y_label: "lag, s".into(),
            series: vec![
                Line {
                    name: "async_none".into(),
                    points: vec![(0.0, 0.0), (1.0, 2.5), (2.0, 5.0)],
                },
                Line {
                    name: "async_zstd".into(),
                    points: vec![(0.0, 0.0), (1.0, f64::NAN), (2.0, 0.5)],
                },
                Line { name: "empty".into(), points: Vec::new() },
            ],
            events: vec![Event { label: "batch ends".into(), x: 1.5 }],
        });
        let svg = with_lines.to_svg().unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        for text in ["Transport lag over time", "async_none", "async_zstd", "batch ends", "lag, s"]
        {
            assert!(svg.contains(text), "{text} missing");
        }
        let bars_only = figure(false).to_svg().unwrap();
        assert!(bars_only.contains("commits/s") && svg.contains("commits/s"), "bars kept");
        let position = |text: &str| svg.find(text).unwrap_or_else(|| panic!("{text} missing"));
        assert!(position("Transport lag over time") < position("commits/s"), "lines first");
        let polylines = |svg: &str| svg.matches("<polyline").count();
        // Two lines with points, three legend swatches, a dashed event.
        assert!(polylines(&svg) >= polylines(&bars_only) + 5, "{svg}");
        assert!(!svg.contains("NaN"), "a non-finite point reached the SVG");
        // Panels with nothing to draw still make a document.
        let empty = Figure {
            title: "empty".into(),
            panels: Vec::new(),
            lines: vec![LinePanel {
                title: "nothing".into(),
                x_label: "x".into(),
                y_label: "y".into(),
                series: Vec::new(),
                events: Vec::new(),
            }],
        };
        assert!(empty.to_svg().unwrap().contains("nothing"));
    }

    #[test]
    fn axis_numbers_stay_short() {
        assert_eq!(short_number(1500.0), "1500");
        assert_eq!(short_number(15_000.0), "15k");
        assert_eq!(short_number(2_500_000.0), "2.5M");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(0.001), "0.001");
        assert_eq!(short_number(100.0), "100");
        assert_eq!(short_number(0.0), "0");
    }
}
