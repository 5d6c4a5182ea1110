//! Human-readable figures for the command line.

use std::time::Duration;

/// `"3s"`, `"4m"`, `"2h"`, `"3d"`: the largest whole unit (for tables and messages).
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        if d < Duration::from_secs(1) && !d.is_zero() {
            return format!("{}ms", d.as_millis());
        }
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m", secs / 60)
    } else if secs < 86_400 {
        format!("{}h", secs / 3600)
    } else {
        format!("{}d", secs / 86_400)
    }
}

/// `"1.5s"`, `"250ms"`, `"5m0s"`: precise enough for backoff delays and timeouts.
pub fn duration_precise(d: Duration) -> String {
    let millis = d.as_millis();
    if millis < 1000 {
        format!("{millis}ms")
    } else if millis < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}m{}s", millis / 60_000, (millis % 60_000) / 1000)
    }
}

/// Time since a wall-clock instant, `"12s ago"`; `"-"` when unknown.
pub fn ago(ts_ms: Option<u64>, now_ms: u64) -> String {
    match ts_ms {
        Some(ts) => format!(
            "{} ago",
            duration(Duration::from_millis(now_ms.saturating_sub(ts)))
        ),
        None => "-".to_string(),
    }
}

/// Cut a string to `width` characters, marking the cut with `…`.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(Duration::from_secs(3)), "3s");
        assert_eq!(duration(Duration::from_millis(250)), "250ms");
        assert_eq!(duration(Duration::from_secs(3600)), "1h");
        assert_eq!(duration(Duration::from_secs(300)), "5m");
        assert_eq!(duration_precise(Duration::from_millis(1500)), "1.5s");
        assert_eq!(duration_precise(Duration::from_secs(300)), "5m0s");
        assert_eq!(ago(Some(1000), 13_000), "12s ago");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
    }
}
