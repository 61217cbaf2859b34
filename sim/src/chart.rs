//! The SVG chart of a [`Simulation`]: three panels over one time axis.
//!
//! Drawn with plotters' SVG backend and no font support: text is written as
//! `<text>` elements (the viewer picks the font), every coordinate is a
//! whole pixel and every label is formatted here, so the file is the same on
//! every run and machine.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{Request, SimError, Simulation, seconds, us};

const WIDTH: u32 = 860;
const HEIGHT: u32 = 560;
/// Room right of each panel for its legend.
const LEGEND: u32 = 170;
const FONT: &str = "sans-serif";

const REQUESTS: RGBColor = RGBColor(160, 160, 160);
const ADMITTED: RGBColor = RGBColor(31, 119, 180);
const SERVED: RGBColor = RGBColor(44, 160, 44);
const RATE: RGBColor = RGBColor(23, 190, 207);
const RETRY: RGBColor = RGBColor(214, 39, 40);
const DELAY: RGBColor = RGBColor(255, 127, 14);
const CLIENTS: [RGBColor; 5] = [
    RGBColor(148, 103, 189),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
];

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A chart's failure, as text (plotters' error types are generic).
fn chart_err(e: impl std::fmt::Display) -> SimError {
    SimError::Chart(e.to_string())
}

/// `(x, y)` points of a step line over bins of `width` seconds.
fn steps(values: &[f64], width: f64) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(2 * values.len());
    for (i, &v) in values.iter().enumerate() {
        points.push((i as f64 * width, v));
        points.push(((i + 1) as f64 * width, v));
    }
    points
}

/// A y range's top with some headroom: a whole number, at least `min`.
fn top(max: f64, min: f64) -> f64 {
    (max * 1.15).ceil().max(min)
}

/// Axis labels with at most one decimal, fixed.
fn label(v: &f64) -> String {
    let tenths = (v * 10.0).round() as i64;
    if tenths % 10 == 0 {
        format!("{}", tenths / 10)
    } else {
        format!("{}.{}", tenths / 10, (tenths % 10).abs())
    }
}

/// A line of a panel: its legend, points and style.
struct Line {
    name: String,
    points: Vec<(f64, f64)>,
    style: ShapeStyle,
}

/// One panel's lines: drawn in order, listed in its legend.
#[derive(Default)]
struct Lines(Vec<Line>);

impl Lines {
    fn add(&mut self, name: impl Into<String>, points: Vec<(f64, f64)>, style: ShapeStyle) {
        self.0.push(Line {
            name: name.into(),
            points,
            style,
        });
    }

    /// Draws the lines on `chart` and their legend right of it, on `area`.
    fn draw(self, area: &Area<'_>, chart: &mut Chart<'_, '_>) -> Result<(), SimError> {
        let (width, _) = area.dim_in_pixel();
        let x = i32::try_from(width.saturating_sub(LEGEND)).unwrap_or(0) + 6;
        let font = (FONT, 12)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        for (
            i,
            Line {
                name,
                points,
                style,
            },
        ) in self.0.into_iter().enumerate()
        {
            chart
                .draw_series(LineSeries::new(points, style))
                .map_err(chart_err)?;
            let y = 26 + 16 * i32::try_from(i).unwrap_or(0);
            area.draw(&PathElement::new([(x, y), (x + 18, y)], style))
                .map_err(chart_err)?;
            area.draw(&Text::new(name, (x + 24, y), font.clone()))
                .map_err(chart_err)?;
        }
        Ok(())
    }
}

impl Simulation {
    /// Per bin: the sum (or, with `max`, the largest) of what `f` gives for
    /// the requests it places in that bin (by a time in µs).
    fn per_bin(&self, f: impl Fn(&Request) -> Option<(u64, f64)>, max: bool) -> Vec<f64> {
        let mut out: Vec<f64> = vec![0.0; self.bins()];
        for r in &self.requests {
            if let Some((at, v)) = f(r)
                && let Some(slot) = usize::try_from(at / self.bin)
                    .ok()
                    .and_then(|b| out.get_mut(b))
            {
                *slot = if max { slot.max(v) } else { *slot + v };
            }
        }
        out
    }

    /// The chart: requests and admitted per bin (and, for a leaky bucket,
    /// served per bin, each at the end of its delay), each client's
    /// `remaining`, and per bin the longest `retry_after` of a denial (and
    /// `delay` of an admission); an SVG document.
    pub fn svg(&self) -> Result<String, SimError> {
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
            root.fill(&WHITE).map_err(chart_err)?;
            let title = format!(
                "{}, {}: {}",
                self.strategy(),
                self.pattern,
                self.quota_label()
            );
            let root = root.titled(&title, (FONT, 17)).map_err(chart_err)?;
            let (flow, rest) = root.split_vertically(230);
            let (remaining, waits) = rest.split_vertically(145);
            self.draw_flow(&flow)?;
            self.draw_remaining(&remaining)?;
            self.draw_waits(&waits)?;
            root.present().map_err(chart_err)?;
        }
        Ok(svg)
    }

    /// A panel's chart and mesh, `y_top` high.
    fn panel<'a, 'b>(
        &self,
        area: &'a Area<'b>,
        caption: Option<String>,
        y_top: f64,
        y_desc: &str,
        x_desc: bool,
    ) -> Result<Chart<'a, 'b>, SimError> {
        let mut builder = ChartBuilder::on(area);
        builder
            .margin(8)
            .margin_right(LEGEND)
            .x_label_area_size(if x_desc { 34 } else { 22 })
            .y_label_area_size(44);
        if let Some(caption) = caption {
            builder.caption(caption, (FONT, 13));
        }
        let mut chart = builder
            .build_cartesian_2d(0.0..self.duration as f64 / 1e6, 0.0..y_top)
            .map_err(chart_err)?;
        let mut mesh = chart.configure_mesh();
        mesh.max_light_lines(0)
            .x_labels(11)
            .y_labels(5)
            .x_label_formatter(&label)
            .y_label_formatter(&label)
            .y_desc(y_desc)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 12));
        if x_desc {
            mesh.x_desc("time (s)");
        }
        mesh.draw().map_err(chart_err)?;
        Ok(chart)
    }

    fn draw_flow(&self, area: &Area<'_>) -> Result<(), SimError> {
        let width = self.bin as f64 / 1e6;
        let sent = self.per_bin(|r| Some((us(r.at), 1.0)), false);
        let admitted = self.per_bin(|r| r.allowed.then(|| (us(r.at), 1.0)), false);
        // the quota's sustained rate, in requests per bin, for every client together
        let (count, per) = if self.strategy().holds_leases() {
            (self.quota.rate().count(), us(self.hold))
        } else {
            (self.quota.rate().count(), us(self.quota.rate().period()))
        };
        let rate =
            count as f64 * self.bin as f64 / per.max(1) as f64 * self.pattern.clients() as f64;
        let max = sent.iter().copied().fold(rate, f64::max);
        let caption = format!("traffic: {}", self.pattern.description());
        let y_desc = format!("per {} s", seconds(self.bin));
        let mut chart = self.panel(area, Some(caption), top(max, 2.0), &y_desc, false)?;
        let mut lines = Lines::default();
        let rate_name = if self.strategy().holds_leases() {
            "n per hold"
        } else {
            "the quota's rate"
        };
        let end = self.duration as f64 / 1e6;
        lines.add(
            rate_name,
            vec![(0.0, rate), (end, rate)],
            RATE.stroke_width(1),
        );
        lines.add("requests", steps(&sent, width), REQUESTS.stroke_width(1));
        lines.add(
            "admitted",
            steps(&admitted, width),
            ADMITTED.stroke_width(2),
        );
        if self.strategy().delays() {
            let served = self.per_bin(
                |r| r.allowed.then(|| (us(r.at) + r.delay.map_or(0, us), 1.0)),
                false,
            );
            lines.add(
                "served (after delay)",
                steps(&served, width),
                SERVED.stroke_width(2),
            );
        }
        lines.draw(area, &mut chart)
    }

    fn draw_remaining(&self, area: &Area<'_>) -> Result<(), SimError> {
        let limit = self.quota.limit() as f64;
        let mut chart = self.panel(area, None, top(limit, 2.0), "remaining", false)?;
        let mut lines = Lines::default();
        let clients = self.pattern.clients();
        for client in 0..clients {
            // the peeks (before the requests sent at their time) and every decision, in time order
            let mut points: Vec<(u64, u8, u64)> = self
                .samples
                .iter()
                .filter(|s| s.client == client)
                .map(|s| (us(s.at), 0, s.remaining))
                .chain(
                    self.requests
                        .iter()
                        .filter(|r| r.client == client)
                        .map(|r| (us(r.at), 1, r.remaining)),
                )
                .collect();
            points.sort();
            let points = points
                .into_iter()
                .map(|(at, _, remaining)| (at as f64 / 1e6, remaining as f64))
                .collect();
            let name = if clients == 1 {
                "remaining".to_owned()
            } else {
                format!("client-{}", client + 1)
            };
            let color = CLIENTS[client % CLIENTS.len()];
            lines.add(name, points, color.stroke_width(2));
        }
        lines.draw(area, &mut chart)
    }

    fn draw_waits(&self, area: &Area<'_>) -> Result<(), SimError> {
        let width = self.bin as f64 / 1e6;
        let secs = |d: std::time::Duration| d.as_micros() as f64 / 1e6;
        let retry = self.per_bin(|r| r.retry_after.map(|d| (us(r.at), secs(d))), true);
        let delay = self.per_bin(|r| r.delay.map(|d| (us(r.at), secs(d))), true);
        let max = retry.iter().chain(&delay).copied().fold(0.0, f64::max);
        let mut chart = self.panel(area, None, top(max, 1.0), "seconds", true)?;
        let mut lines = Lines::default();
        lines.add(
            "retry-after (longest)",
            steps(&retry, width),
            RETRY.stroke_width(2),
        );
        if self.strategy().delays() {
            lines.add(
                "delay (longest)",
                steps(&delay, width),
                DELAY.stroke_width(2),
            );
        }
        lines.draw(area, &mut chart)
    }
}
