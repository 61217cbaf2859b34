//! The ASCII summary of a [`Simulation`].

use std::fmt::Write as _;

use super::{Simulation, seconds, us};

/// A count as one character: `.` for 0, `1`-`9`, `A` (10) to `Z` (35), `#` above.
fn glyph(count: usize) -> char {
    match count {
        0 => '.',
        1..=9 => char::from(b'0' + count as u8),
        10..=35 => char::from(b'A' + (count - 10) as u8),
        _ => '#',
    }
}

impl Simulation {
    /// A plain-ASCII summary: the run, its counts, whether its guarantee
    /// holds, and one character per chart bin for requests and admissions
    /// (`.` none, `1`-`9`, `A` = 10 … `Z` = 35, `#` more).
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let sent = self.requests.len();
        let admitted = self.admitted();
        let retry = self.requests.iter().filter_map(|r| r.retry_after).max();
        let _ = writeln!(
            out,
            "{} x {}: {}",
            self.strategy(),
            self.pattern,
            self.quota_label()
        );
        let _ = writeln!(
            out,
            "  traffic  {} ({} requests in {} s)",
            self.pattern.description(),
            sent,
            seconds(self.duration)
        );
        let most = if self.strategy().holds_leases() {
            format!("at most {} in flight", self.most_in_flight())
        } else {
            format!("at most {} in one period", self.most_in_one_period())
        };
        let _ = writeln!(
            out,
            "  admitted {admitted} of {sent}; {most}; longest retry-after {} s",
            retry.map_or_else(|| "-".to_owned(), |d| seconds(us(d)))
        );
        if self.strategy().delays() {
            let delay = self.requests.iter().filter_map(|r| r.delay).max();
            let _ = writeln!(
                out,
                "  longest delay {} s",
                delay.map_or_else(|| "-".to_owned(), |d| seconds(us(d)))
            );
        }
        let verdict = match self.check() {
            Ok(()) => "holds".to_owned(),
            Err(v) => format!("BROKEN: client-{}: {}", v.client + 1, v.detail),
        };
        let _ = writeln!(out, "  guarantee {}: {verdict}", self.guarantee());

        let bins = self.bins();
        let mut ruler = vec![b' '; bins];
        let mut i = 0;
        while i < bins {
            let mark = seconds(i as u64 * self.bin);
            if i + mark.len() <= bins {
                ruler[i..i + mark.len()].copy_from_slice(mark.as_bytes());
            }
            i += 10;
        }
        let _ = writeln!(
            out,
            "  {:<12}{}",
            format!("per {} s", seconds(self.bin)),
            String::from_utf8_lossy(&ruler).trim_end()
        );
        let mut row =
            |name: &str, at: &dyn Fn(&super::Request) -> Option<u64>, client: Option<usize>| {
                let mut counts = vec![0usize; bins];
                for r in self
                    .requests
                    .iter()
                    .filter(|r| client.is_none_or(|c| r.client == c))
                {
                    if let Some(c) = at(r)
                        .and_then(|t| usize::try_from(t / self.bin).ok())
                        .and_then(|b| counts.get_mut(b))
                    {
                        *c += 1;
                    }
                }
                let line: String = counts.into_iter().map(glyph).collect();
                let _ = writeln!(out, "  {name:<12}{line}");
            };
        row("requests", &|r| Some(us(r.at)), None);
        row("admitted", &|r| r.allowed.then(|| us(r.at)), None);
        if self.strategy().delays() {
            row(
                "served",
                &|r| r.allowed.then(|| us(r.at) + r.delay.map_or(0, us)),
                None,
            );
        }
        if self.pattern.clients() > 1 {
            for c in 0..self.pattern.clients() {
                row(
                    &format!("client-{}", c + 1),
                    &|r| r.allowed.then(|| us(r.at)),
                    Some(c),
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::glyph;

    #[test]
    fn counts_are_one_character() {
        let s: String = [0, 1, 9, 10, 35, 36].into_iter().map(glyph).collect();
        assert_eq!(s, ".19AZ#");
    }
}
