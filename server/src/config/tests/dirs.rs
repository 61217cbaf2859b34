//! Directories: the files read, an empty configuration, and which errors
//! of reading are the machine's (transient).

use super::*;
use crate::config::dir::is_transient;

#[test]
fn load_dir_reads_yaml_files_recursively_and_skips_dot_names() {
    let dir = std::env::temp_dir().join(format!("trl-server-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::create_dir_all(dir.join("..data")).unwrap();
    let file = |d: &str| {
        format!(
            "domain: {d}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        )
    };
    std::fs::write(dir.join("a.yaml"), file("a")).unwrap();
    std::fs::write(dir.join("sub/b.yml"), file("b")).unwrap();
    std::fs::write(dir.join("..data/a.yaml"), file("a")).unwrap();
    std::fs::write(dir.join("notes.txt"), "not yaml: [").unwrap();
    let c = Config::load_dir(&dir, LoadOptions::default()).unwrap();
    assert_eq!(c.domains().collect::<Vec<_>>(), vec!["a", "b"]);
    std::fs::write(
        dir.join("sub/c.yaml"),
        "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
    )
    .unwrap();
    let e = Config::load_dir(&dir, LoadOptions::default()).unwrap_err();
    assert_eq!(e.file, format!("sub{}c.yaml", std::path::MAIN_SEPARATOR));
    assert_eq!(e.path, "descriptors[0].rate_limit.unit");
    let _ = std::fs::remove_dir_all(&dir);
}

// issue 34, point 6
#[test]
fn a_configuration_tells_whether_it_has_rules() {
    let c = load(&[]).unwrap();
    assert!(c.is_empty());
    assert_eq!(c.rule_count(), 0);
    let c = one("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n");
    assert!(c.is_empty(), "a domain without a `rate_limit`");
    assert_eq!(c.domains().count(), 1);
    let c = one(BASIC);
    assert_eq!(c.rule_count(), 9);
    assert!(!c.is_empty());
    let dir = std::env::temp_dir().join(format!("trl-server-empty-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "domain: x\n").unwrap();
    assert!(
        Config::load_dir(&dir, LoadOptions::default())
            .unwrap()
            .is_empty()
    );
    // a mistyped directory is an error, and not one of the machine
    let e = Config::read_dir(&dir.join("missing")).unwrap_err();
    assert!(!e.transient, "{e}");
    assert!(e.message.contains("cannot read"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn io_errors_of_the_machine_are_transient_those_of_the_files_not() {
    use std::io::{Error, ErrorKind};
    let dir = std::env::temp_dir().join(format!("trl-server-io-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let here = dir.as_path();
    #[cfg(unix)]
    {
        // EMFILE, ENFILE
        assert!(is_transient(here, &Error::from_raw_os_error(24)));
        assert!(is_transient(here, &Error::from_raw_os_error(23)));
        // EACCES, EISDIR
        assert!(!is_transient(here, &Error::from_raw_os_error(13)));
        assert!(!is_transient(here, &Error::from_raw_os_error(21)));
    }
    for kind in [
        ErrorKind::Interrupted,
        ErrorKind::OutOfMemory,
        ErrorKind::WouldBlock,
    ] {
        assert!(is_transient(here, &Error::from(kind)), "{kind:?}");
    }
    for kind in [ErrorKind::PermissionDenied, ErrorKind::InvalidData] {
        assert!(!is_transient(here, &Error::from(kind)), "{kind:?}");
    }
    // gone since it was listed: transient; a link to nothing: not
    let gone = dir.join("gone.yaml");
    assert!(is_transient(&gone, &Error::from(ErrorKind::NotFound)));
    #[cfg(unix)]
    {
        let link = dir.join("dangling.yaml");
        std::os::unix::fs::symlink(dir.join("nothing"), &link).unwrap();
        assert!(!is_transient(&link, &Error::from(ErrorKind::NotFound)));
        let e = Config::read_dir(&dir).unwrap_err();
        assert_eq!(e.file, "dangling.yaml");
        assert!(!e.transient, "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
