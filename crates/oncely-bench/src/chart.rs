//! SVG charts (plotters' SVG backend, no font or system dependency): throughput vs.
//! concurrency and vs. batch size, one panel per database.

use crate::cells::Mode;
use crate::report::Report;
use anyhow::{Result, anyhow};
use plotters::prelude::*;
use std::path::Path;

/// One colour a series (the long-horizon chart has four: two PostgreSQL layouts, MariaDB,
/// SQLite).
const COLORS: [RGBColor; 4] = [
    RGBColor(90, 90, 90),
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
];

fn backends(report: &Report) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for c in &report.cells {
        if !seen.contains(&c.backend) {
            seen.push(c.backend.clone());
        }
    }
    seen
}

type Series = (&'static str, Vec<(f64, f64)>);

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> Result<()> {
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut xmax, mut ymin, mut ymax) = (1.0f64, f64::MAX, 1.0f64);
    for &(x, y) in points {
        xmax = xmax.max(x);
        ymin = ymin.min(y);
        ymax = ymax.max(y);
    }
    if ymin == f64::MAX {
        return Ok(());
    }
    let err = |e: String| anyhow!("drawing a chart: {e}");
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (0.8f64..xmax * 1.25).log_scale(),
            ((ymin * 0.6).max(1.0)..ymax * 1.6).log_scale(),
        )
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(|e| err(e.to_string()))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        if pts.is_empty() {
            continue;
        }
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| err(e.to_string()))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(|e| err(e.to_string()))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    Ok(())
}

fn draw(
    report: &Report,
    path: &Path,
    x_desc: &str,
    series: impl Fn(&str) -> Vec<Series>,
) -> Result<()> {
    let backends = backends(report);
    let n = backends.len().max(1);
    let root = SVGBackend::new(path, (420 * n as u32, 380)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow!("drawing a chart: {e}"))?;
    for (area, backend) in root.split_evenly((1, n)).iter().zip(&backends) {
        panel(area, backend, x_desc, "messages/s (log)", &series(backend))?;
    }
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

fn points(
    report: &Report,
    backend: &str,
    pick: impl Fn(Mode, usize, usize) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = report
        .cells
        .iter()
        .filter(|c| c.backend == backend)
        .filter_map(|c| {
            pick(c.spec.mode, c.spec.batch, c.spec.concurrency).map(|x| (x, c.msgs_per_sec))
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

/// Messages/s vs. consumers, per-message mode: plain, oncely, raw SQL.
pub(crate) fn concurrency(report: &Report, path: &Path) -> Result<()> {
    draw(report, path, "consumers (log)", |backend| {
        [
            ("plain consumer", Mode::Plain),
            ("oncely per-message", Mode::Oncely),
            ("raw SQL", Mode::Raw),
        ]
        .into_iter()
        .map(|(name, mode)| {
            let pts = points(report, backend, |m, b, c| {
                (m == mode && b == 1).then_some(c as f64)
            });
            (name, pts)
        })
        .collect()
    })
}

/// Messages/s vs. batch size, one consumer: oncely and raw SQL (B = 1 is per-message mode).
pub(crate) fn batch(report: &Report, path: &Path) -> Result<()> {
    draw(
        report,
        path,
        "batch size B (log), one consumer",
        |backend| {
            [
                ("plain consumer (B=1)", Mode::Plain),
                ("oncely", Mode::Oncely),
                ("raw SQL", Mode::Raw),
            ]
            .into_iter()
            .map(|(name, mode)| {
                let pts = points(report, backend, |m, b, c| {
                    (m == mode && c == 1).then_some(b as f64)
                });
                (name, pts)
            })
            .collect()
        },
    )
}

/// The long-horizon mode: msgs/s and WAL bytes per message against inbox rows, one line
/// per layout (the empty inbox drawn at 1 row, the log scale has no 0).
pub(crate) fn horizon(report: &crate::horizon::HorizonReport, path: &Path) -> Result<()> {
    let mut layouts: Vec<&str> = Vec::new();
    for c in &report.cells {
        if !layouts.contains(&c.layout.as_str()) {
            layouts.push(&c.layout);
        }
    }
    let series = |value: &dyn Fn(&crate::horizon::HorizonCell) -> Option<f64>| -> Vec<Series> {
        layouts
            .iter()
            .map(|layout| {
                let pts = report
                    .cells
                    .iter()
                    .filter(|c| c.layout == *layout)
                    .filter_map(|c| Some(((c.inbox_rows as f64).max(1.0), value(c)?)))
                    .collect();
                (leak(layout), pts)
            })
            .collect()
    };
    let root = SVGBackend::new(path, (900, 400)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow!("drawing a chart: {e}"))?;
    let areas = root.split_evenly((1, 2));
    panel(
        &areas[0],
        "messages/s",
        "inbox rows (log)",
        "messages/s (log)",
        &series(&|c| Some(c.msgs_per_sec)),
    )?;
    panel(
        &areas[1],
        "WAL bytes per message",
        "inbox rows (log)",
        "bytes (log)",
        &series(&|c| c.wal_bytes_per_msg),
    )?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

/// A series name for the chart's legend (a handful of layout names per run).
fn leak(name: &str) -> &'static str {
    match name {
        "postgres" => "postgres",
        "postgres_partitioned" => "postgres_partitioned",
        "mariadb" => "mariadb",
        "sqlite" => "sqlite",
        _ => "other",
    }
}
