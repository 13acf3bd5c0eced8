//! Draws the Grafana dashboard `examples/monitoring/dashboard.json` as one
//! self-contained HTML page (inline SVG; no script, no external resource)
//! from the series a real Prometheus returned for its panels' queries.
//!
//! Why: O3 asks for screenshots of the dashboard's panels in
//! docs/operations.md, and Grafana is not packaged for Debian, so it cannot
//! run here. This draws what the dashboard's JSON says, the way Grafana lays
//! it out: the 24-column grid of `gridPos` (compacted upward, as Grafana's
//! grid does), `row` panels as headings, `timeseries` as line charts in the
//! panel's unit with a legend named by `legendFormat`, `stat` as the last
//! value (coloured by Grafana's default thresholds) over a sparkline, and
//! `table` as the last values with their labels. It is not Grafana: no
//! tooltips, overrides or options the dashboard does not use.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

/// Grafana's grid has 24 columns.
const GRID_COLUMNS: f64 = 24.0;
/// One grid unit of height, and the gap between panels (Grafana's values).
const GRID_UNIT_HEIGHT_PX: f64 = 30.0;
const GRID_GAP_PX: f64 = 8.0;
/// The page's width: the screenshot's window.
pub const PAGE_WIDTH_PX: u32 = 1280;
const PAGE_PADDING_PX: f64 = 8.0;
/// The dashboard's title bar above the grid.
const HEADER_HEIGHT_PX: f64 = 40.0;
/// A panel's title line, its inner padding, and one line of its legend.
const TITLE_HEIGHT_PX: f64 = 26.0;
const PANEL_PADDING_PX: f64 = 8.0;
const LEGEND_LINE_HEIGHT_PX: f64 = 18.0;
/// Room for the y axis' labels left of a chart and the time labels below it.
const AXIS_LEFT_PX: f64 = 70.0;
const AXIS_BOTTOM_PX: f64 = 18.0;
/// Half the width of a time label (`HH:MM:SS`) under a chart.
const TIME_LABEL_HALF_WIDTH_PX: f64 = 26.0;
/// About how wide a character of the 12 px legend font is.
const CHARACTER_WIDTH_PX: f64 = 6.8;
/// Grafana's default threshold: a stat at or above it is red, below green.
const STAT_RED_FROM: f64 = 80.0;
/// Series colours: the first twelve of Grafana's classic palette.
const PALETTE: [&str; 12] = [
    "#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0", "#508642", "#cca300",
    "#447ebc", "#c15c17",
];

/// The colours and type of Grafana's dark theme, near enough.
const STYLE: &str = "body{margin:0;background:#111217;color:#ccccdc;font:12px/1.4 sans-serif}\
header{height:40px;padding:0 8px;display:flex;align-items:center;gap:16px}\
header b{font-size:18px;color:#d8d9da}main{position:relative;margin:0 8px}\
section{position:absolute;box-sizing:border-box;background:#181b1f;border:1px solid #2c3235;border-radius:2px;\
padding:0 8px;overflow:hidden}h2{margin:0;height:26px;line-height:26px;font-size:13px;color:#d8d9da}\
.row{position:absolute;font-size:15px;font-weight:bold;color:#d8d9da;line-height:30px}\
.stat{font-size:44px;font-weight:500;text-align:center;position:relative}\
ul{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:0 14px}\
li span{display:inline-block;width:14px;height:4px;margin-right:5px;vertical-align:middle}\
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:3px 6px;border-bottom:1px solid #2c3235}\
th{color:#6e9fff;font-weight:500}svg text{fill:#9fa7b3;font-size:11px}";

/// One series of a panel's query: its legend name, labels and samples
/// (Unix seconds, value; a value may be NaN, as Prometheus sends it).
pub struct Series {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub points: Vec<(f64, f64)>,
}

/// The time the charts span and the step between samples, in seconds.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub start_s: f64,
    pub end_s: f64,
    pub step_s: f64,
}

/// A rendered page and the window height that shows all of it.
pub struct Page {
    pub html: String,
    pub height_px: u32,
}

/// The series of a Prometheus `result` (a matrix's `values` or a vector's
/// `value`), named by the target's `legend_format`. Samples that are not
/// numbers are dropped; an answer of another shape gives no series.
pub fn series_of(result: &[Value], legend_format: Option<&str>) -> Vec<Series> {
    let sample = |pair: &Value| Some((pair[0].as_f64()?, pair[1].as_str()?.parse::<f64>().ok()?));
    let series = |item: &Value| {
        let labels: BTreeMap<String, String> = item["metric"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, value)| (key.clone(), value.as_str().unwrap_or_default().to_owned()))
            .collect();
        let points = match item["values"].as_array() {
            Some(values) => values.iter().filter_map(sample).collect(),
            None => sample(&item["value"]).into_iter().collect(),
        };
        Series { name: legend_name(legend_format, &labels), labels, points }
    };
    result.iter().map(series).collect()
}

/// A series' name as Grafana gives it: `legend_format` with every
/// `{{label}}` replaced by that label's value (empty when it has none);
/// without a format, the metric and its labels.
pub fn legend_name(legend_format: Option<&str>, labels: &BTreeMap<String, String>) -> String {
    let Some(format) = legend_format.filter(|format| !format.is_empty() && *format != "__auto") else {
        let name = labels.get("__name__").map_or("", String::as_str);
        let pairs: Vec<String> = labels
            .iter()
            .filter(|(key, _)| *key != "__name__")
            .map(|(key, value)| format!("{key}=\"{value}\""))
            .collect();
        return format!("{name}{{{}}}", pairs.join(", "));
    };
    let mut name = String::new();
    let mut rest = format;
    while let Some((before, after)) = rest.split_once("{{") {
        // An unclosed `{{` is text, as in Grafana.
        let Some((label, next)) = after.split_once("}}") else { break };
        name.push_str(before);
        name.push_str(labels.get(label.trim()).map_or("", String::as_str));
        rest = next;
    }
    name.push_str(rest);
    name
}

/// The page for `dashboard`, with `data[i]` the series of its `i`th panel.
pub fn render(dashboard: &Value, data: &[Vec<Series>], window: Window) -> Page {
    // An empty window would put every sample at x = NaN.
    let window = Window { end_s: window.end_s.max(window.start_s + window.step_s.max(1.0)), ..window };
    let panels = dashboard["panels"].as_array().map_or(&[][..], Vec::as_slice);
    let grid = compacted(panels);
    let bottom_units = grid.iter().map(|[_, y, _, h]| y + h).fold(0.0, f64::max);
    let main_height_px = bottom_units * (GRID_UNIT_HEIGHT_PX + GRID_GAP_PX);
    let mut html = String::new();
    let title = escape(dashboard["title"].as_str().unwrap_or("dashboard"));
    let _ = write!(
        html,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{title}</title><style>{STYLE}</style></head>\
         <body><header><b>{title}</b><span>{} to {} UTC, step {} s</span></header>\
         <main style=\"height:{main_height_px:.0}px\">",
        clock(window.start_s),
        clock(window.end_s),
        window.step_s
    );
    for (index, (panel, cell)) in panels.iter().zip(&grid).enumerate() {
        let series = data.get(index).map_or(&[][..], Vec::as_slice);
        html.push_str(&panel_html(panel, place(*cell), series, window));
    }
    html.push_str("</main></body></html>");
    let height_px = HEADER_HEIGHT_PX + main_height_px + PAGE_PADDING_PX;
    Page { html, height_px: height_px.ceil() as u32 }
}

/// A panel's place on the page, in pixels.
#[derive(Clone, Copy)]
struct Rect {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
}

/// Grid units (x, y, w, h) to pixels.
fn place([x, y, w, h]: [f64; 4]) -> Rect {
    let column_px = (f64::from(PAGE_WIDTH_PX) - 2.0 * PAGE_PADDING_PX + GRID_GAP_PX) / GRID_COLUMNS;
    let unit_px = GRID_UNIT_HEIGHT_PX + GRID_GAP_PX;
    Rect {
        left: x * column_px,
        top: y * unit_px,
        width: w * column_px - GRID_GAP_PX,
        height: h * unit_px - GRID_GAP_PX,
    }
}

/// Every panel's `gridPos` with each panel moved up as far as it goes
/// without overlapping one placed before it: Grafana's grid compacts
/// vertically, so a gap left in the JSON does not show.
fn compacted(panels: &[Value]) -> Vec<[f64; 4]> {
    let unit = |panel: &Value, key: &str, default: f64| panel["gridPos"][key].as_f64().unwrap_or(default);
    let mut grid: Vec<[f64; 4]> =
        panels.iter().map(|p| [unit(p, "x", 0.0), unit(p, "y", 0.0), unit(p, "w", 12.0), unit(p, "h", 8.0)]).collect();
    let mut order: Vec<usize> = (0..grid.len()).collect();
    order.sort_by(|&a, &b| {
        (grid[a][1], grid[a][0]).partial_cmp(&(grid[b][1], grid[b][0])).unwrap_or(std::cmp::Ordering::Equal)
    });
    let overlaps =
        |a: [f64; 4], b: [f64; 4]| a[0] < b[0] + b[2] && b[0] < a[0] + a[2] && a[1] < b[1] + b[3] && b[1] < a[1] + a[3];
    for (placed, &index) in order.iter().enumerate() {
        loop {
            let mut up = grid[index];
            up[1] -= 1.0;
            if up[1] < 0.0 || order[..placed].iter().any(|&other| overlaps(up, grid[other])) {
                break;
            }
            grid[index] = up;
        }
    }
    grid
}

/// One panel, absolutely placed at `rect`.
fn panel_html(panel: &Value, rect: Rect, series: &[Series], window: Window) -> String {
    let kind = panel["type"].as_str().unwrap_or_default();
    let title = escape(panel["title"].as_str().unwrap_or_default());
    let Rect { left, top, width, height } = rect;
    let position = format!("left:{left:.0}px;top:{top:.0}px;width:{width:.0}px;height:{height:.0}px");
    if kind == "row" {
        return format!("<div class=\"row\" style=\"{position}\">{title}</div>");
    }
    let unit = panel["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or_default();
    let inner = Rect { left: 0.0, top: 0.0, width: width - 2.0 * PANEL_PADDING_PX, height: height - TITLE_HEIGHT_PX };
    let body = match kind {
        "timeseries" => timeseries_html(series, unit, inner, window),
        "stat" => stat_html(series, unit, inner, window),
        "table" => table_html(series, unit),
        other => format!("<p>panel type {} is not drawn here</p>", escape(other)),
    };
    let kind = escape(kind);
    format!("<section data-type=\"{kind}\" style=\"{position}\"><h2>{title}</h2>{body}</section>")
}

/// A line chart with axes and a legend filling `rect`.
fn timeseries_html(series: &[Series], unit: &str, rect: Rect, window: Window) -> String {
    let names: f64 = series.iter().map(|one| one.name.chars().count() as f64 * CHARACTER_WIDTH_PX + 33.0).sum();
    let legend_lines = (names / rect.width).ceil().max(1.0);
    let height = rect.height - legend_lines * LEGEND_LINE_HEIGHT_PX - PANEL_PADDING_PX;
    let plot = Rect {
        left: AXIS_LEFT_PX,
        top: 6.0,
        width: rect.width - AXIS_LEFT_PX - 8.0,
        height: height - 6.0 - AXIS_BOTTOM_PX,
    };
    let (low, high) = value_range(series, true);
    // Ticks round in the unit shown: 10 MiB apart rather than 10 MB.
    let scale = if unit == "bytes" {
        1024_f64.powf(high.abs().max(low.abs()).log(1024.0).floor().clamp(0.0, 4.0))
    } else {
        1.0
    };
    let ticks: Vec<f64> = value_ticks(low / scale, high / scale).into_iter().map(|tick| tick * scale).collect();
    let (low, high) = (ticks.first().copied().unwrap_or(low), ticks.last().copied().unwrap_or(high));
    let y = |value: f64| plot.top + plot.height * (1.0 - (value - low) / (high - low));
    let mut svg = format!("<svg width=\"{:.0}\" height=\"{height:.0}\">", rect.width);
    for tick in &ticks {
        let (at, label) = (y(*tick), escape(&format_value(*tick, unit)));
        let _ = write!(
            svg,
            "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{at:.1}\" y2=\"{at:.1}\" stroke=\"#2c3235\"/>",
            plot.left,
            plot.left + plot.width
        );
        let _ =
            write!(svg, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>", plot.left - 6.0, at + 4.0);
    }
    for tick in time_ticks(window) {
        let at = plot.left + plot.width * (tick - window.start_s) / (window.end_s - window.start_s);
        // A label at the very edge would run into the y axis' labels or out of the panel.
        if at < plot.left + TIME_LABEL_HALF_WIDTH_PX || at > plot.left + plot.width - TIME_LABEL_HALF_WIDTH_PX {
            continue;
        }
        let _ =
            write!(svg, "<text x=\"{at:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>", height - 4.0, clock(tick));
    }
    let mut legend = String::from("<ul>");
    for (index, one) in series.iter().enumerate() {
        let colour = PALETTE[index % PALETTE.len()];
        svg.push_str(&lines(one, colour, plot, window, (low, high)));
        let _ = write!(legend, "<li><span style=\"background:{colour}\"></span>{}</li>", escape(&one.name));
    }
    format!("{svg}</svg>{legend}</ul>")
}

/// `series` as polylines in `plot`, one per run of finite samples without
/// a missing step (a gap or a NaN breaks the line, as in Grafana); a lone
/// sample is a dot.
fn lines(series: &Series, colour: &str, plot: Rect, window: Window, (low, high): (f64, f64)) -> String {
    let x = |time: f64| plot.left + plot.width * (time - window.start_s) / (window.end_s - window.start_s);
    let y = |value: f64| plot.top + plot.height * (1.0 - (value - low) / (high - low));
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut last_time = f64::NEG_INFINITY;
    for &(time, value) in series.points.iter().filter(|(time, value)| time.is_finite() && value.is_finite()) {
        if time - last_time > 1.5 * window.step_s || runs.is_empty() {
            runs.push(Vec::new());
        }
        runs.last_mut().into_iter().for_each(|run| run.push((x(time), y(value))));
        last_time = time;
    }
    let mut svg = String::new();
    for run in runs {
        if let [(cx, cy)] = run[..] {
            let _ = write!(svg, "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"2\" fill=\"{colour}\"/>");
            continue;
        }
        let points: Vec<String> = run.iter().map(|(px, py)| format!("{px:.1},{py:.1}")).collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
            points.join(" ")
        );
    }
    svg
}

/// The last value of the first series, large, over its sparkline.
fn stat_html(series: &[Series], unit: &str, rect: Rect, window: Window) -> String {
    let Some(first) = series.first() else { return "<div class=\"stat\">No data</div>".into() };
    let Some(last) = first.points.iter().rev().map(|&(_, value)| value).find(|value| value.is_finite()) else {
        return "<div class=\"stat\">No data</div>".into();
    };
    let colour = if last >= STAT_RED_FROM { "#f2495c" } else { "#73bf69" };
    // The sparkline spans the series' own range in the lowest third, under
    // the number, as Grafana's does; a constant series runs through its middle.
    let (low, high) = value_range(std::slice::from_ref(first), false);
    let height = rect.height - PANEL_PADDING_PX;
    let plot = Rect { left: 0.0, top: height * 2.0 / 3.0, width: rect.width, height: height / 3.0 - 4.0 };
    let sparkline = lines(first, colour, plot, window, (low, high));
    format!(
        "<svg width=\"{:.0}\" height=\"{height:.0}\" style=\"position:absolute;left:8px;opacity:.5\">{sparkline}</svg>\
         <div class=\"stat\" style=\"color:{colour};line-height:{:.0}px\">{}</div>",
        rect.width,
        height * 0.8,
        escape(&format_value(last, unit))
    )
}

/// The last value of every series with all its labels, one row each.
fn table_html(series: &[Series], unit: &str) -> String {
    let mut columns: Vec<&String> = series.iter().flat_map(|one| one.labels.keys()).collect();
    columns.sort();
    columns.dedup();
    let mut html = String::from("<table><tr>");
    columns.iter().for_each(|column| {
        let _ = write!(html, "<th>{}</th>", escape(column));
    });
    html.push_str("<th>Value</th></tr>");
    for one in series {
        html.push_str("<tr>");
        for column in &columns {
            let _ = write!(html, "<td>{}</td>", escape(one.labels.get(*column).map_or("", String::as_str)));
        }
        let last = one.points.last().map_or(String::new(), |&(_, value)| format_value(value, unit));
        let _ = write!(html, "<td>{}</td></tr>", escape(&last));
    }
    html + "</table>"
}

/// The smallest and largest finite value of `series`, with zero in the
/// range if `with_zero`; never empty: a single value is the middle of one
/// either side (or the bottom of `0..1` with zero).
fn value_range(series: &[Series], with_zero: bool) -> (f64, f64) {
    let values =
        series.iter().flat_map(|one| one.points.iter().map(|&(_, value)| value)).filter(|value| value.is_finite());
    let start = if with_zero { (0.0, 0.0) } else { (f64::INFINITY, f64::NEG_INFINITY) };
    let (low, high) = values.fold(start, |(low, high): (f64, f64), value| (low.min(value), high.max(value)));
    if !(low.is_finite() && high.is_finite()) {
        return (0.0, 1.0);
    }
    if high - low > f64::EPSILON * high.abs().max(1.0) {
        (low, high)
    } else if with_zero {
        (low, low + 1.0)
    } else {
        (low - 1.0, high + 1.0)
    }
}

/// Round ticks (1, 2 or 5 times a power of ten apart) covering `low..=high`.
fn value_ticks(low: f64, high: f64) -> Vec<f64> {
    let rough = (high - low) / 4.0;
    let magnitude = 10_f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|step| *step >= rough).unwrap_or(rough);
    let first = (low / step).floor();
    let last = (high / step).ceil();
    (0..=(last - first) as u32).map(|index| (first + f64::from(index)) * step).collect()
}

/// Times on round seconds or minutes, at most six across `window`.
fn time_ticks(window: Window) -> Vec<f64> {
    const STEPS_S: [f64; 13] = [1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0];
    let span = window.end_s - window.start_s;
    let step = STEPS_S.iter().copied().find(|step| span / step <= 6.0).unwrap_or(3600.0);
    let first = (window.start_s / step).ceil();
    (0..).map(|index| (first + f64::from(index)) * step).take_while(|time| *time <= window.end_s).collect()
}

/// `HH:MM:SS` (UTC) of a Unix time.
fn clock(time_s: f64) -> String {
    let seconds = time_s.rem_euclid(86_400.0) as u64;
    format!("{:02}:{:02}:{:02}", seconds / 3600, seconds / 60 % 60, seconds % 60)
}

/// `value` in a Grafana unit (`bytes`, `percentunit`, `s`, `reqps`, ...);
/// any other unit as Grafana's `short` (K, Mil, Bil).
fn format_value(value: f64, unit: &str) -> String {
    match unit {
        "percentunit" => format!("{}%", plain(value * 100.0)),
        "percent" => format!("{}%", plain(value)),
        "bytes" => scaled(value, 1024.0, &["B", "KiB", "MiB", "GiB", "TiB"]),
        "s" if value.abs() < 1e-3 && value != 0.0 => format!("{} µs", plain(value * 1e6)),
        "s" if value.abs() < 1.0 && value != 0.0 => format!("{} ms", plain(value * 1e3)),
        "s" => format!("{} s", plain(value)),
        "reqps" => format!("{} req/s", short(value)),
        "ops" => format!("{} ops/s", short(value)),
        _ => short(value),
    }
}

fn short(value: f64) -> String {
    scaled(value, 1000.0, &["", "K", "Mil", "Bil"])
}

/// `value` in the largest of `units` (each `base` times the one before)
/// that keeps it at 1 or more.
fn scaled(value: f64, base: f64, units: &[&str]) -> String {
    let mut index = 0;
    while index + 1 < units.len() && value.abs() >= base.powi(index as i32 + 1) {
        index += 1;
    }
    let number = plain(value / base.powi(index as i32));
    match units.get(index).copied().unwrap_or_default() {
        "" => number,
        unit => format!("{number} {unit}"),
    }
}

/// `value` with three significant digits, without trailing zeros.
fn plain(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return if value.is_finite() { "0".into() } else { value.to_string() };
    }
    let decimals = (2.0 - value.abs().log10().floor()).clamp(0.0, 9.0) as usize;
    let text = format!("{value:.decimals$}");
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_owned() } else { text }
}

/// `text` safe inside HTML elements and quoted attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with a rendered `page` of `dashboard`: a non-row panel's
/// title not shown exactly once, a timeseries panel without a line of two
/// points or more, a `NaN` inside an SVG. Empty when the page is whole.
pub fn structural_problems(page: &str, dashboard: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if page.split("<svg").skip(1).any(|svg| svg.split("</svg>").next().unwrap_or_default().contains("NaN")) {
        problems.push("NaN in an SVG".to_owned());
    }
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        let kind = panel["type"].as_str().unwrap_or_default();
        if kind == "row" {
            continue;
        }
        let heading = format!("<h2>{}</h2>", escape(panel["title"].as_str().unwrap_or_default()));
        let shown = page.matches(&heading).count();
        if shown != 1 {
            problems.push(format!("{heading} shown {shown} times"));
        }
        let section = page.split("<section ").find(|section| section.contains(&heading)).unwrap_or_default();
        if kind == "timeseries" && longest_polyline(section) < 2 {
            problems.push(format!("{heading}: no line of two points or more"));
        }
    }
    problems
}

/// The most points any `<polyline` in `html` has.
fn longest_polyline(html: &str) -> usize {
    html.split("<polyline")
        .skip(1)
        .filter_map(|tag| tag.split("points=\"").nth(1)?.split('"').next())
        .map(|points| points.split_whitespace().count())
        .max()
        .unwrap_or(0)
}
