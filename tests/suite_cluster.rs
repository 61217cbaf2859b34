//! The store suite (`tests/suite`) on `RedisClusterStore` against a private
//! 3-master Redis Cluster per test.
#![cfg(feature = "cluster")]

mod common;
#[macro_use]
mod suite;

suite_tests!(suite::ClusterHarness::start();
    fixed_window_admits_limit_then_waits_for_the_window_end,
    sliding_window_log_is_exact_over_any_window,
    sliding_window_counter_weights_the_previous_window,
    token_bucket_refills_one_token_per_interval,
    gcra_spaces_requests_after_the_burst,
    leaky_bucket_queues_with_delays_and_denies_when_full,
    concurrency_holds_leases_until_released_or_expired,
    a_clock_going_backwards_never_admits_more,
    multi_quota_is_all_or_nothing,
    exactly_the_limit_is_admitted_under_concurrency_from_many_instances,
    a_multi_quota_limiter_is_exact_under_concurrency,
    concurrency_never_exceeds_its_limit_in_flight,
    every_key_written_has_a_ttl_no_longer_than_its_window,
    a_key_found_without_ttl_is_repaired_on_denial,
    all_keys_are_gone_once_their_windows_pass,
    fixed_window_on_the_store_clock_starts_at_the_first_hit,
);
