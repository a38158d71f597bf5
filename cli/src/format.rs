//! Output: numbers and durations as people read them, and JSON lines.

use serde::Serialize;
use std::io::{self, Write};
use std::time::Duration;

/// `hh:mm:ss.mmm`, the classic N-Queens table's time column (hours grow past 99).
pub fn hms(d: Duration) -> String {
    let ms = d.as_millis();
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    format!(
        "{h:02}:{:02}:{:02}.{:03}",
        rest / 60_000,
        rest / 1000 % 60,
        rest % 1000
    )
}

/// A count with thousands separators: `14,772,512`.
pub fn thousands(x: u128) -> String {
    let digits = x.to_string();
    let mut out = String::with_capacity(digits.len() * 4 / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A count and its noun: `1 worker`, `3 workers` (`noun` takes an `s`).
pub fn counted(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{} {noun}s", thousands(n as u128)),
    }
}

/// A rate with an SI prefix: `1.73 G`.
pub fn si(x: f64) -> String {
    let (v, p) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(s, _)| x >= *s)
        .map_or((x, ""), |(s, p)| (x / s, p));
    format!("{v:.2} {p}")
}

/// A duration as a person says it: `2d 3h 14m`, `3h 5m`, `4m 12s`, `9.3s`.
/// Two units at most: past a minute, precision below the second unit is noise.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, minutes, secs) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match () {
        () if days > 0 => format!("{days}d {hours}h {minutes}m"),
        () if hours > 0 => format!("{hours}h {minutes}m"),
        () if minutes > 0 => format!("{minutes}m {secs}s"),
        () => format!("{:.1}s", d.as_secs_f64()),
    }
}

/// Serde: an integer as a decimal string. JSON readers such as jq and
/// JavaScript hold every number as a double, exact only up to 2^53, so
/// ids, counts and totals (64 and 128 bits) go out as strings.
pub fn dec<S: serde::Serializer, T: std::fmt::Display>(x: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(x)
}

/// Serde: [`dec`] for an optional integer (`null` when absent).
pub fn dec_opt<S: serde::Serializer, T: std::fmt::Display>(
    x: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => s.collect_str(x),
        None => s.serialize_none(),
    }
}

/// A Unix time in milliseconds as UTC, `2026-11-23T18:40:05Z`.
pub fn utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Now, as Unix milliseconds.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One JSON object on its own line.
pub fn json_line(out: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    writeln!(
        out,
        "{}",
        serde_json::to_string(value).expect("our types serialize")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(hms(Duration::from_millis(0)), "00:00:00.000");
        assert_eq!(hms(Duration::from_millis(3_723_045)), "01:02:03.045");
        assert_eq!(hms(Duration::from_secs(100 * 3600)), "100:00:00.000");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(14_772_512), "14,772,512");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(si(1.73e9), "1.73 G");
        assert_eq!(si(12.0), "12.00 ");
        let d = |s: u64| human_duration(Duration::from_secs(s));
        assert_eq!(d(2 * 86_400 + 3 * 3600 + 14 * 60 + 59), "2d 3h 14m");
        assert_eq!(d(3 * 3600 + 5 * 60), "3h 5m");
        assert_eq!(d(4 * 60 + 12), "4m 12s");
        assert_eq!(human_duration(Duration::from_millis(9_340)), "9.3s");
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_795_459_205_000), "2026-11-23T18:40:05Z");
    }

    #[test]
    fn big_integers_serialize_as_strings() {
        #[derive(serde::Serialize)]
        struct T {
            #[serde(serialize_with = "dec")]
            a: u128,
            #[serde(serialize_with = "dec_opt")]
            b: Option<u64>,
            #[serde(serialize_with = "dec_opt")]
            c: Option<u64>,
        }
        let t = T {
            a: u128::MAX,
            b: Some(u64::MAX),
            c: None,
        };
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            format!(r#"{{"a":"{}","b":"{}","c":null}}"#, u128::MAX, u64::MAX)
        );
    }
}

/// The width text is wrapped to: `COLUMNS` when set, else the terminal's
/// when standard output is one, else none (a pipe or a file gets one line
/// per record, for grep).
pub fn text_width() -> Option<usize> {
    use std::io::IsTerminal;
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    columns.or_else(|| io::stdout().is_terminal().then(terminal_columns).flatten())
}

/// The terminal's width.
fn terminal_columns() -> Option<usize> {
    terminal_size::terminal_size().map(|(w, _)| usize::from(w.0))
}

/// Each line of `text` wrapped at spaces to `width` columns, continuation
/// lines indented by `indent` spaces (a word longer than the line stays
/// whole). `None`: unchanged.
pub fn wrap(text: &str, width: Option<usize>, indent: usize) -> String {
    let Some(width) = width.filter(|&w| w > indent + 10) else {
        return text.to_string();
    };
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let mut col = 0;
        for (k, word) in line.split(' ').enumerate() {
            let len = word.chars().count();
            if k > 0 && col > indent && col + 1 + len > width {
                out.push('\n');
                out.extend(std::iter::repeat_n(' ', indent));
                col = indent;
            } else if k > 0 {
                // Runs of spaces (columns, an indent) stay as they are.
                out.push(' ');
                col += 1;
            }
            out.push_str(word);
            col += len;
        }
    }
    out
}

#[cfg(test)]
mod wrap_tests {
    use super::*;

    #[test]
    fn lines_wrap_at_spaces_with_an_indent_and_fit() {
        let line =
            "2026-11-23T19:43:20Z job 1 N=27 frame: running 24.3% (47/194 tasks), rate 32.9 \
                    tasks/s, total so far 234,907,967,154,122,528, unique 29,363,495,934,315,694, \
                    1 worker, ETA 4.5s";
        let wrapped = wrap(line, Some(80), 2);
        assert!(wrapped.lines().count() >= 3, "{wrapped}");
        for l in wrapped.lines() {
            assert!(l.chars().count() <= 80, "{l}");
        }
        assert!(wrapped.lines().skip(1).all(|l| l.starts_with("  ")));
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(words(&wrapped), words(line), "nothing lost or added");
        assert_eq!(wrap(line, None, 2), line, "no width: unchanged");
        assert_eq!(wrap("a\nb c", Some(80), 2), "a\nb c", "short lines stay");
        let table = "  JOB  PLAN\njob       1";
        assert_eq!(
            wrap(table, Some(80), 2),
            table,
            "leading and inner spaces stay"
        );
    }
}
