//! `strata keys` end to end, against vector 1 of docs/FORMATS.md.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const KEY_B64URL: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
const EPOCH: &str = "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf";
const FINGERPRINT: &str = "99b722d3f6ab914830794532bec1737b";
const PAGE_KEY: &str = "ae05fd6fbc3177dfe17523150bd52ac9d56442f507cae42e67e2e7d24a1fdf14";
const PAGE_HEX: &str = "535001000000000000000000010000000068e5cf8b01000000000000070000000000000102030405060708090a0b64167688b3b6a01ccbc655be2d7583632911402b3a885c";

fn strata(args: &[&str], key: Option<&str>, stdin: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_strata"));
    command
        .args(args)
        .env_remove("STRATA_STREAM_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(key) = key {
        command.env("STRATA_STREAM_KEY", key);
    }
    let mut child = command.spawn().expect("strata runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn generate_prints_fresh_keys() {
    let out = stdout(&strata(&["keys", "generate", "--count", "2"], None, None));
    let keys: Vec<&str> = out.lines().collect();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1]);
    for key in keys {
        assert_eq!(key.len(), 43, "32 bytes of unpadded base64url");
        let fp = strata(
            &["keys", "fingerprint", "--epoch", EPOCH, "--key", key],
            None,
            None,
        );
        assert_eq!(stdout(&fp).trim().len(), 32);
    }
}

#[test]
fn fingerprint_and_derive_match_the_documented_vector() {
    let fp = strata(
        &["keys", "fingerprint", "--epoch", EPOCH],
        Some(KEY_B64URL),
        None,
    );
    assert_eq!(stdout(&fp).trim(), FINGERPRINT);
    let derived = stdout(&strata(
        &[
            "keys",
            "derive",
            "--epoch",
            EPOCH,
            "--routing-key",
            "",
            "--key-version",
            "0",
        ],
        Some(KEY_B64URL),
        None,
    ));
    assert!(
        derived.contains(&format!("page key {PAGE_KEY}")),
        "{derived}"
    );
}

#[test]
fn open_page_decrypts_with_the_key_or_the_subkey() {
    let out = stdout(&strata(
        &["keys", "open-page", "--epoch", EPOCH, "--hex"],
        Some(KEY_B64URL),
        Some(PAGE_HEX),
    ));
    assert!(out.contains("0\t1700000000000\thello"), "{out}");
    let derived = stdout(&strata(
        &["keys", "derive", "--epoch", EPOCH],
        Some(KEY_B64URL),
        None,
    ));
    let subkey = derived
        .lines()
        .find_map(|l| l.strip_prefix("subkey   "))
        .unwrap()
        .to_string();
    let json = stdout(&strata(
        &[
            "keys",
            "open-page",
            "--epoch",
            EPOCH,
            "--hex",
            "--json",
            "--subkey",
            &subkey,
        ],
        None,
        Some(PAGE_HEX),
    ));
    assert!(json.contains("\"payload_base64\":\"aGVsbG8=\""), "{json}");
}

#[test]
fn open_page_with_a_wrong_key_fails_cleanly() {
    let wrong = "Hx4dHBsaGRgXFhUUExIREA8ODQwLCgkIBwYFBAMCAQA";
    let out = strata(
        &["keys", "open-page", "--epoch", EPOCH, "--hex"],
        Some(wrong),
        Some(PAGE_HEX),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("authentication"));
    let missing = strata(&["keys", "fingerprint", "--epoch", EPOCH], None, None);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("STRATA_STREAM_KEY"));
}

/// A base64url key may start with `-` (one in 64 generated keys does): it is
/// still read as the value of `--key`, not as a flag.
#[test]
fn a_key_that_starts_with_a_dash_is_a_value() {
    let fp = strata(
        &[
            "keys",
            "fingerprint",
            "--epoch",
            EPOCH,
            "--key",
            "-xPc2vJvHRxlQkwHT_NfWh_tY_mC1h20lXK-VC1IL1A",
        ],
        None,
        None,
    );
    assert_eq!(stdout(&fp).trim().len(), 32);
}
