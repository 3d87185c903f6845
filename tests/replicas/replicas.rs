//! Several replicas on one PostgreSQL ledger (docs/reference.md section 5.9): real
//! `idemproxy` processes sharing a fresh database on the local PostgreSQL (127.0.0.1:5432),
//! reaching it through a relay the tests can cut.
//!
//! What is proved: duplicates spread over replicas cause one dispatch; a result recorded by
//! one is a replay through another; every replica's admin API sees every operation; a dead
//! replica's claim becomes `unknown` through a live one (then re-sent or held as for any
//! unknown); a paused replica's late result is not written and it claims nothing until its
//! lease is renewed; an unreachable database stops every dispatch and heals by itself; a
//! replica with another installation secret refuses to start.

use std::time::{Duration, Instant};

use http::{Method, StatusCode};

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, Proxy, ProxyBuilder, Replicas, problem, send};

/// Short, so a dead replica's claims are found within the tests' patience.
const LEASE: &str = "1s";
/// How long a test polls for something the replicas do by themselves.
const PATIENCE: Duration = Duration::from_secs(20);

/// The guarded `create_refund` route on `provider`, with `provider_keys`, a 1 s lease and
/// room for duplicates to wait.
fn replica(provider: &FakeProvider, provider_keys: &str) -> ProxyBuilder {
    builder(provider, provider_keys, &refund_route("")).config(&format!(
        "[replicas]\nlease = \"{LEASE}\"\n\n[limits]\nin_flight_wait = \"10s\"\n"
    ))
}

/// `GET /ops/{id}` until it answers `want` (bounded): for what a replica does by itself.
async fn until_show_status(proxy: &Proxy, id: &str, want: StatusCode) {
    let url = proxy.admin_url(&format!("/ops/{}", id.replace('/', "%2F")));
    let deadline = Instant::now() + PATIENCE;
    loop {
        let resp = send(Method::GET, &url, &[], "")
            .await
            .expect("admin answers");
        if resp.status == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id}: GET stayed {}, never {want}",
            resp.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The kinds of the operation's events, oldest first.
fn event_kinds(op: &serde_json::Value) -> Vec<String> {
    let events = op["events"].as_array().expect("events");
    let kind = |e: &serde_json::Value| e["kind"].as_str().unwrap_or_default().to_string();
    events.iter().map(kind).collect()
}

/// The operation IDs this replica's `GET /ops` lists.
async fn listed(proxy: &Proxy) -> Vec<String> {
    let url = proxy.admin_url("/ops?limit=1000");
    let resp = send(Method::GET, &url, &[], "")
        .await
        .expect("admin answers");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let ops = resp.json()["ops"].as_array().expect("ops").clone();
    let id = |op: &serde_json::Value| op["operation_id"].as_str().unwrap_or_default().to_string();
    ops.iter().map(id).collect()
}

/// `GET /healthz`'s status.
async fn health(proxy: &Proxy) -> StatusCode {
    let resp = send(Method::GET, &proxy.admin_url("/healthz"), &[], "").await;
    resp.expect("admin answers").status
}

/// Polls `GET /healthz` until it answers `want` (bounded).
async fn until_health(proxy: &Proxy, want: StatusCode) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = health(proxy).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/healthz stayed {now}, never {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// 30 identical requests at once, spread round-robin over `n` replicas, against a slow
/// provider: one upstream request, one body for all, 29 of them replays.
async fn thirty_duplicates_over(n: usize) {
    let provider = FakeProvider::start(Behavior::echo().delay(Duration::from_secs(1))).await;
    let replicas = Replicas::start(replica(&provider, ""), n).await;
    let id = op_id("wf-spread");

    let pending: Vec<_> = (0..30)
        .map(|i| refund_in_background(&replicas[i % n], "wf-spread", "charge=ch_1&amount=500"))
        .collect();
    let mut answers = Vec::new();
    for task in pending {
        answers.push(task.await.expect("task").expect("answer"));
    }

    assert_eq!(provider.request_count(), 1, "one upstream request");
    assert_eq!(provider.effects(), 1);
    let first = answers[0].body.clone();
    let mut replayed = 0;
    for answer in &answers {
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
        assert_eq!(answer.body, first, "every answer carries the same body");
        assert_eq!(answer.header("idem-state"), Some("succeeded"));
        assert_eq!(answer.header("idem-operation-id"), Some(id.as_str()));
        replayed += usize::from(answer.header("idempotent-replayed") == Some("true"));
    }
    assert_eq!(replayed, 29, "one first answer, 29 replays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_duplicates_over_two_replicas_make_one_upstream_request() {
    thirty_duplicates_over(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_duplicates_over_three_replicas_make_one_upstream_request() {
    thirty_duplicates_over(3).await;
}

#[tokio::test]
async fn an_operation_completed_through_one_replica_is_a_ledger_replay_through_another() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let replicas = Replicas::start(replica(&provider, ""), 2).await;
    let id = op_id("wf-across");

    let first = refund(&replicas[0], "wf-across", "amount=500").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    assert_op_headers(&first, &id, "succeeded", false);
    let again = refund(&replicas[1], "wf-across", "amount=500").await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text());
    assert_op_headers(&again, &id, "succeeded", true);
    assert_eq!(again.body, first.body);
    assert_eq!(provider.request_count(), 1, "answered from the ledger");

    // Other parameters through the other replica: the same refusal as on one proxy.
    let other = refund(&replicas[1], "wf-across", "amount=900").await;
    problem(&other, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn the_admin_api_of_every_replica_lists_every_replicas_operations() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let replicas = Replicas::start(replica(&provider, ""), 2).await;
    let ids = [op_id("wf-by-a"), op_id("wf-by-b")];
    for (i, rendered) in ["wf-by-a", "wf-by-b"].into_iter().enumerate() {
        let resp = refund(&replicas[i], rendered, "amount=1").await;
        assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    }

    for proxy in replicas.iter() {
        let listed = listed(proxy).await;
        for id in &ids {
            assert!(listed.contains(id), "{id} missing from {listed:?}");
            let op = proxy.op_json(id).await;
            assert_eq!(op["state"], "succeeded", "{op}");
        }
        // A page's cursor from one replica reads the next page through another.
        let first = send(Method::GET, &replicas[0].admin_url("/ops?limit=1"), &[], "").await;
        let first = first.expect("admin answers").json();
        let next = first["next"].as_str().expect("a next cursor").to_string();
        let url = proxy.admin_url(&format!("/ops?limit=1&after={next}"));
        let page = send(Method::GET, &url, &[], "")
            .await
            .expect("admin answers");
        assert_eq!(page.status, StatusCode::OK, "{}", page.text());
        let page = page.json();
        assert_eq!(page["ops"].as_array().map(Vec::len), Some(1), "{page}");
        assert_ne!(
            page["ops"][0]["operation_id"],
            first["ops"][0]["operation_id"]
        );
        let stats = send(Method::GET, &proxy.admin_url("/stats"), &[], "").await;
        let stats = stats.expect("admin answers").json();
        assert_eq!(stats["by_state"]["succeeded"], 2, "{stats}");
    }
}

/// Sends the refund through replica 0, waits until the provider holds it, SIGKILLs that
/// replica and waits (bounded) until replica 1, by itself, has made the operation `unknown`
/// with an `operation.orphaned` event. Replica 1's admin API only reads: the orphaning is
/// the lease sweep's, not a request's.
async fn kill_the_holder(provider: &FakeProvider, replicas: &mut Replicas, rendered: &str) {
    let id = op_id(rendered);
    let pending = refund_in_background(&replicas[0], rendered, "amount=500");
    provider.wait_for_requests(1).await;
    assert_eq!(replicas[1].op_json(&id).await["state"], "in_flight");
    assert!(!replicas[0].kill().await.success(), "killed by SIGKILL");
    let killed_at = Instant::now();
    let lost = pending.await.expect("task");
    assert!(
        lost.is_err(),
        "the agent's connection died with the replica"
    );

    replicas[1].until_state(&id, "unknown").await;
    let op = replicas[1].op_json(&id).await;
    let kinds = event_kinds(&op);
    let orphaned = kinds.iter().filter(|k| *k == "operation.orphaned").count();
    assert_eq!(
        orphaned,
        1,
        "orphaned once, {:?} after the kill: {kinds:?}",
        killed_at.elapsed()
    );
}

#[tokio::test]
async fn a_killed_replicas_claim_is_orphaned_by_another_and_re_sent_with_its_key() {
    let held = Behavior::echo().dedupe_on_header("idempotency-key").hold();
    let provider = FakeProvider::start(held).await;
    let mut replicas = Replicas::start(replica(&provider, "dedupe = \"key\""), 2).await;
    let id = op_id("wf-killed");
    kill_the_holder(&provider, &mut replicas, "wf-killed").await;

    // The provider goes on with the orphaned request: the effect happens after all.
    provider.release();
    provider.wait_for_effects(1).await;
    let retry = refund(&replicas[1], "wf-killed", "amount=500").await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.text());
    assert_eq!(
        retry.header("x-fake-effect"),
        Some("1"),
        "the original effect"
    );
    assert_op_headers(&retry, &id, "succeeded", true);
    let key = opaque_key(&id);
    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "re-sent once");
    assert!(
        requests
            .iter()
            .all(|r| r.header("idempotency-key") == Some(key.as_str()))
    );
    assert_eq!(provider.effects(), 1);
}

#[tokio::test]
async fn a_killed_replicas_claim_is_held_when_the_provider_does_not_deduplicate() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done").hold()).await;
    let mut replicas = Replicas::start(replica(&provider, "dedupe = \"none\""), 2).await;
    let id = op_id("wf-killed-none");
    kill_the_holder(&provider, &mut replicas, "wf-killed-none").await;

    for _ in 0..2 {
        let retry = refund(&replicas[1], "wf-killed-none", "amount=500").await;
        let body = problem(&retry, StatusCode::ACCEPTED, "outcome-unknown");
        assert_problem_context(&body, &id, "unknown");
        assert_op_headers(&retry, &id, "unknown", false);
    }
    assert_eq!(provider.request_count(), 1, "nothing sent after the crash");
}

/// Two live replicas sweep at once: each of a dead replica's claims is orphaned once.
#[tokio::test]
async fn several_sweepers_orphan_each_dead_claim_once() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done").hold()).await;
    let mut replicas = Replicas::start(replica(&provider, ""), 3).await;
    let rendered: Vec<String> = (0..5).map(|i| format!("wf-swept-{i}")).collect();
    let pending: Vec<_> = rendered
        .iter()
        .map(|r| refund_in_background(&replicas[0], r, "amount=5"))
        .collect();
    provider.wait_for_requests(5).await;
    replicas[0].kill().await;
    for task in pending {
        assert!(task.await.expect("task").is_err());
    }

    for r in &rendered {
        let id = op_id(r);
        replicas[1].until_state(&id, "unknown").await;
        for proxy in [&replicas[1], &replicas[2]] {
            let kinds = event_kinds(&proxy.op_json(&id).await);
            let orphaned = kinds.iter().filter(|k| *k == "operation.orphaned").count();
            assert_eq!(orphaned, 1, "{id}: {kinds:?}");
        }
    }
}

#[tokio::test]
async fn a_starting_replica_leaves_a_live_replicas_claim_alone() {
    let provider = FakeProvider::start(Behavior::fixed(201, "made").hold()).await;
    let mut replicas = Replicas::start(replica(&provider, ""), 1).await;
    let id = op_id("wf-live");
    let pending = refund_in_background(&replicas[0], "wf-live", "amount=5");
    provider.wait_for_requests(1).await;

    let late = replicas.add().await;
    assert_eq!(replicas[late].op_json(&id).await["state"], "in_flight");
    provider.release();
    let answer = pending.await.expect("task").expect("answer");
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
    let replay = refund(&replicas[late], "wf-live", "amount=5").await;
    assert_eq!(
        (replay.status, replay.text()),
        (StatusCode::CREATED, "made".into())
    );
    assert_op_headers(&replay, &id, "succeeded", true);
    let kinds = event_kinds(&replicas[late].op_json(&id).await);
    assert!(
        !kinds.iter().any(|k| k == "operation.orphaned"),
        "{kinds:?}"
    );
}

/// Replica 0 is frozen (SIGSTOP) with a claim at the provider, past its lease; replica 1
/// orphans the claim and re-sends it (same key), which succeeds; replica 0 wakes (SIGCONT)
/// to its late answer. The late answer is not written (only a `provider.answered_late` event
/// says it came), replica 0 answers its agent what the ledger holds (the re-send's answer, as a
/// replay), and replica 0 claims nothing until
/// it has renewed its lease: the test holds replica 0's lease row locked (so the renewal
/// waits; the schema's `replicas` table) and a new operation through it is refused.
#[tokio::test]
async fn a_paused_replica_wakes_to_a_superseded_claim_and_claims_nothing_until_renewed() {
    let provider = FakeProvider::start(Behavior::fixed(200, "late").hold()).await;
    let replicas = Replicas::start(replica(&provider, "dedupe = \"key\""), 2).await;
    let id = op_id("wf-paused");
    let pending = refund_in_background(&replicas[0], "wf-paused", "amount=500");
    provider.wait_for_requests(1).await;
    replicas[0].pause();

    replicas[1].until_state(&id, "unknown").await;
    provider.set_behavior(Behavior::fixed(201, "since"));
    let retry = refund(&replicas[1], "wf-paused", "amount=500").await;
    assert_eq!(
        (retry.status, retry.text()),
        (StatusCode::CREATED, "since".into())
    );
    // The frozen replica's request now gets its (late) answer, waiting in its socket.
    provider.release();

    let lease_row = replicas
        .database()
        .hold("SELECT id FROM replicas WHERE expires_at < now() FOR UPDATE");
    replicas[0].resume();
    let late = pending
        .await
        .expect("task")
        .expect("the woken replica answers");
    // Its own answer was not written: it answers what the ledger holds now, as a replay.
    assert_eq!(
        (late.status, late.text()),
        (StatusCode::CREATED, "since".into())
    );
    assert_op_headers(&late, &id, "succeeded", true);
    // Bounded: a claim that waited on the held row would otherwise hang the test.
    let refused =
        tokio::time::timeout(PATIENCE, refund(&replicas[0], "wf-after-pause", "amount=1"))
            .await
            .expect("a claim without a live lease is refused, not kept waiting");
    problem(
        &refused,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    );
    assert_eq!(
        provider.request_count(),
        2,
        "nothing sent without a live lease"
    );
    lease_row.end();

    for proxy in replicas.iter() {
        let op = proxy.op_json(&id).await;
        assert_eq!(op["state"], "succeeded", "{op}");
        assert_eq!(op["attempts"], 2, "{op}");
        assert_eq!(op["response"]["status"], 201, "what happened since: {op}");
        // The late answer is on the record, never silent.
        let late = op["events"]
            .as_array()
            .expect("events")
            .iter()
            .find(|e| e["kind"] == "provider.answered_late")
            .unwrap_or_else(|| panic!("no provider.answered_late event: {op}"))
            .clone();
        assert_eq!(late["attempt"], 1, "{late}");
        let detail = late["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("status 200"), "{detail}");
        let replay = refund(proxy, "wf-paused", "amount=500").await;
        assert_eq!(
            (replay.status, replay.text()),
            (StatusCode::CREATED, "since".into())
        );
    }
    // Renewed by itself, the woken replica claims again.
    until_health(&replicas[0], StatusCode::OK).await;
    let claimed = refund(&replicas[0], "wf-after-pause", "amount=1").await;
    assert_eq!(claimed.status, StatusCode::CREATED, "{}", claimed.text());
    assert_eq!(provider.request_count(), 3);
}

#[tokio::test]
async fn an_unreachable_database_stops_every_dispatch_and_both_replicas_recover_by_themselves() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let replicas = Replicas::start(replica(&provider, ""), 2).await;
    for (i, proxy) in replicas.iter().enumerate() {
        let warm = refund(proxy, &format!("wf-before-{i}"), "amount=1").await;
        assert_eq!(warm.status, StatusCode::OK, "{}", warm.text());
    }

    replicas.cut();
    for (i, proxy) in replicas.iter().enumerate() {
        let resp = refund(proxy, &format!("wf-cut-{i}"), "amount=1").await;
        let body = problem(&resp, StatusCode::SERVICE_UNAVAILABLE, "ledger-unavailable");
        assert_eq!(
            body["operation_id"],
            op_id(&format!("wf-cut-{i}")),
            "{body}"
        );
        until_health(proxy, StatusCode::SERVICE_UNAVAILABLE).await;
    }
    assert_eq!(
        provider.request_count(),
        2,
        "nothing sent without a durable claim"
    );

    replicas.restore();
    for (i, proxy) in replicas.iter().enumerate() {
        until_health(proxy, StatusCode::OK).await;
        let resp = refund(proxy, &format!("wf-cut-{i}"), "amount=1").await;
        assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
        assert_op_headers(&resp, &op_id(&format!("wf-cut-{i}")), "succeeded", false);
    }
    assert_eq!(provider.request_count(), 4);
}

/// The claim is durable, the provider answers, but the database is gone before the result
/// can be written: the agent is told the outcome is unknown (never the unrecorded answer as
/// a success), and once the database is back the operation is `unknown`, orphaned.
#[tokio::test]
async fn a_result_the_database_cannot_take_leaves_the_operation_unknown_once_it_is_back() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done").hold()).await;
    let replicas = Replicas::start(replica(&provider, ""), 2).await;
    let id = op_id("wf-unrecorded");
    let pending = refund_in_background(&replicas[0], "wf-unrecorded", "amount=5");
    provider.wait_for_requests(1).await;

    replicas.cut();
    provider.release();
    let answer = pending.await.expect("task").expect("answer");
    let body = problem(&answer, StatusCode::ACCEPTED, "outcome-unknown");
    assert_eq!(body["operation_id"], id.as_str(), "{body}");
    assert_eq!(answer.header("idem-state"), Some("unknown"));

    replicas.restore();
    for proxy in replicas.iter() {
        proxy.until_state(&id, "unknown").await;
        let kinds = event_kinds(&proxy.op_json(&id).await);
        assert!(kinds.iter().any(|k| k == "operation.orphaned"), "{kinds:?}");
    }
    let retry = refund(&replicas[1], "wf-unrecorded", "amount=5").await;
    problem(&retry, StatusCode::ACCEPTED, "outcome-unknown");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn a_replica_with_another_installation_secret_refuses_to_start() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut replicas = Replicas::start(replica(&provider, ""), 1).await;
    let password = "Sesame-pw-91";
    let url = format!(
        "postgres://postgres:{password}@{}/{}?sslmode=disable",
        replicas.relay(0).addr(),
        replicas.database().name()
    );
    let other = common::database::random_secret();
    let (status, log) = replicas
        .replica()
        .ledger_url(&url)
        .env("IDEMPROXY_SECRET", &other)
        .start_expect_failure()
        .await;

    assert!(!status.success(), "{status:?}");
    assert!(log.contains("another installation secret"), "{log}");
    assert!(
        log.contains(replicas.database().name()),
        "names the ledger: {log}"
    );
    assert!(!log.contains(password), "the password never shows: {log}");
    assert!(!log.contains(&other), "the secret never shows: {log}");
    assert!(!log.contains(replicas.secret()), "{log}");

    // The refusal changed nothing: the first replica still serves.
    let resp = refund(&replicas[0], "wf-after-refusal", "amount=1").await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
}

/// Three replicas prune at once (`completed = "1s"`, a sweep every 100 ms on each): every
/// succeeded operation leaves its tombstone, seen alike through every replica, and nothing is
/// sent again.
#[tokio::test]
async fn replicas_pruning_at_once_leave_every_tombstone() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let keys = "dedupe = \"none\"\nkey_retention = \"200ms\"\ntimeout = \"500ms\"";
    let pruning = builder(&provider, keys, &refund_route("")).config(&format!(
        "[replicas]\nlease = \"{LEASE}\"\n\n[retention]\ncompleted = \"1s\"\n"
    ));
    let replicas = Replicas::start(pruning, 3).await;
    let rendered: Vec<String> = (0..12).map(|i| format!("wf-pruned-{i}")).collect();
    for (i, r) in rendered.iter().enumerate() {
        let resp = refund(&replicas[i % 3], r, "amount=1").await;
        assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    }

    for r in &rendered {
        until_show_status(&replicas[0], &op_id(r), StatusCode::GONE).await;
    }
    for proxy in replicas.iter() {
        assert_eq!(listed(proxy).await, Vec::<String>::new());
        for r in &rendered {
            let replay = refund(proxy, r, "amount=1").await;
            let body = problem(&replay, StatusCode::GONE, "operation-expired");
            assert_eq!(body["state"], "succeeded", "{body}");
        }
    }
    assert_eq!(provider.request_count(), 12, "nothing sent again");
}

/// A duplicate waiting through replica 1 on replica 0's claim when replica 0 dies: the lease
/// sweep makes the operation `unknown`, and the waiter answers that (held: nothing is sent
/// again) rather than waiting out `in_flight_wait` (10 s, which would be `in-flight`).
#[tokio::test]
async fn a_duplicate_waiting_through_another_replica_learns_that_the_holder_died() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done").hold()).await;
    let mut replicas = Replicas::start(replica(&provider, "dedupe = \"none\""), 2).await;
    let id = op_id("wf-waiter");
    let first = refund_in_background(&replicas[0], "wf-waiter", "amount=5");
    provider.wait_for_requests(1).await;
    let waiter = refund_in_background(&replicas[1], "wf-waiter", "amount=5");
    replicas[0].kill().await;
    assert!(first.await.expect("task").is_err());

    let answer = waiter.await.expect("task").expect("answer");
    let body = problem(&answer, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_eq!(provider.request_count(), 1, "nothing sent again");
}

/// Two operators approve one operation at once, each through another replica: one wins, the
/// other is told it is no longer awaiting approval; the agent's retry sends it once.
#[tokio::test]
async fn two_operators_approving_at_once_through_two_replicas_cannot_both_win() {
    let provider = FakeProvider::start(Behavior::fixed(201, "made")).await;
    let approval = builder(&provider, "", &refund_route("approval = \"required\"\n"))
        .config(&format!("[replicas]\nlease = \"{LEASE}\"\n"));
    let replicas = Replicas::start(approval, 2).await;
    let id = op_id("wf-approve");
    let held = refund(&replicas[0], "wf-approve", "amount=5").await;
    problem(&held, StatusCode::ACCEPTED, "awaiting-approval");

    let path = format!("/ops/{}/approve", id.replace('/', "%2F"));
    let decisions: Vec<_> = replicas
        .iter()
        .map(|proxy| {
            let url = proxy.admin_url(&path);
            tokio::spawn(async move {
                let json = [("content-type", "application/json")];
                send(Method::POST, &url, &json, "{}")
                    .await
                    .expect("admin answers")
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for decision in decisions {
        statuses.push(decision.await.expect("task").status);
    }
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);

    let sent = refund(&replicas[1], "wf-approve", "amount=5").await;
    assert_eq!(
        (sent.status, sent.text()),
        (StatusCode::CREATED, "made".into())
    );
    let again = refund(&replicas[0], "wf-approve", "amount=5").await;
    assert_op_headers(&again, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 1);
}

/// Replays answered by different replicas add up in the one count the admin API shows.
#[tokio::test]
async fn replays_through_every_replica_add_up_in_one_count() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let replicas = Replicas::start(replica(&provider, ""), 2).await;
    let id = op_id("wf-counted");
    let first = refund(&replicas[0], "wf-counted", "amount=5").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    for i in 0..5 {
        let replay = refund(&replicas[i % 2], "wf-counted", "amount=5").await;
        assert_op_headers(&replay, &id, "succeeded", true);
    }

    // Counts are written about once a second by each replica: poll for the sum.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let op = replicas[1].op_json(&id).await;
        if op["replays"]["count"] == 5 {
            let kinds = event_kinds(&op);
            let noted = kinds.iter().filter(|k| *k == "operation.replayed").count();
            assert_eq!(noted, 1, "the first replay's event only, once: {kinds:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replays never added up to 5: {op}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(provider.request_count(), 1);
}

/// Replica 0 loses the database (a partition: its relay alone is cut) with a claim at the
/// provider. It stops serving claims (`/healthz` 503) while replica 1 goes on, orphans the
/// claim once replica 0's lease lapses, and re-sends it (same key). Replica 0's late answer
/// cannot be written (the agent is told the outcome is unknown) and, back on the database,
/// replica 0 finds what happened since.
#[tokio::test]
async fn a_partitioned_replica_is_superseded_and_finds_what_happened_since() {
    let provider = FakeProvider::start(Behavior::fixed(200, "late").hold()).await;
    let replicas = Replicas::start(replica(&provider, "dedupe = \"key\""), 2).await;
    let id = op_id("wf-partition");
    let pending = refund_in_background(&replicas[0], "wf-partition", "amount=5");
    provider.wait_for_requests(1).await;

    replicas.relay(0).cut();
    until_health(&replicas[0], StatusCode::SERVICE_UNAVAILABLE).await;
    replicas[1].until_state(&id, "unknown").await;
    assert_eq!(health(&replicas[1]).await, StatusCode::OK);
    provider.set_behavior(Behavior::fixed(201, "since"));
    let retry = refund(&replicas[1], "wf-partition", "amount=5").await;
    assert_eq!(
        (retry.status, retry.text()),
        (StatusCode::CREATED, "since".into())
    );

    provider.release();
    let late = pending.await.expect("task").expect("answer");
    problem(&late, StatusCode::ACCEPTED, "outcome-unknown");
    let refused = refund(&replicas[0], "wf-cut-off", "amount=1").await;
    problem(
        &refused,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    );
    assert_eq!(
        provider.request_count(),
        2,
        "nothing sent without a durable claim"
    );

    replicas.relay(0).restore();
    until_health(&replicas[0], StatusCode::OK).await;
    for proxy in replicas.iter() {
        let op = proxy.op_json(&id).await;
        assert_eq!(op["state"], "succeeded", "{op}");
        assert_eq!(op["response"]["status"], 201, "what happened since: {op}");
        let replay = refund(proxy, "wf-partition", "amount=5").await;
        assert_eq!(
            (replay.status, replay.text()),
            (StatusCode::CREATED, "since".into())
        );
    }
    let claimed = refund(&replicas[0], "wf-cut-off", "amount=1").await;
    assert_eq!(claimed.status, StatusCode::CREATED, "{}", claimed.text());
}

/// A replica that cannot reach the database at start refuses to start and says why, naming
/// the ledger without its password.
#[tokio::test]
async fn a_replica_that_cannot_reach_the_database_at_start_says_so() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut replicas = Replicas::start(replica(&provider, ""), 1).await;
    let builder = replicas.replica();
    let cut = replicas.relay(1);
    cut.cut();
    let url = format!(
        "postgres://postgres:Sesame-pw-91@{}/{}?sslmode=disable",
        cut.addr(),
        replicas.database().name()
    );
    let (status, log) = builder.ledger_url(&url).start_expect_failure().await;
    assert!(!status.success(), "{status:?}");
    assert!(
        log.contains(replicas.database().name()),
        "names the ledger: {log}"
    );
    assert!(
        !log.contains("Sesame-pw-91"),
        "the password never shows: {log}"
    );
}

/// `check` connects to the shared database: it passes with the replicas' secret and reports
/// another secret, never printing the URL's password (nor `/metrics` showing it).
#[tokio::test]
async fn check_reaches_the_database_and_never_prints_its_password() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut replicas = Replicas::start(replica(&provider, ""), 1).await;
    let password = "Sesame-pw-91";
    let with_password = |addr: std::net::SocketAddr, db: &str| {
        format!("postgres://postgres:{password}@{addr}/{db}?sslmode=disable")
    };
    let url = with_password(replicas.relay(0).addr(), replicas.database().name());
    let dir = replicas.replica().ledger_url(&url).write();
    let config = dir.config_path().display().to_string();
    let (status, out, err) = dir.run_cli(&["check", "-c", &config]).await;
    assert!(status.success(), "{out}{err}");
    assert!(!format!("{out}{err}").contains(password), "{out}{err}");

    let other = replicas
        .replica()
        .ledger_url(&url)
        .env("IDEMPROXY_SECRET", &common::database::random_secret())
        .write();
    let config = other.config_path().display().to_string();
    let (status, out, err) = other.run_cli(&["check", "-c", &config]).await;
    assert!(!status.success(), "{out}{err}");
    let text = format!("{out}{err}");
    assert!(text.contains("another installation secret"), "{text}");
    assert!(!text.contains(password), "{text}");

    let serving = dir.start().await;
    let metrics = send(Method::GET, &serving.admin_url("/metrics"), &[], "").await;
    assert!(!metrics.expect("admin answers").text().contains(password));
    assert!(
        !serving.log_text().contains(password),
        "{}",
        serving.log_text()
    );
}

/// A database whose schema is newer than this binary knows is refused at start, saying so;
/// the binary changes nothing in it.
#[tokio::test]
async fn a_replica_refuses_a_schema_newer_than_it_knows() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut replicas = Replicas::start(replica(&provider, ""), 1).await;
    let database = replicas.database();
    let version = database.sql("SELECT value FROM meta WHERE key = 'schema_version'");
    let newer = version.parse::<u64>().expect("a numeric schema version") + 1;
    database.sql(&format!(
        "UPDATE meta SET value = '{newer}' WHERE key = 'schema_version'"
    ));

    let (status, log) = replicas.replica().start_expect_failure().await;
    assert!(!status.success(), "{status:?}");
    assert!(log.contains("schema"), "{log}");
    assert!(
        log.contains(&newer.to_string()),
        "names the version it found: {log}"
    );
    let kept = replicas
        .database()
        .sql("SELECT value FROM meta WHERE key = 'schema_version'");
    assert_eq!(kept, newer.to_string(), "left as it was");
}

/// This replica's `idemproxy_escalations_total` for the refund route (0 when absent).
async fn escalations(proxy: &Proxy) -> f64 {
    let metrics = send(Method::GET, &proxy.admin_url("/metrics"), &[], "").await;
    let text = metrics.expect("admin answers").text();
    let series =
        format!("idemproxy_escalations_total{{provider=\"{PROVIDER}\",route=\"{ROUTE}\"}} ");
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix(series.as_str()));
    value.map_or(0.0, |v| v.trim().parse().expect("a number"))
}

/// A dead replica's claim on a route only a person can settle (irreversible, no provider
/// deduplication) is escalated once, by the live replica whose sweep orphaned it: one warning
/// naming it, one count, across the replicas.
#[tokio::test]
async fn a_dead_replicas_claim_is_escalated_once_across_the_replicas() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done").hold()).await;
    let mut replicas = Replicas::start(replica(&provider, "dedupe = \"none\""), 3).await;
    let id = op_id("wf-escalated");
    kill_the_holder(&provider, &mut replicas, "wf-escalated").await;

    let deadline = Instant::now() + PATIENCE;
    loop {
        let total = escalations(&replicas[1]).await + escalations(&replicas[2]).await;
        if total >= 1.0 {
            assert_eq!(total, 1.0, "escalated once");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never escalated:\n{}",
            replicas.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let warned: usize = [&replicas[1], &replicas[2]]
        .iter()
        .map(|proxy| {
            let log = proxy.log_text();
            let warns = |l: &&str| l.contains("WARN") && l.contains("idemproxy ops resolve");
            log.lines()
                .filter(warns)
                .filter(|l| l.contains(&id))
                .count()
        })
        .sum();
    assert_eq!(warned, 1, "one warning naming it:\n{}", replicas.logs());
}

/// At the most verbose filter, the PostgreSQL client's own debug lines are held back: they
/// print every statement's parameters, among them the stored response's headers and body.
/// `IDEMPROXY_LOG=debug` shows idemproxy's debug lines and not those (naming
/// `tokio_postgres` in the filter turns them on). Before 2026-12-03 the stored answer was in
/// the log.
#[tokio::test]
async fn debug_logs_never_print_the_stored_answer_of_a_shared_ledger() {
    let provider = FakeProvider::start(Behavior::fixed(200, "ANSWER-CANARY-71")).await;
    let replicas = Replicas::start(replica(&provider, "").env("IDEMPROXY_LOG", "debug"), 1).await;
    let made = refund(&replicas[0], "wf-log", "amount=500").await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.text());
    let replay = refund(&replicas[0], "wf-log", "amount=500").await;
    assert_eq!(replay.text(), "ANSWER-CANARY-71");
    let log = replicas[0].log_text();
    assert!(log.contains("DEBUG"), "the debug filter is on:\n{log}");
    // The body as text, and as the byte list a statement's parameters print.
    let bytes = format!("{:?}", b"ANSWER-CANARY-71".to_vec()).replace(' ', "");
    let compact = log.replace(' ', "");
    assert!(
        !log.contains("ANSWER-CANARY-71"),
        "the answer in the log:\n{log}"
    );
    assert!(
        !compact.contains(&bytes[1..bytes.len() - 1]),
        "the answer's bytes in the log"
    );
}

/// Sends `rendered`'s refund through `proxy` (each request bounded) until it answers `want`;
/// every other answer must be the problem `meanwhile` (status, type). Fails after `PATIENCE`.
async fn refund_until(
    proxy: &Proxy,
    rendered: &str,
    want: StatusCode,
    meanwhile: (StatusCode, &str),
) -> common::Resp {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let asked = tokio::time::timeout(PATIENCE, refund(proxy, rendered, "amount=500"));
        let resp = asked.await.expect("the replica answers");
        if resp.status == want {
            return resp;
        }
        problem(&resp, meanwhile.0, meanwhile.1);
        assert!(
            Instant::now() < deadline,
            "{rendered}: never {want}, still {}",
            resp.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A non-deduplicating TLS provider whose refunds are looked up (`GET /v1/refunds?key=KEY`),
/// with a 4 s `timeout` and a 1 s `not_found_final_after`, on replicas with a 1 s lease.
fn looked_up(provider: &FakeProvider) -> ProxyBuilder {
    let reconcile = "[route.reconcile]\n\
                     lookup = \"GET /v1/refunds?key={key}\"\n\
                     found = \"/data/0\"\n\
                     not_found_final_after = \"1s\"\n";
    let keys = "dedupe = \"none\"\ntimeout = \"4s\"";
    builder(provider, keys, &refund_route(reconcile)).config(&format!(
        "[replicas]\nlease = \"{LEASE}\"\n\n[limits]\nin_flight_wait = \"1s\"\n"
    ))
}

/// The refunds (POSTs) the provider received.
fn posts(provider: &FakeProvider) -> usize {
    let requests = provider.requests();
    requests.iter().filter(|r| r.method == Method::POST).count()
}

/// Replica 0 claims a refund and is still connecting to the provider (its TLS handshake held)
/// when it is frozen (SIGSTOP) past its lease. Replica 1 orphans the claim and looks the refund
/// up: not found. The old owner could still send its attempt until its dispatch plus the
/// provider's `timeout`, so "not found" is final only a second after that, not a second after
/// the orphaning. Replica 0 wakes with its connection ready and sends nothing: its lease lapsed
/// after its claim. Once the old owner's window is over, replica 1 re-sends: one refund.
#[tokio::test]
async fn a_replica_frozen_before_its_first_byte_sends_nothing_once_its_lease_lapsed() {
    let id = op_id("wf-late-send");
    let lookup = format!("GET /v1/refunds?key={}", opaque_key(&id));
    let nothing = serde_json::json!({ "data": [] });
    let behavior = Behavior::fixed(200, "refunded").read(&lookup, 200, nothing);
    let provider = FakeProvider::start_tls(behavior).await;
    let replicas = Replicas::start(looked_up(&provider), 2).await;
    provider.hold_handshakes();
    let pending = refund_in_background(&replicas[0], "wf-late-send", "amount=500");
    // Connecting means the claim is committed.
    provider.wait_for_connections(1).await;
    assert_eq!(replicas[1].op_json(&id).await["state"], "in_flight");
    replicas[0].pause();

    replicas[1].until_state(&id, "unknown").await;
    let orphaned_at = Instant::now();
    // The frozen replica's handshake completes in its kernel: its connection is ready.
    provider.release_handshakes();
    // A second and a half after the orphaning: final by the orphaning's clock, not by the
    // old owner's window (its dispatch plus 4 s plus a second).
    tokio::time::sleep_until((orphaned_at + Duration::from_millis(1500)).into()).await;
    let early = refund(&replicas[1], "wf-late-send", "amount=500").await;
    let body = problem(&early, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_eq!(
        posts(&provider),
        0,
        "nothing re-sent inside the old owner's window"
    );

    replicas[0].resume();
    let late = pending
        .await
        .expect("task")
        .expect("the woken replica answers");
    let body = problem(&late, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_op_headers(&late, &id, "unknown", false);
    assert_eq!(
        posts(&provider),
        0,
        "the woken replica sent nothing: its lease lapsed after its claim"
    );

    // Past the old owner's window the lookup's "not found" is final: re-sent once.
    let held = (StatusCode::ACCEPTED, "outcome-unknown");
    let resent = refund_until(&replicas[1], "wf-late-send", StatusCode::OK, held).await;
    assert_eq!(resent.text(), "refunded");
    assert_eq!(posts(&provider), 1, "one refund");
    assert_eq!(provider.effects(), 1);
    for proxy in replicas.iter() {
        let replay = refund(proxy, "wf-late-send", "amount=500").await;
        assert_eq!(
            (replay.status, replay.text()),
            (StatusCode::OK, "refunded".into())
        );
    }
}

/// Replica 0's link to the database stalls (a relay that stops forwarding, every connection
/// left open) right after the database ran the statement that locks an operation inside its
/// claim's transaction; with `frozen`, replica 0 is then frozen (SIGSTOP) and its link
/// flows again. Either way the database ends that idle transaction within half a lease, so
/// the operation's lock goes and replica 1 claims and sends it; replica 0 sent nothing.
async fn a_stalled_claim(frozen: bool) {
    let provider = FakeProvider::start(Behavior::fixed(201, "done")).await;
    let replicas = Replicas::start(replica(&provider, "dedupe = \"key\""), 2).await;
    let id = op_id("wf-stalled");
    replicas.relay(0).stall_on(&id);
    let pending = refund_in_background(&replicas[0], "wf-stalled", "amount=500");
    let deadline = Instant::now() + PATIENCE;
    while !replicas.relay(0).stalled() {
        assert!(
            Instant::now() < deadline,
            "the claim never reached the database"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if frozen {
        replicas[0].pause();
        replicas.relay(0).unstall();
    }

    // The operation's lock is not pinned: replica 1 claims and sends it while replica 0 is
    // still stalled or frozen.
    let refused = (StatusCode::SERVICE_UNAVAILABLE, "ledger-unavailable");
    let claimed = refund_until(&replicas[1], "wf-stalled", StatusCode::CREATED, refused).await;
    assert_eq!(claimed.text(), "done");
    assert_op_headers(&claimed, &id, "succeeded", false);

    if frozen {
        replicas[0].resume();
    } else {
        replicas.relay(0).unstall();
    }
    // Replica 0's transaction was ended under it: it answers from the ledger (replica 1's
    // result) or refuses; it never sends.
    let first = pending.await.expect("task").expect("replica 0 answers");
    match first.status {
        StatusCode::CREATED => assert_op_headers(&first, &id, "succeeded", true),
        _ => drop(problem(
            &first,
            StatusCode::SERVICE_UNAVAILABLE,
            "ledger-unavailable",
        )),
    }
    assert_eq!(provider.request_count(), 1, "sent once, by replica 1");
    let replay = refund(&replicas[0], "wf-stalled", "amount=500").await;
    assert_eq!(
        (replay.status, replay.text()),
        (StatusCode::CREATED, "done".into())
    );
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn a_replica_whose_link_stalls_inside_a_transaction_does_not_pin_its_locks() {
    a_stalled_claim(false).await;
}

#[tokio::test]
async fn a_replica_frozen_inside_a_transaction_does_not_pin_its_locks() {
    a_stalled_claim(true).await;
}

/// A duplicate waiting on an in-flight operation whose ledger becomes unreachable meanwhile
/// is `503 ledger-unavailable` without `Idem-State` (docs/reference.md section 6.1: the state
/// could not be read), not the state it read before the ledger went away. (It answered with
/// that state: `Idem-State: in_flight`, or `succeeded` when the operation had just completed,
/// on a 503 whose stored answer the agent never got; found by the random kills.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_duplicate_cut_off_from_the_ledger_is_told_no_state() {
    let provider = FakeProvider::start(Behavior::echo().hold()).await;
    let replicas = Replicas::start(replica(&provider, ""), 1).await;
    let first = refund_in_background(&replicas[0], "wf-wait-cut", "amount=1");
    provider.wait_for_requests(1).await;
    let duplicate = refund_in_background(&replicas[0], "wf-wait-cut", "amount=1");
    // The duplicate reads the operation `in_flight` and polls it (every 75 ms); this is time
    // for it to get there (were it later, it would be refused before reading any state).
    tokio::time::sleep(Duration::from_millis(500)).await;
    replicas.cut();
    let resp = duplicate.await.expect("task").expect("the proxy answers");
    let body = problem(&resp, StatusCode::SERVICE_UNAVAILABLE, "ledger-unavailable");
    assert_eq!(resp.header("idem-state"), None, "{resp:?}");
    assert_eq!(body.get("state"), None, "{body}");
    assert_eq!(resp.header("idempotent-replayed"), Some("false"));

    replicas.restore();
    provider.release();
    first.await.expect("task").expect("the proxy answers");
    assert_eq!(provider.request_count(), 1, "the duplicate sent nothing");
}
