//! `idemproxy demo`, run as a person would run it: the binary, its exit code and its story.

use std::process::{Command, Output};

/// The demo with a clean environment plus `env`.
fn demo_with(env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemproxy"));
    cmd.arg("demo");
    for var in ["IDEMPROXY_LOG", "IDEMPROXY_FAIL", "IDEMPROXY_ADMIN_TOKEN"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("the idemproxy binary runs")
}

fn demo() -> Output {
    demo_with(&[])
}

#[test]
fn the_demo_tells_both_parts_and_exits_zero() {
    let out = demo();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert_eq!(
        stdout.matches("provider effects: 1\n").count(),
        2,
        "{stdout}"
    );
    assert!(!stdout.contains("did not go as expected"), "{stdout}");
}

#[test]
fn the_demo_shows_the_lost_answer_the_replay_and_the_conflict() {
    let stdout = String::from_utf8_lossy(&demo().stdout).into_owned();
    let part_two = stdout.find("Part 2:").expect("the story has a second part");
    let (one, two) = stdout.split_at(part_two);
    // Part 1: lost answer, the provider's own replay, the ledger's replay, the 409.
    assert!(
        one.contains("proxy: 202 Accepted (outcome-unknown)"),
        "{one}"
    );
    assert_eq!(
        one.matches("proxy: 200 OK, refund re_1").count(),
        2,
        "{one}"
    );
    assert!(one.contains("Idem-State: succeeded | Idempotent-Replayed: true"));
    assert!(
        one.contains("proxy: 409 Conflict (parameter-mismatch)"),
        "{one}"
    );
    assert!(one.contains(r#"differing_fields: ["amount"]"#), "{one}");
    // Part 2: held as unknown twice, then the operator's answer.
    assert_eq!(
        two.matches("proxy: 202 Accepted (outcome-unknown)").count(),
        2,
        "{two}"
    );
    assert!(two.contains("/resolve"), "{two}");
    assert!(two.contains("admin: 200 OK (state: succeeded)"), "{two}");
    assert!(two.contains("proxy: 200 OK, refund re_1"), "{two}");
}

#[test]
fn the_demo_fails_loudly_when_the_ledger_cannot_record() {
    // With every ledger write failing, no step goes as the story says: exit 1, and why.
    let out = demo_with(&[("IDEMPROXY_FAIL", "ledger.commit")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("The demo did not go as expected:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("part 1, step 1: the status was 503"),
        "{stdout}"
    );
}

#[test]
fn the_operator_step_uses_the_admin_token_when_one_is_set() {
    let out = demo_with(&[("IDEMPROXY_ADMIN_TOKEN", "demo-secret")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("admin: 200 OK (state: succeeded)"),
        "{stdout}"
    );
}

/// Issue 31, item 3: the demo answers 202 (the default `pending_status`) and says why the
/// shipped policies answer 503; and each problem shows its `next`.
#[test]
fn the_demo_says_why_it_answers_202_and_the_shipped_policies_503() {
    let stdout = String::from_utf8_lossy(&demo().stdout).into_owned();
    for words in [
        "This demo answers 202, the default pending_status",
        "The shipped policies answer 503 with Retry-After",
        "take any 2xx for the refund",
        "next: retry_same",
        "next: new_operation",
        "next: wait",
    ] {
        assert!(stdout.contains(words), "{words}: {stdout}");
    }
}
