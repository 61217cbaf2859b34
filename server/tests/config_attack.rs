//! Configuration files and directories as an attacker (or a mistake) makes
//! them: nested aliases, deep nesting, huge files, huge directories, a
//! FIFO, no file descriptors left. Each is rejected quickly, naming the file
//! and why, with bounded memory, and a reload to it keeps the running
//! limits (issue 34, point 4; point 5 for the file descriptors).

mod common;

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use tower_redis_ratelimit::MemoryStore;
use tower_redis_ratelimit_server::config::{Config, ConfigError, LoadOptions};
use tower_redis_ratelimit_server::metrics;
use tower_redis_ratelimit_server::reload::{ConfigWatcher, Reload, ReloadError};
use tower_redis_ratelimit_server::service::{RlsService, ServiceOptions};

/// One test at a time measures the process's peak memory.
static MEMORY: Mutex<()> = Mutex::new(());

/// The process's peak resident memory so far (`VmHWM`), in KiB.
fn peak_kib() -> u64 {
    proc_status_kib("VmHWM")
}

/// Runs `f` and returns what it gave, how long it took and how much the
/// process's peak memory grew (KiB; 0 where `/proc` is not there).
fn measured<T>(f: impl FnOnce() -> T) -> (T, Duration, u64) {
    let before = peak_kib();
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    (out, took, peak_kib().saturating_sub(before))
}

/// A limits file of about 700 bytes whose `metadata` nests 9 levels of 9
/// aliases: 9^9 (387 million) scalars once expanded.
fn laughs() -> String {
    let mut s = String::from(
        "# nine levels of nine aliases: 387,420,489 scalars once expanded\n\
         domain: bomb\n\
         descriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 10}\n    metadata:\n",
    );
    s.push_str(
        "      l0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for i in 1..9 {
        let aliases = vec![format!("*a{}", i - 1); 9].join(",");
        s.push_str(&format!("      l{i}: &a{i} [{aliases}]\n"));
    }
    s
}

fn rejected(name: &str, text: &str) -> ConfigError {
    match Config::from_sources([(name, text)], LoadOptions::default()) {
        Ok(c) => panic!("{name} accepted: {} domains", c.domains().count()),
        Err(e) => e,
    }
}

// Before: 537 bytes of these aliases took the process past 2.4 GB in 9 s
// (stopped there by an address-space limit); the 668-byte file,
// past 3.8 GB and climbing.
#[test]
fn a_700_byte_file_of_nested_aliases_is_rejected_at_once_in_bounded_memory() {
    let _one = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
    let text = laughs();
    assert!((650..=750).contains(&text.len()), "{} bytes", text.len());
    let (e, took, grew) = measured(|| rejected("bomb.yaml", &text));
    eprintln!(
        "{} bytes of nested aliases: rejected in {took:?}, peak memory +{grew} KiB: {e}",
        text.len()
    );
    assert_eq!(e.file, "bomb.yaml");
    assert!(e.message.contains("aliases"), "{e}");
    assert!(e.line > 0, "{e}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(grew < 64 * 1024, "peak memory grew {grew} KiB");
}

#[test]
fn a_file_nested_100k_deep_is_rejected_at_once() {
    for (style, text) in [
        ("flow", "[".repeat(100_000)),
        ("block", "- ".repeat(100_000)),
        ("descriptors", {
            // a descriptor tree 50,000 levels deep
            let mut s = String::from("domain: d\ndescriptors: ");
            s.push_str(&"[{key: k, descriptors: ".repeat(50_000));
            s.push_str(&"}]".repeat(50_000));
            s
        }),
    ] {
        let (e, took, _) = measured(|| rejected("deep.yaml", &text));
        eprintln!("{style}: rejected in {took:?}: {e}");
        assert_eq!(e.file, "deep.yaml");
        assert!(
            e.message.contains("nested more than 128 deep"),
            "{style}: {e}"
        );
        assert!(e.line > 0, "{style}: {e}");
        assert!(took < Duration::from_secs(10), "{style}: {took:?}");
    }
}

#[test]
fn a_huge_file_is_rejected_unread() {
    let _one = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = TempDir::new("huge");
    std::fs::write(tmp.0.join("a.yaml"), "domain: a\n").expect("write");
    // sparse: 2 GiB that take no disk
    let file = std::fs::File::create(tmp.0.join("big.yaml")).expect("create");
    file.set_len(2 << 30).expect("set_len");
    let (e, took, grew) = measured(|| Config::read_dir(&tmp.0).expect_err("2 GiB"));
    eprintln!("a 2 GiB file: rejected in {took:?}, peak memory +{grew} KiB: {e}");
    assert_eq!(e.file, "big.yaml");
    assert!(e.message.contains("at most 16 MiB"), "{e}");
    assert!(!e.transient);
    assert!(grew < 8 * 1024, "peak memory grew {grew} KiB");
    // as given to the loader
    let text = format!("domain: a\n{}", " ".repeat(Config::MAX_FILE_BYTES));
    let e = rejected("big.yaml", &text);
    assert!(e.message.contains("at most 16 MiB"), "{e}");
    // files of 16 MiB, five together
    file.set_len(Config::MAX_FILE_BYTES as u64)
        .expect("set_len");
    drop(file);
    for i in 0..4 {
        std::fs::copy(tmp.0.join("big.yaml"), tmp.0.join(format!("big{i}.yaml"))).expect("copy");
    }
    let e = Config::read_dir(&tmp.0).expect_err("80 MiB");
    assert!(e.message.contains("more than 64 MiB together"), "{e}");
    // (a.yaml, big.yaml, big0.yaml, big1.yaml: 48 MiB and 10 bytes)
    assert_eq!(e.file, "big2.yaml", "{e}");
}

#[test]
fn a_directory_of_too_many_files_is_rejected_before_they_are_read() {
    let tmp = TempDir::new("many");
    for i in 0..Config::MAX_FILES {
        std::fs::write(tmp.0.join(format!("f{i:05}.yaml")), "").expect("write");
    }
    assert_eq!(
        Config::read_dir(&tmp.0).expect("4096").len(),
        Config::MAX_FILES
    );
    std::fs::write(tmp.0.join("one-more.yml"), "").expect("write");
    let (e, took, _) = measured(|| Config::read_dir(&tmp.0).expect_err("4097"));
    eprintln!("4097 files: rejected in {took:?}: {e}");
    assert_eq!(e.file, tmp.0.display().to_string());
    assert!(
        e.message.contains("more than 4096 configuration files"),
        "{e}"
    );
    // and entries of any name, in any subdirectory
    let tmp = TempDir::new("entries");
    let sub = tmp.0.join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    for i in 0..Config::MAX_DIR_ENTRIES {
        std::fs::write(sub.join(format!("n{i}")), "").expect("write");
    }
    let (e, took, _) = measured(|| Config::read_dir(&tmp.0).expect_err("65537"));
    eprintln!("65,537 entries: rejected in {took:?}: {e}");
    assert!(e.message.contains("more than 65536 entries"), "{e}");
}

/// `read_dir` on another thread, within 20 s.
fn read_dir_in_time(dir: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = dir.to_owned();
    std::thread::spawn(move || {
        let _ = tx.send(Config::read_dir(&dir));
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("read_dir did not return within 20 s")
}

#[cfg(unix)]
#[test]
fn a_fifo_or_a_link_to_a_device_is_rejected_not_waited_on() {
    let tmp = TempDir::new("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(tmp.0.join("pipe.yaml"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let e = read_dir_in_time(&tmp.0).expect_err("a FIFO");
    assert_eq!(e.file, "pipe.yaml");
    assert!(e.message.contains("not a regular file"), "{e}");
    std::fs::remove_file(tmp.0.join("pipe.yaml")).expect("rm");
    std::os::unix::fs::symlink("/dev/zero", tmp.0.join("zero.yaml")).expect("symlink");
    let e = read_dir_in_time(&tmp.0).expect_err("/dev/zero");
    assert_eq!(e.file, "zero.yaml");
    assert!(e.message.contains("not a regular file"), "{e}");
}

const RUNNING: &str =
    "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 7}\n";

fn running_service(dir: &Path) -> (RlsService, ConfigWatcher) {
    std::fs::write(dir.join("api.yaml"), RUNNING).expect("write");
    let files = Config::read_dir(dir).expect("read");
    let config = Config::from_sources(
        files.iter().map(|(n, t)| (n.as_str(), t.as_str())),
        LoadOptions::default(),
    )
    .expect("config");
    let service =
        RlsService::new(config, MemoryStore::new(), ServiceOptions::default()).expect("service");
    let watcher =
        ConfigWatcher::new(service.clone(), dir, LoadOptions::default()).loaded_from(files);
    (service, watcher)
}

fn limit_of(service: &RlsService) -> Option<u32> {
    service
        .config()
        .lookup("api", &[("k", "x")])
        .map(|r| r.requests_per_unit)
}

/// Each of these files in the directory: the reload is rejected naming the
/// file and why, the running limit stays, one failed load each; then a
/// valid change loads.
#[test]
fn a_reload_to_a_hostile_file_keeps_the_running_limits() {
    let _one = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(hostile_reloads());
}

/// How a case makes its files.
type Write<'a> = &'a dyn Fn(&Path);

async fn hostile_reloads() {
    let tmp = TempDir::new("hostile");
    let (service, mut w) = running_service(&tmp.0);
    assert!(matches!(w.check().await, Reload::Unchanged));
    let nested = format!("{}\n", "[".repeat(100_000));
    let cases: [(&str, Write<'_>, &str); 4] = [
        (
            "api.yaml",
            &|d| std::fs::write(d.join("api.yaml"), laughs()).expect("write"),
            "aliases",
        ),
        (
            "api.yaml",
            &|d| std::fs::write(d.join("api.yaml"), &nested).expect("write"),
            "nested more than 128 deep",
        ),
        (
            "api.yaml",
            &|d| {
                let f = std::fs::File::create(d.join("api.yaml")).expect("create");
                f.set_len(1 << 30).expect("set_len");
            },
            "at most 16 MiB",
        ),
        (
            "",
            &|d| {
                std::fs::write(d.join("api.yaml"), RUNNING).expect("write");
                for i in 0..Config::MAX_FILES {
                    std::fs::write(d.join(format!("x{i}.yml")), "").expect("write");
                }
            },
            "more than 4096 configuration files",
        ),
    ];
    for (i, (file, write, why)) in cases.iter().enumerate() {
        write(&tmp.0);
        let (outcome, took, grew) = {
            let before = peak_kib();
            let started = Instant::now();
            let r = w.check().await;
            (r, started.elapsed(), peak_kib().saturating_sub(before))
        };
        match outcome {
            Reload::Failed(ReloadError::Config(e)) => {
                eprintln!("reload {i}: rejected in {took:?}, peak memory +{grew} KiB: {e}");
                let named = if file.is_empty() {
                    tmp.0.display().to_string()
                } else {
                    (*file).to_owned()
                };
                assert_eq!(e.file, named, "{e}");
                assert!(e.message.contains(why), "{e}");
                assert!(!e.transient, "{e}");
            }
            other => panic!("reload {i}: {other:?}"),
        }
        assert!(grew < 64 * 1024, "reload {i}: peak memory grew {grew} KiB");
        assert!(took < Duration::from_secs(20), "reload {i}: {took:?}");
        assert_eq!(limit_of(&service), Some(7), "reload {i}");
        // reported once
        assert!(matches!(w.check().await, Reload::Unchanged), "reload {i}");
        let text = service.metrics().render();
        assert_eq!(
            sample(&text, metrics::CONFIG_LOAD_ERROR),
            i as u64 + 1,
            "{text}"
        );
    }
    for i in 0..Config::MAX_FILES {
        std::fs::remove_file(tmp.0.join(format!("x{i}.yml"))).expect("rm");
    }
    std::fs::write(tmp.0.join("api.yaml"), RUNNING.replace('7', "9")).expect("write");
    assert!(matches!(w.check().await, Reload::Reloaded));
    assert_eq!(limit_of(&service), Some(9));
}

const EMFILE_CHILD: &str = "TRL_CONFIG_ATTACK_EMFILE_CHILD";

/// The process with at most 256 file descriptors, running
/// [`out_of_file_descriptors_child`] alone.
#[cfg(target_os = "linux")]
#[test]
fn running_out_of_file_descriptors_is_no_failed_load_and_replaces_nothing() {
    let exe = std::env::current_exe().expect("current_exe");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256 && exec \"$0\" \"$@\"")
        .arg(exe)
        .args([
            "--exact",
            "out_of_file_descriptors_child",
            "--include-ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(EMFILE_CHILD, "1")
        .output()
        .expect("the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}\n{stderr}");
    assert!(stderr.contains("EMFILE reached"), "{stdout}\n{stderr}");
}

/// Run by [`running_out_of_file_descriptors_is_no_failed_load_and_replaces_nothing`]
/// under a low `ulimit -n`: with every descriptor taken, a check of the
/// directory is [`Reload::Unreadable`], no failed load, the running limit
/// stays; with them back, a change loads.
#[cfg(target_os = "linux")]
#[tokio::test]
#[ignore = "run by running_out_of_file_descriptors_is_no_failed_load_and_replaces_nothing"]
async fn out_of_file_descriptors_child() {
    if std::env::var_os(EMFILE_CHILD).is_none() {
        return;
    }
    let tmp = TempDir::new("emfile");
    let (service, mut w) = running_service(&tmp.0);
    std::fs::write(tmp.0.join("api.yaml"), RUNNING.replace('7', "9")).expect("write");
    let mut held = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) if e.raw_os_error() == Some(24) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(held.len() < 100_000, "no EMFILE");
    }
    eprintln!("EMFILE reached after {} more files", held.len());
    for _ in 0..3 {
        match w.check().await {
            Reload::Unreadable(e) => {
                assert!(e.transient, "{e}");
                assert!(e.message.contains("Too many open files"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
    drop(held);
    let text = service.metrics().render();
    assert_eq!(sample(&text, metrics::CONFIG_LOAD_ERROR), 0, "{text}");
    assert_eq!(limit_of(&service), Some(7));
    assert!(matches!(w.check().await, Reload::Reloaded));
    assert_eq!(limit_of(&service), Some(9));
}

/// What the library would reject when the service builds (a period over
/// 366 days, a `sliding-window-log` above 10,000, a burst that takes over
/// 4 × 366 days to refill) is a configuration error of the watcher, with
/// the path and line, and the running limit stays (issue 34, point 8).
#[tokio::test]
async fn a_reload_to_a_rule_the_library_rejects_names_its_path_and_line() {
    let tmp = TempDir::new("library");
    let (service, mut w) = running_service(&tmp.0);
    for (rate_limit, field) in [
        (
            "{unit: year, unit_multiplier: 2, requests_per_unit: 1}",
            "unit_multiplier",
        ),
        ("{duration: 367d, requests_per_unit: 1}", "duration"),
        (
            "{unit: second, requests_per_unit: 20000, strategy: sliding-window-log}",
            "requests_per_unit",
        ),
        (
            "{unit: day, requests_per_unit: 1, strategy: gcra, burst: 1465}",
            "burst",
        ),
    ] {
        let text = format!(
            "domain: api\ndescriptors:\n  - key: other\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n  - key: k\n    rate_limit: {rate_limit}\n"
        );
        std::fs::write(tmp.0.join("api.yaml"), &text).expect("write");
        match w.check().await {
            Reload::Failed(ReloadError::Config(e)) => {
                assert_eq!(e.file, "api.yaml", "{e}");
                assert_eq!(e.path, format!("descriptors[1].rate_limit.{field}"), "{e}");
                assert_eq!(e.line, 6, "{e}");
            }
            other => panic!("{rate_limit}: {other:?}"),
        }
        assert_eq!(limit_of(&service), Some(7), "{rate_limit}");
    }
}

/// A reload to a directory left empty, or to files with no rule (a
/// ConfigMap mounted half-way, a botched deploy), is rejected and the
/// running limits stay, as the start refuses to run without a rule; with
/// `allow_empty` (`--allow-empty-config`) it applies.
#[tokio::test]
async fn a_reload_to_no_rule_keeps_the_running_limits_unless_allowed() {
    let tmp = TempDir::new("no-rule");
    let (service, mut w) = running_service(&tmp.0);
    let file = tmp.0.join("api.yaml");
    std::fs::remove_file(&file).expect("remove");
    match w.check().await {
        Reload::Failed(ReloadError::Config(e)) => {
            assert!(e.message.contains("no configuration files"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(limit_of(&service), Some(7));
    std::fs::write(&file, "domain: api\ndescriptors: []\n").expect("write");
    match w.check().await {
        Reload::Failed(ReloadError::Config(e)) => {
            assert!(e.message.contains("no rule"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(limit_of(&service), Some(7));
    // (allowed, the next change to no rule applies)
    let mut w = w.allow_empty(true);
    std::fs::write(&file, "domain: other\ndescriptors: []\n").expect("write");
    assert!(matches!(w.check().await, Reload::Reloaded));
    assert_eq!(limit_of(&service), None);
}
