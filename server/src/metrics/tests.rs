//! Counting and rendering: the families and their order, the bounds on
//! labels and series, the near-limit ratio.

use super::*;

fn admitted(hits: u64, limit: u64, before: u64) -> Outcome {
    Outcome {
        hits,
        limit,
        before,
        over: before + hits > limit,
        shadow: false,
    }
}

/// The value of the sample `series` in `text`.
fn value(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[test]
fn renders_each_family_once_its_series_sorted() {
    let m = Metrics::new(10);
    m.config_loaded(true);
    m.record("d", "d.b", false, "d.b", admitted(1, 10, 0));
    m.record("d", "d.a", false, "d.a", admitted(2, 10, 0));
    m.store_error("d");
    m.domain_not_found("x\"y");
    let text = m.render();
    let head = "# HELP ratelimit_service_config_load_success Configurations loaded.\n\
        # TYPE ratelimit_service_config_load_success counter\n\
        ratelimit_service_config_load_success 1\n\n\
        # HELP ratelimit_service_config_load_error Configurations rejected (the running one stays).\n\
        # TYPE ratelimit_service_config_load_error counter\n\
        ratelimit_service_config_load_error 0\n\n\
        # HELP ratelimit_service_store_errors Calls whose store failed or timed out.\n\
        # TYPE ratelimit_service_store_errors counter\n\
        ratelimit_service_store_errors{domain=\"d\"} 1\n\n\
        # HELP ratelimit_service_rate_limit_domain_not_found Descriptors of requests for a domain with no configuration.\n\
        # TYPE ratelimit_service_rate_limit_domain_not_found counter\n\
        ratelimit_service_rate_limit_domain_not_found{domain=\"x\\\"y\"} 1\n\n\
        # HELP ratelimit_service_rate_limit_total_hits Hits on a limit (a request's hits_addend units).\n\
        # TYPE ratelimit_service_rate_limit_total_hits counter\n\
        ratelimit_service_rate_limit_total_hits{domain=\"d\",key=\"a\"} 2\n\
        ratelimit_service_rate_limit_total_hits{domain=\"d\",key=\"b\"} 1\n\n";
    assert!(text.starts_with(head), "{text}");
    for name in [
        TOTAL_HITS,
        WITHIN_LIMIT,
        NEAR_LIMIT,
        OVER_LIMIT,
        SHADOW_MODE,
    ] {
        assert_eq!(text.matches(&format!("# TYPE {name} counter\n")).count(), 1);
    }
    assert!(text.ends_with(&format!("{SHADOW_MODE}{{domain=\"d\",key=\"b\"}} 0\n\n")));
}

#[test]
fn long_values_count_under_bounded_distinct_labels() {
    let m = Metrics::new(10);
    let long = |c: char| format!("d.user_{}", c.to_string().repeat(50_000));
    for (key, n) in [(long('a'), 3), (long('b'), 1)] {
        for _ in 0..n {
            m.record("d", &key, true, "d.user", admitted(1, 100, 0));
        }
    }
    let text = m.render();
    assert!(text.len() < 4_000, "{}", text.len());
    let totals: Vec<&str> = text.lines().filter(|l| l.starts_with(TOTAL_HITS)).collect();
    assert_eq!(totals.len(), 2, "{text}");
    for (line, n, c) in [(totals[0], 3, 'a'), (totals[1], 1, 'b')] {
        let label = line
            .split_once("key=\"")
            .and_then(|(_, r)| r.split_once('"'))
            .map(|(l, _)| l)
            .expect("key label");
        assert_eq!(label.len(), MAX_LABEL_BYTES, "{label}");
        assert!(label.starts_with(&format!("user_{}", c.to_string().repeat(10))));
        assert!(line.ends_with(&format!(" {n}")), "{line}");
    }
    // one key with values each: two of the 10
    assert_eq!(m.valued.load(Ordering::Relaxed), 2);
}

#[test]
fn keys_with_values_past_the_cap_count_under_the_fallback() {
    let m = Metrics::new(2);
    for c in ['a', 'b', 'c', 'd', 'a'] {
        let key = format!("d.user_{}", c.to_string().repeat(1_000));
        m.record("d", &key, true, "d.user", admitted(1, 100, 0));
    }
    let text = m.render();
    let labels: Vec<&str> = text.lines().filter(|l| l.starts_with(TOTAL_HITS)).collect();
    assert_eq!(labels.len(), 3, "{text}");
    let a = labels
        .iter()
        .find(|l| l.contains("key=\"user_aaa"))
        .expect("a");
    assert!(a.ends_with(" 2"), "{a}");
    let user = format!("{TOTAL_HITS}{{domain=\"d\",key=\"user\"}}");
    assert_eq!(value(&text, &user), Some(2), "{text}");
}

#[test]
fn unknown_domains_past_the_cap_count_under_other() {
    let m = Metrics::new(10).max_unknown_domains(2);
    let long = "z".repeat(10_000);
    for d in ["a", "b", "a", "c", long.as_str(), "b", "c"] {
        m.domain_not_found(d);
    }
    let text = m.render();
    let series = |d: &str| format!("{DOMAIN_NOT_FOUND}{{domain=\"{d}\"}}");
    assert_eq!(value(&text, &series("a")), Some(2), "{text}");
    assert_eq!(value(&text, &series("b")), Some(2), "{text}");
    assert_eq!(value(&text, &series(OTHER_DOMAINS)), Some(3), "{text}");
    assert_eq!(value(&text, &series("c")), None, "{text}");
    assert_eq!(text.matches(DOMAIN_NOT_FOUND).count(), 2 + 3, "{text}");
    // a long one is bounded (had it a series of its own)
    let m = Metrics::new(10);
    m.domain_not_found(&long);
    let text = m.render();
    let line = text
        .lines()
        .find(|l| l.starts_with(DOMAIN_NOT_FOUND))
        .expect("a series");
    // (`{domain="`, the label, `"} 1`)
    assert_eq!(
        line.len(),
        DOMAIN_NOT_FOUND.len() + 9 + MAX_LABEL_BYTES + 4,
        "{line}"
    );
}

#[test]
fn near_limit_counts_past_the_ratio() {
    let near = |m: &Metrics| {
        value(
            &m.render(),
            &format!("{NEAR_LIMIT}{{domain=\"d\",key=\"k\"}}"),
        )
    };
    // 0.8 by default: 9 of 10 is 1 past 8
    let m = Metrics::new(10);
    m.record("d", "d.k", false, "d.k", admitted(9, 10, 0));
    assert_eq!(near(&m), Some(1));
    // 0.5: 6 of 10 is 1 past 5; then 2 more, both past it
    let ratio = NearLimitRatio::new(0.5).expect("ratio");
    let m = Metrics::new(10).near_limit_ratio(ratio);
    m.record("d", "d.k", false, "d.k", admitted(6, 10, 0));
    assert_eq!(near(&m), Some(1));
    m.record("d", "d.k", false, "d.k", admitted(2, 10, 6));
    assert_eq!(near(&m), Some(3));
    // denied from 9 of 10 at 0.5: near up to the limit (10 - 9), over 2
    m.record("d", "d.k", false, "d.k", admitted(3, 10, 9));
    assert_eq!(near(&m), Some(4));
}

/// The bound the module documents: 10,000 keys of plain 128-byte
/// labels (the default `max_metric_keys`) render in under 10 MB.
#[test]
fn the_default_key_cap_renders_in_a_bounded_text() {
    let m = Metrics::new(10_000);
    for i in 0..12_000 {
        let key = format!("d.user_{i:06}{}", "x".repeat(200));
        m.record("d", &key, true, "d.user", admitted(1, 100, 0));
    }
    let text = m.render();
    let series = text.lines().filter(|l| l.starts_with(TOTAL_HITS)).count();
    // 10,000 with values, and the rule's own key for the rest
    assert_eq!(series, 10_001);
    assert!(text.len() < 10_000_000, "{}", text.len());
    assert!(text.len() > 9_000_000, "{}", text.len());
}
