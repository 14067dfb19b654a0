//! The overview's charts over time, from the tables' own timestamps (no metrics system):
//! messages applied (inbox `received_at`), conflicts (dead letters with reason `conflict`)
//! and dead letters (`dead_lettered_at`), per minute over the last hour and per hour over the
//! last day. Server-rendered SVG (bars with a `<title>` each: no script); the hourly numbers
//! also as a table. Duplicates are not charted: no table records a duplicate delivery.

use crate::html::{count, table, when};
use crate::{Console, actions};
use maud::{Markup, html};
use oncely_ops::browse::{Timeline, per_bucket};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 3_600_000;

/// The series: (timeline, CSS class, label, count key prefix).
const SERIES: [(Timeline, &str, &str, &str); 3] = [
    (Timeline::Claims, "applied", "applied", "claimed"),
    (Timeline::Conflicts, "conflict", "conflicts", "conflict"),
    (Timeline::DeadLetters, "dead", "dead letters", "dead"),
];

/// One window: `buckets` buckets of `size` ms, the last one holding now.
struct Window {
    size: i64,
    buckets: i64,
    name: &'static str,
}

/// Counts per bucket of each series, oldest bucket first.
async fn counts(c: &Console, w: &Window, since: i64) -> oncely_core::Result<Vec<Vec<i64>>> {
    let ops = &c.inner.ops;
    let mut out = Vec::new();
    for (timeline, ..) in SERIES {
        let rows = per_bucket(ops, timeline, since, w.size).await?;
        out.push(
            (0..w.buckets)
                .map(|i| {
                    let at = since + i * w.size;
                    rows.iter().find(|(t, _)| *t == at).map_or(0, |(_, n)| *n)
                })
                .collect(),
        );
    }
    Ok(out)
}

/// `YYYY-MM-DD HH:MM` (UTC) of a unix-ms time.
fn minute(ms: i64) -> String {
    let mut text = when(ms);
    text.truncate(16);
    text
}

/// One SVG: a band of bars per series, each with its own scale (its maximum labelled).
fn svg(w: &Window, since: i64, data: &[Vec<i64>]) -> Markup {
    let (width, band, left) = (720i64, 56i64, 110i64);
    let bar = (width - left) as f64 / w.buckets as f64;
    let height = band * SERIES.len() as i64 + 18;
    let unit = if w.size == MINUTE { "min" } else { "h" };
    let tenth = |v: f64| format!("{v:.1}");
    html! {
        svg class="chart" id={ "chart-" (w.name) } viewBox={ "0 0 " (width) " " (height) }
            width=(width) height=(height) role="img" {
            @for (s, ((_, class, label, _), values)) in SERIES.iter().zip(data).enumerate() {
                @let top = s as i64 * band;
                @let max = values.iter().copied().max().unwrap_or(0);
                @let total: i64 = values.iter().sum();
                @let y = top + band - 4;
                text x="0" y=(top + 20) class="label" { (label) }
                text x="0" y=(top + 36) class="axis" { "max " (max) "/" (unit) ", Σ " (total) }
                line x1=(left) x2=(width) y1=(y) y2=(y) class="base" {}
                @for (i, &n) in values.iter().enumerate() {
                    @if n != 0 {
                        @let h = ((band - 12) as f64 * n as f64 / max.max(1) as f64).max(1.0);
                        @let x = left as f64 + i as f64 * bar;
                        rect class=(class) x=(tenth(x)) y=(tenth(y as f64 - h))
                            width=(tenth((bar - 1.0).max(1.0))) height=(tenth(h)) {
                            title { (minute(since + i as i64 * w.size)) ": " (n) " " (label) }
                        }
                    }
                }
            }
            text x=(left) y=(height - 2) class="axis" { (minute(since)) }
            text x=(width) y=(height - 2) class="axis end" {
                (minute(since + (w.buckets - 1) * w.size)) " UTC"
            }
        }
    }
}

/// The charts section of the overview.
pub(crate) async fn section(c: &Console) -> Markup {
    let now = oncely_sql::clock::now_ms();
    let minutes = Window {
        size: MINUTE,
        buckets: 60,
        name: "minutes",
    };
    let hours = Window {
        size: HOUR,
        buckets: 24,
        name: "hours",
    };
    let since_min = now - now % MINUTE - 59 * MINUTE;
    let since_hour = now - now % HOUR - 23 * HOUR;
    let (per_min, per_hour) = match tokio::try_join!(
        counts(c, &minutes, since_min),
        counts(c, &hours, since_hour)
    ) {
        Ok(x) => x,
        Err(e) => return html! { p class="err" { (actions::db(e).0) } },
    };
    let rows: Vec<Vec<Markup>> = (0..hours.buckets)
        .rev()
        .map(|i| {
            let h = since_hour + i * HOUR;
            let mut row = vec![html! { (minute(h)) }];
            for (s, (_, _, _, key)) in SERIES.iter().enumerate() {
                row.push(count(&format!("{key}_hour:{h}"), per_hour[s][i as usize]));
            }
            row
        })
        .collect();
    html! {
        h2 { "Over time (UTC)" }
        p class="muted" id="chart-note" {
            "From the tables' own timestamps: " b { "applied" } " = ids claimed in the inbox ("
            code { "received_at" } "), " b { "conflicts" } " = dead letters with reason "
            code { "conflict" } ", " b { "dead letters" } " = rows first seen ("
            code { "dead_lettered_at" } "). " b { "Duplicates" } " are not shown: no table \
            records them (the inbox keeps the first copy only); the metric "
            code { "oncely_deliveries_total{outcome=\"duplicate\"}" } " counts them. Ids pruned \
            from the inbox no longer count as applied."
        }
        h3 { "Last 60 minutes, per minute" }
        (svg(&minutes, since_min, &per_min))
        h3 { "Last 24 hours, per hour" }
        (svg(&hours, since_hour, &per_hour))
        (table("timeline", &["hour", "applied", "conflicts", "dead letters"], &rows))
    }
}
