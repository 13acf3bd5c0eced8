//! The run as a picture, drawn the way Jepsen draws its rate and latency
//! graphs: ok/fail/info completions per second on top, latency below (ok
//! ops as per-second p50/p95/max lines, fail and info ops as points), time
//! on the x axis, each nemesis phase shaded and labeled, each re-creation
//! of a group (from its first delete to its creation) marked by a band at
//! the bottom, and node exits marked. SVG only (plotters' SVG backend, no
//! system libraries).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::jepsen::error::Error;
use crate::jepsen::history::{OpRecord, seconds};
use crate::jepsen::nemesis::{Fault, PhaseKind};
use crate::jepsen::report::Report;

/// Picture size (px).
const SIZE: (u32, u32) = (1400, 900);
/// Jepsen's colours for ok, info and fail.
const OK: RGBColor = RGBColor(0x81, 0xBF, 0xFC);
const INFO: RGBColor = RGBColor(0xFF, 0xA4, 0x00);
const FAIL: RGBColor = RGBColor(0xFF, 0x1E, 0x90);
const PARTITION: RGBColor = RGBColor(0x90, 0x90, 0x90);
const CRASH: RGBColor = RGBColor(0xE0, 0x60, 0x60);
const PAUSE: RGBColor = RGBColor(0x9A, 0x70, 0xD0);
const WIPE: RGBColor = RGBColor(0xA0, 0x40, 0x20);
const RECREATE: RGBColor = RGBColor(0x20, 0x60, 0xC0);
const HEAL: RGBColor = RGBColor(0x70, 0xC0, 0x70);

fn failed(error: impl std::fmt::Debug) -> Error {
    Error::new(format!("drawing the picture: {error:?}"))
}

/// Draw `report`'s run into an SVG file at `path`.
pub fn draw(path: &Path, report: &Report, ops: &[OpRecord]) -> Result<(), Error> {
    // The workload's end: the final reads after it are in the history, not in the graphs.
    let end_s = report.phases.last().map_or(1.0, |phase| phase.end_s);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(failed)?;
    let title = format!(
        "cohort-jepsen seed {}: {} ok, {} fail, {} info; linearizable {}; lost acknowledged writes {}",
        report.seed,
        report.ops.ok,
        report.ops.fail,
        report.ops.info,
        report.linearizable.word(),
        report.lost_acked_writes
    );
    let root = root.titled(&title, ("sans-serif", 20)).map_err(failed)?;
    let (top, bottom) = root.split_vertically(SIZE.1 as i32 * 45 / 100);
    rates(&top, report, ops, end_s)?;
    latencies(&bottom, report, ops, end_s)?;
    root.present().map_err(failed)?;
    Ok(())
}

fn phase_colour(kind: &PhaseKind) -> Option<RGBColor> {
    match kind {
        PhaseKind::Healthy => None,
        PhaseKind::FinalHeal => Some(HEAL),
        PhaseKind::Fault(Fault::Kill { .. }) => Some(CRASH),
        PhaseKind::Fault(Fault::Pause { .. }) => Some(PAUSE),
        PhaseKind::Fault(Fault::Wipe { .. }) => Some(WIPE),
        PhaseKind::Fault(_) => Some(PARTITION),
    }
}

/// Counts per one-second bucket of ops that match `keep`.
fn per_second(ops: &[OpRecord], end_s: f64, keep: impl Fn(&OpRecord) -> bool) -> Vec<(f64, f64)> {
    let mut buckets = vec![0u32; end_s.ceil() as usize];
    for op in ops.iter().filter(|op| keep(op)) {
        if let Some(bucket) = buckets.get_mut(seconds(op.complete_ns) as usize) {
            *bucket += 1;
        }
    }
    buckets.iter().enumerate().map(|(at, count)| (at as f64 + 0.5, f64::from(*count))).collect()
}

fn rates(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    report: &Report,
    ops: &[OpRecord],
    end_s: f64,
) -> Result<(), Error> {
    let ok = per_second(ops, end_s, OpRecord::is_ok);
    let info = per_second(ops, end_s, OpRecord::is_info);
    let fail = per_second(ops, end_s, OpRecord::is_fail);
    let top = ok.iter().chain(&info).chain(&fail).map(|(_, count)| *count).fold(1.0, f64::max) * 1.35;
    let mut chart = ChartBuilder::on(area)
        .caption("throughput (completions per second)", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..end_s, 0f64..top)
        .map_err(failed)?;
    chart.configure_mesh().x_desc("time (s)").y_desc("ops/s").draw().map_err(failed)?;
    shade(&mut chart, report, 0.0, top, true)?;
    chart
        .draw_series(LineSeries::new(ok.iter().copied(), OK.stroke_width(2)))
        .map_err(failed)?
        .label("ok")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], OK.stroke_width(2)));
    // info and fail as bars of the seconds that had any, stacked info then fail.
    for (points, colour, name, base) in [(&info, INFO, "info", None), (&fail, FAIL, "fail", Some(&info))] {
        let bars = points.iter().enumerate().filter(|(_, (_, count))| *count > 0.0).map(|(at, (x, count))| {
            let below = base.map_or(0.0, |base| base[at].1);
            Rectangle::new([(x - 0.45, below), (x + 0.45, below + count)], colour.mix(0.8).filled())
        });
        chart
            .draw_series(bars)
            .map_err(failed)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 20, y + 4)], colour.mix(0.8).filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(failed)?;
    Ok(())
}

fn latencies(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    report: &Report,
    ops: &[OpRecord],
    end_s: f64,
) -> Result<(), Error> {
    let latency_ms = |op: &OpRecord| (op.latency_s() * 1000.0).max(0.1);
    let top = ops.iter().map(latency_ms).fold(10.0, f64::max) * 3.0;
    let mut chart = ChartBuilder::on(area)
        .caption("latency (ms, log): ok p50 / p95 / max per second; fail and info ops as points", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..end_s, (0.1f64..top).log_scale())
        .map_err(failed)?;
    chart.configure_mesh().x_desc("time (s)").y_desc("latency (ms)").draw().map_err(failed)?;
    shade(&mut chart, report, 0.1, top, false)?;
    let mut buckets: Vec<Vec<f64>> = vec![Vec::new(); end_s.ceil() as usize];
    for op in ops.iter().filter(|op| op.is_ok()) {
        if let Some(bucket) = buckets.get_mut(seconds(op.complete_ns) as usize) {
            bucket.push(latency_ms(op));
        }
    }
    for bucket in &mut buckets {
        bucket.sort_by(f64::total_cmp);
    }
    // Per quantile, one line per run of consecutive seconds with ok ops, so
    // an outage shows as a gap, not as a line across it.
    let quantile = |q: f64| {
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for (at, bucket) in buckets.iter().enumerate() {
            if let Some(last) = runs.last_mut() {
                if !bucket.is_empty() {
                    last.push((at as f64 + 0.5, bucket[((bucket.len() - 1) as f64 * q) as usize]));
                } else if !last.is_empty() {
                    runs.push(Vec::new());
                }
            }
        }
        runs
    };
    let lines = [
        (0.5, "ok p50", OK.mix(1.0)),
        (0.95, "ok p95", RGBColor(0x30, 0x70, 0xC0).mix(1.0)),
        (1.0, "ok max", BLACK.mix(0.6)),
    ];
    for (q, name, colour) in lines {
        for (index, run) in quantile(q).into_iter().enumerate() {
            let series = chart.draw_series(LineSeries::new(run, colour.stroke_width(2))).map_err(failed)?;
            if index == 0 {
                series
                    .label(name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
            }
        }
    }
    for (keep, colour, name) in
        [(OpRecord::is_info as fn(&OpRecord) -> bool, INFO, "info"), (OpRecord::is_fail, FAIL, "fail")]
    {
        chart
            .draw_series(
                ops.iter()
                    .filter(|op| keep(op) && seconds(op.complete_ns) < end_s)
                    .map(|op| Circle::new((seconds(op.complete_ns), latency_ms(op)), 2, colour.filled())),
            )
            .map_err(failed)?
            .label(name)
            .legend(move |(x, y)| Circle::new((x + 10, y), 3, colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(failed)?;
    Ok(())
}

type Chart<'a, 'b, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>;

/// Shade each phase, label it (on the rate chart), and mark node exits.
fn shade<Y>(chart: &mut Chart<'_, '_, Y>, report: &Report, low: f64, high: f64, labels: bool) -> Result<(), Error>
where
    Y: Ranged<ValueType = f64>,
{
    for (index, phase) in report.phases.iter().enumerate() {
        if let Some(colour) = phase_colour(&phase.kind) {
            let band = Rectangle::new([(phase.start_s, low), (phase.end_s, high)], colour.mix(0.18).filled());
            chart.draw_series(std::iter::once(band)).map_err(failed)?;
        }
        if labels && phase.kind != PhaseKind::Healthy {
            // Three rows, so labels of short neighbouring phases do not overlap.
            let row = 0.97 - 0.06 * (index % 3) as f64;
            let text = Text::new(phase.label.clone(), (phase.start_s + 0.3, high * row), ("sans-serif", 12));
            chart.draw_series(std::iter::once(text)).map_err(failed)?;
        }
    }
    // Re-creations on the rate chart only (its y axis is linear).
    for (index, recreation) in report.recreations.iter().enumerate().filter(|_| labels) {
        let (start_s, end_s) = (seconds(recreation.invoke_ns), seconds(recreation.complete_ns));
        let strip = low + (high - low) * 0.04;
        let band = Rectangle::new([(start_s, low), (end_s.max(start_s + 0.2), strip)], RECREATE.mix(0.6).filled());
        chart.draw_series(std::iter::once(band)).map_err(failed)?;
        let text = Text::new(
            format!("re-create g{}", recreation.key),
            // Two rows, so labels of neighbouring re-creations do not overlap.
            (start_s, low + (high - low) * (0.06 + 0.05 * (index % 2) as f64)),
            ("sans-serif", 12).into_font().color(&RECREATE),
        );
        chart.draw_series(std::iter::once(text)).map_err(failed)?;
    }
    for exit in report.node_exits.iter().filter(|exit| !exit.by_nemesis) {
        let line = PathElement::new(vec![(exit.at_s, low), (exit.at_s, high)], FAIL.stroke_width(2));
        chart.draw_series(std::iter::once(line)).map_err(failed)?;
        if labels {
            let code = exit.code.map_or_else(|| "signal".to_string(), |code| format!("exit {code}"));
            let text = Text::new(
                format!("n{} {code}", exit.node),
                (exit.at_s + 0.3, high * 0.75),
                ("sans-serif", 12).into_font().color(&FAIL),
            );
            chart.draw_series(std::iter::once(text)).map_err(failed)?;
        }
    }
    Ok(())
}
