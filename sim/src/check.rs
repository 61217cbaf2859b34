//! The property check: every run against its strategy's documented
//! guarantee (the [`Strategy`] docs and the guide's
//! [strategy table](crate::guide::strategies)).

use std::fmt;

use super::{Simulation, seconds, us};
use tower_redis_ratelimit::strategy::Bound;

/// A run that broke its strategy's documented guarantee: which client,
/// which guarantee, and the requests that broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Violation {
    /// The run, `<strategy>-<pattern>`.
    pub run: String,
    /// Which client (`0` is `client-1`).
    pub client: usize,
    /// The guarantee broken, in words.
    pub guarantee: String,
    /// What happened instead.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: client-{} broke \"{}\": {}",
            self.run,
            self.client + 1,
            self.guarantee,
            self.detail
        )
    }
}

impl std::error::Error for Violation {}

/// The most denials per client whose `retry_after` a check tries (each
/// try replays the client's admissions so far).
const MAX_RETRY_TRIES: usize = 200;

/// One admitted request, as the checks see it (µs since the run's start).
struct Admitted {
    at: u64,
    /// When it is served: `at` plus its delay.
    served: u64,
    /// When its lease ends (released, or expired), if it holds one.
    lease_end: Option<u64>,
}

/// The most leases held at once, and when first: a lease counts from its
/// admission to its end (at one time, slots free before they are taken).
fn peak_in_flight(admitted: &[Admitted]) -> (u64, u64) {
    let mut events: Vec<(u64, i8)> = Vec::with_capacity(2 * admitted.len());
    for a in admitted {
        events.push((a.at, 1));
        if let Some(end) = a.lease_end {
            events.push((end, -1));
        }
    }
    events.sort();
    let (mut now, mut most) = (0u64, (0u64, 0u64));
    for (t, delta) in events {
        now = if delta > 0 {
            now + 1
        } else {
            now.saturating_sub(1)
        };
        if now > most.0 {
            most = (now, t);
        }
    }
    most
}

impl Simulation {
    /// The most requests one client had in flight at once (admitted, lease
    /// not yet released or expired); 0 for a strategy without leases.
    pub fn most_in_flight(&self) -> u64 {
        (0..self.pattern.clients())
            .map(|c| peak_in_flight(&self.admissions(c)).0)
            .max()
            .unwrap_or(0)
    }

    /// The guarantee [`check`](Self::check) holds this run to, in words.
    pub fn guarantee(&self) -> &'static str {
        self.strategy().guarantee()
    }

    /// Checks every client's requests against the strategy's documented
    /// guarantee ([`guarantee`](Self::guarantee)), and every decision
    /// against the meaning of a [`Decision`](tower_redis_ratelimit::Decision): an admitted
    /// request has no `retry_after`, a denied one a `retry_after` above
    /// zero (its cost always fits), `remaining` is at most the limit, only
    /// a leaky bucket delays, and a denied request sent again alone after
    /// exactly its `retry_after` is admitted, a microsecond sooner denied
    /// (tried on a replay, for up to 200 denials per client, evenly spread;
    /// for a concurrency quota, whose `retry_after` is
    /// the oldest lease's expiry, only that a slot is free by then). The
    /// first violation found is the error.
    pub fn check(&self) -> Result<(), Violation> {
        for client in 0..self.pattern.clients() {
            self.check_decisions(client)?;
            self.check_guarantee(client)?;
            self.check_retry_after(client)?;
        }
        Ok(())
    }

    /// Every denial's `retry_after` holds (up to [`MAX_RETRY_TRIES`] per
    /// client, evenly spread): the same request, sent alone
    /// after exactly that wait, is admitted, and (but for a concurrency
    /// quota, whose `retry_after` is documented as the latest a slot is
    /// sure to free, the oldest lease's expiry) a microsecond sooner it is
    /// still denied. Each denial is tried on a replay of the client's
    /// admissions up to it, on a store of its own.
    fn check_retry_after(&self, client: usize) -> Result<(), Violation> {
        let mine: Vec<&super::Request> = self
            .requests
            .iter()
            .filter(|r| r.client == client)
            .collect();
        let admissions = self.admissions(client);
        let n = self.quota.rate().count();
        // each try replays the run so far: at most MAX_RETRY_TRIES, evenly spread
        let denials = mine.iter().filter(|r| !r.allowed).count();
        let stride = denials.div_ceil(MAX_RETRY_TRIES).max(1);
        let tried = mine
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.allowed)
            .step_by(stride);
        for (i, r) in tried {
            let Some(wait) = r.retry_after else {
                continue;
            };
            let (at, wait) = (us(r.at), us(wait));
            let retry = at + wait;
            if self.strategy().holds_leases() {
                // the leases admitted so far still held then (releases come only sooner)
                let held = admissions
                    .iter()
                    .filter(|a| a.at <= at && a.lease_end.is_none_or(|end| end > retry))
                    .count() as u64;
                if held >= n {
                    return Err(self.violation(
                        client,
                        "a denied request is admitted after its retry_after",
                        format!(
                            "denied at {} s: {held} leases still held at {} s",
                            seconds(at),
                            seconds(retry)
                        ),
                    ));
                }
                continue;
            }
            let replay = self.replay(&mine[..i]).map_err(|e| {
                self.violation(
                    client,
                    "a denied request is admitted after its retry_after",
                    e.to_string(),
                )
            })?;
            let early = replay.try_at(retry - 1).map_err(|e| {
                self.violation(
                    client,
                    "a denied request is admitted after its retry_after",
                    e.to_string(),
                )
            })?;
            let on_time = !early
                && replay.try_at(retry).map_err(|e| {
                    self.violation(
                        client,
                        "a denied request is admitted after its retry_after",
                        e.to_string(),
                    )
                })?;
            if early || !on_time {
                let what = if early {
                    "already admitted 1 µs sooner"
                } else {
                    "still denied then"
                };
                return Err(self.violation(
                    client,
                    "a denied request is admitted after exactly its retry_after",
                    format!(
                        "denied at {} s with retry_after {} s: {what}",
                        seconds(at),
                        seconds(wait)
                    ),
                ));
            }
        }
        Ok(())
    }

    fn violation(&self, client: usize, guarantee: &str, detail: String) -> Violation {
        Violation {
            run: format!("{}-{}", self.strategy(), self.pattern),
            client,
            guarantee: guarantee.to_owned(),
            detail,
        }
    }

    fn check_decisions(&self, client: usize) -> Result<(), Violation> {
        let limit = self.quota.limit();
        let delays = self.strategy().delays();
        for r in self.requests.iter().filter(|r| r.client == client) {
            let at = seconds(us(r.at));
            let broken = if r.allowed && r.retry_after.is_some() {
                Some((
                    "an admitted request has no retry_after",
                    format!("{:?}", r.retry_after),
                ))
            } else if !r.allowed && r.retry_after.is_none_or(|d| d.is_zero()) {
                Some((
                    "a denied request whose cost fits has a retry_after above zero",
                    format!("{:?}", r.retry_after),
                ))
            } else if r.remaining > limit {
                Some((
                    "remaining is at most the limit",
                    format!("{} > {limit}", r.remaining),
                ))
            } else if r.delay.is_some() && !(delays && r.allowed) {
                Some((
                    "only an admitted leaky-bucket request has a delay",
                    format!("{:?}", r.delay),
                ))
            } else {
                None
            };
            if let Some((guarantee, got)) = broken {
                return Err(self.violation(
                    client,
                    guarantee,
                    format!("the request at {at} s: {got}"),
                ));
            }
        }
        Ok(())
    }

    fn admissions(&self, client: usize) -> Vec<Admitted> {
        let timeout = us(self.quota.rate().period());
        self.requests
            .iter()
            .filter(|r| r.allowed && r.client == client)
            .map(|r| {
                let at = us(r.at);
                Admitted {
                    at,
                    served: at + r.delay.map_or(0, us),
                    // a lease not released in time expires after the lease timeout
                    lease_end: r.released_at.map(|rel| us(rel).min(at + timeout)),
                }
            })
            .collect()
    }

    fn check_guarantee(&self, client: usize) -> Result<(), Violation> {
        let q = &self.quota;
        let n = q.rate().count();
        let period = us(q.rate().period()).max(1);
        let interval = period.div_ceil(n.max(1));
        let burst = q.limit();
        let admitted = self.admissions(client);
        let times: Vec<u64> = admitted.iter().map(|a| a.at).collect();
        let fail = |guarantee: &str, detail: String| Err(self.violation(client, guarantee, detail));
        let s = |t: u64| seconds(t);
        match q.strategy().bound() {
            Bound::Window => {
                // a window opens at the first admission after the last one closed
                let mut open: Option<(u64, u64)> = None;
                for &t in &times {
                    let (start, count) = match open {
                        Some((start, count)) if t < start + period => (start, count + 1),
                        _ => (t, 1),
                    };
                    if count > n {
                        return fail(
                            "at most n in one window",
                            format!(
                                "{count} admitted in the window opened at {} s (n = {n})",
                                s(start)
                            ),
                        );
                    }
                    open = Some((start, count));
                }
                self.at_most_in_spans(
                    client,
                    &times,
                    2 * n,
                    period,
                    "at most 2n in any span of one period",
                )
            }
            Bound::Span => self.at_most_in_spans(
                client,
                &times,
                n,
                period,
                "at most n in any span of one period",
            ),
            Bound::AlignedWindow => {
                // aligned windows are counted on the store's clock
                let window = |t: u64| (self.start + t) / period;
                // (admissions come in time order: one running count per window)
                let mut current = None;
                let mut count = 0u64;
                for &t in &times {
                    if current == Some(window(t)) {
                        count += 1;
                    } else {
                        current = Some(window(t));
                        count = 1;
                    }
                    if count > n {
                        let from = window(t) * period - self.start;
                        return fail(
                            "at most n in one aligned window",
                            format!(
                                "{count} admitted in the aligned window from {} s (n = {n})",
                                s(from)
                            ),
                        );
                    }
                }
                self.at_most_in_spans(
                    client,
                    &times,
                    2 * n,
                    period,
                    "at most 2n in any span of one period",
                )
            }
            Bound::Bucket => {
                self.bucket_bound(client, &times, burst, interval)?;
                if !q.strategy().delays() {
                    return Ok(());
                }
                for pair in admitted.windows(2) {
                    let (a, b) = (&pair[0], &pair[1]);
                    if b.served < a.served + interval {
                        return fail(
                            "serves in order, one per interval",
                            format!(
                                "admitted at {} s and {} s, served at {} s and {} s (interval {} s)",
                                s(a.at),
                                s(b.at),
                                s(a.served),
                                s(b.served),
                                s(interval)
                            ),
                        );
                    }
                }
                if let Some(a) = admitted.iter().find(|a| a.served - a.at > burst * interval) {
                    return fail(
                        "a delay of at most burst x interval",
                        format!("admitted at {} s, served at {} s", s(a.at), s(a.served)),
                    );
                }
                Ok(())
            }
            Bound::InFlight => match peak_in_flight(&admitted) {
                (most, t) if most > n => fail(
                    "at most n in flight",
                    format!("{most} in flight at {} s (n = {n})", s(t)),
                ),
                _ => Ok(()),
            },
            _ => fail(
                q.strategy().guarantee(),
                "the simulator has no check for this kind of bound".to_owned(),
            ),
        }
    }

    /// At most `most` admissions within any span `[t, t + width)`.
    fn at_most_in_spans(
        &self,
        client: usize,
        times: &[u64],
        most: u64,
        width: u64,
        guarantee: &str,
    ) -> Result<(), Violation> {
        let most = usize::try_from(most).unwrap_or(usize::MAX);
        for (i, &t) in times.iter().enumerate() {
            if let Some(&later) = times.get(i + most)
                && later < t + width
            {
                return Err(self.violation(
                    client,
                    guarantee,
                    format!(
                        "{} admitted from {} s to {} s (a span of {} s)",
                        most + 1,
                        seconds(t),
                        seconds(later),
                        seconds(width)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// For every span `[a, b]` between two admissions, the `k` admitted in
    /// it satisfy `k × interval <= (b - a) + burst × interval`: at most
    /// `burst + t / interval` in a span `t`. With `f(i) = t_i - i × interval`
    /// that is `f(j) >= f(i) - (burst - 1) × interval` for all `i < j`.
    fn bucket_bound(
        &self,
        client: usize,
        times: &[u64],
        burst: u64,
        interval: u64,
    ) -> Result<(), Violation> {
        let f = |i: usize, t: u64| i128::from(t) - i as i128 * i128::from(interval);
        let slack = i128::from(burst.saturating_sub(1)) * i128::from(interval);
        let mut best: Option<(usize, i128)> = None;
        for (j, &t) in times.iter().enumerate() {
            if let Some((i, fi)) = best
                && f(j, t) < fi - slack
            {
                return Err(self.violation(
                    client,
                    "at most burst + t / interval in any span t",
                    format!(
                        "{} admitted from {} s to {} s (burst {burst}, interval {} s)",
                        j - i + 1,
                        seconds(times[i]),
                        seconds(t),
                        seconds(interval)
                    ),
                ));
            }
            if best.is_none_or(|(_, fi)| f(j, t) > fi) {
                best = Some((j, f(j, t)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{Pattern, Scenario};
    use super::*;
    use tower_redis_ratelimit::strategy::Strategy;
    use tower_redis_ratelimit::{Quota, Rate};

    /// A standard run's admissions, held to the guarantee of `quota`.
    fn judged_as(strategy: Strategy, pattern: Pattern, quota: Quota) -> Result<(), Violation> {
        let mut sim = Scenario::standard(strategy, pattern).run().unwrap();
        sim.quota = quota;
        sim.check_guarantee(0)
    }

    #[test]
    fn each_check_catches_traffic_its_strategy_would_not_admit() {
        let rate = Rate::new(10, Duration::from_secs(10));
        let boundary = |q: Quota| judged_as(Strategy::FixedWindow, Pattern::BoundaryBurst, q);
        // the fixed window's 19 in a second, judged as a log of 10, a bucket of 10
        let v = boundary(Quota::sliding_window_log(rate)).unwrap_err();
        assert_eq!(v.guarantee, "at most n in any span of one period", "{v}");
        let v = boundary(Quota::gcra(rate)).unwrap_err();
        assert_eq!(
            v.detail,
            "11 admitted from 9.5 s to 10.034 s (burst 10, interval 1 s)"
        );
        assert!(boundary(Quota::token_bucket(rate)).is_err());
        // 10 in one aligned window: too many for 5, and for a fixed window of 5
        let five = Rate::new(5, Duration::from_secs(10));
        let v = boundary(Quota::sliding_window_counter(five)).unwrap_err();
        assert_eq!(v.guarantee, "at most n in one aligned window", "{v}");
        let v = boundary(Quota::fixed_window(five)).unwrap_err();
        assert_eq!(v.guarantee, "at most n in one window", "{v}");
        // the GCRA's admissions served at once: two a second
        let v = judged_as(Strategy::Gcra, Pattern::Steady, Quota::leaky_bucket(rate)).unwrap_err();
        assert_eq!(v.guarantee, "serves in order, one per interval", "{v}");
        // leases never released
        let v = judged_as(
            Strategy::FixedWindow,
            Pattern::Steady,
            Quota::concurrency(10),
        )
        .unwrap_err();
        assert_eq!(v.detail, "30 in flight at 24.5 s (n = 10)");
    }

    #[test]
    fn decisions_are_checked_against_their_meaning() {
        let mut sim = Scenario::standard(Strategy::Gcra, Pattern::Steady)
            .run()
            .unwrap();
        assert!(sim.check().is_ok());
        let denied = sim.requests.iter().position(|r| !r.allowed).unwrap();
        sim.requests[denied].retry_after = Some(Duration::ZERO);
        let v = sim.check().unwrap_err();
        assert!(v.guarantee.contains("retry_after above zero"), "{v}");
        sim.requests[denied].retry_after = None;
        assert!(sim.check().is_err());
        // a wait too long, or too short, by a microsecond
        let wait = Scenario::standard(Strategy::Gcra, Pattern::Steady)
            .run()
            .unwrap()
            .requests[denied]
            .retry_after
            .unwrap();
        for (wrong, what) in [
            (
                wait + Duration::from_micros(1),
                "already admitted 1 µs sooner",
            ),
            (wait - Duration::from_micros(1), "still denied then"),
        ] {
            sim.requests[denied].retry_after = Some(wrong);
            let v = sim.check().unwrap_err();
            assert!(v.detail.ends_with(what), "{v}");
        }
        sim.requests[denied].retry_after = Some(wait);
        assert!(sim.check().is_ok());
        sim.requests[0].delay = Some(Duration::from_secs(1));
        let v = sim.check().unwrap_err();
        assert!(v.guarantee.contains("delay"), "{v}");
    }
}
