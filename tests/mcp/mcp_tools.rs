//! The official MCP SDK's client and server through the proxy: a guarded tool runs once
//! however often it is called, in both wire forms (`legacy` sessions and the 2026-07-28 single
//! exchange) and both answer modes (JSON and `text/event-stream`); an unknown outcome is held
//! as a tool error until an operator resolves it; changed arguments are a tool error naming
//! the argument; everything else passes through; a tool's own error is `failed` and runs again.

use serde_json::{Value, json};

use crate::common::Proxy;
use crate::sdk::{Answers, McpServer, WIRE_FORMS, ops, session};

fn is_error(result: &Value) -> bool {
    result["isError"] == true
}

async fn state(proxy: &Proxy, id: &str) -> String {
    proxy.op_state(id).await
}

#[tokio::test]
async fn a_repeated_call_runs_the_tool_once_in_both_wire_forms_and_answer_modes() {
    for answers in [Answers::Json, Answers::Sse] {
        let server = McpServer::start(answers).await;
        let proxy = server.proxy("").await;
        for (i, mode) in WIRE_FORMS.iter().enumerate() {
            let workflow = format!("wf-{mode}");
            let call = ["refund", "invoice=in_1", "amount=500"];
            // Twice in one session (new JSON-RPC ids), then in a new session.
            let both: Vec<&str> = [&call[..], &["--"], &call[..]].concat();
            let first = session(&proxy, mode, &workflow, &both).await;
            let again = session(&proxy, mode, &workflow, &call).await;
            let text = &first[0]["text"];
            assert!(!is_error(&first[0]), "{answers:?} {mode}: {first:?}");
            assert!(
                text.as_str().unwrap().starts_with("refunded 500 of in_1"),
                "{text}"
            );
            assert_eq!(
                first[1], first[0],
                "{answers:?} {mode}: the replay in the session"
            );
            assert_eq!(
                again[0], first[0],
                "{answers:?} {mode}: the replay in a new session"
            );
            assert_eq!(
                server.effects(),
                i + 1,
                "{answers:?} {mode}: one run per workflow"
            );
            let id = format!("billing/refund/{workflow}:in_1");
            let op = proxy.op_json(&id).await;
            assert_eq!(
                (op["state"].as_str(), op["attempts"].as_u64()),
                (Some("succeeded"), Some(1))
            );
        }
        let metrics = crate::common::send(http::Method::GET, &proxy.admin_url("/metrics"), &[], "")
            .await
            .expect("metrics")
            .text();
        let replayed =
            r#"idemproxy_requests_total{provider="billing",route="refund",outcome="replayed"} 4"#;
        assert!(metrics.contains(replayed), "{metrics}");
    }
}

#[tokio::test]
async fn a_tool_slower_than_the_timeout_is_held_until_an_operator_resolves_it() {
    for (answers, mode) in [(Answers::Json, "legacy"), (Answers::Sse, "auto")] {
        let server = McpServer::start(answers).await;
        let proxy = server.proxy("timeout = \"1s\"").await;
        server.slow(30);
        let call = ["refund", "invoice=in_9", "amount=900"];
        let first = session(&proxy, mode, "wf-slow", &call).await;
        let meta = &first[0]["meta"];
        assert!(is_error(&first[0]), "{mode}: {first:?}");
        assert_eq!(
            meta["type"], "urn:idemproxy:outcome-unknown",
            "{mode}: {first:?}"
        );
        assert_eq!(meta["state"], "unknown");
        let text = first[0]["text"].as_str().unwrap();
        assert!(text.contains("cannot yet confirm"), "{text}");
        server.wait_for_effects(1).await;

        // Held: nothing is sent until an operator says what happened.
        let held = session(&proxy, mode, "wf-slow", &call).await;
        assert!(is_error(&held[0]), "{mode}: {held:?}");
        assert_eq!(held[0]["meta"]["type"], "urn:idemproxy:outcome-unknown");
        assert_eq!(held[0]["meta"]["next"], "wait");
        let id = "billing/refund/wf-slow:in_9";
        assert_eq!(state(&proxy, id).await, "unknown");

        let result = json!({
            "content": [{"type": "text", "text": "refunded 900 of in_9 (seen at the bank)"}],
            "structuredContent": {"result": "refunded 900 of in_9 (seen at the bank)"},
        });
        let file = proxy.dir().path().join("result.json");
        std::fs::write(&file, result.to_string()).expect("result file");
        let file = file.to_string_lossy().into_owned();
        ops(
            &proxy,
            &["resolve", id, "--succeeded", "--body-file", &file],
        )
        .await;

        let replayed = session(&proxy, mode, "wf-slow", &call).await;
        assert!(!is_error(&replayed[0]), "{mode}: {replayed:?}");
        assert_eq!(
            replayed[0]["text"],
            "refunded 900 of in_9 (seen at the bank)"
        );
        assert_eq!(server.effects(), 1, "{mode}: the tool ran once");
    }
}

#[tokio::test]
async fn changed_arguments_are_a_tool_error_naming_the_argument_and_nothing_runs() {
    let server = McpServer::start(Answers::Sse).await;
    let proxy = server.proxy("").await;
    for (i, mode) in WIRE_FORMS.iter().enumerate() {
        let workflow = format!("wf-{mode}");
        let calls = [
            "refund",
            "invoice=in_2",
            "amount=200",
            "--",
            "refund",
            "invoice=in_2",
            "amount=201",
        ];
        let results = session(&proxy, mode, &workflow, &calls).await;
        assert!(!is_error(&results[0]), "{mode}: {results:?}");
        let changed = &results[1];
        assert!(is_error(changed), "{mode}: {results:?}");
        assert_eq!(changed["meta"]["type"], "urn:idemproxy:parameter-mismatch");
        assert_eq!(changed["meta"]["status"], 409);
        assert_eq!(changed["meta"]["differing_fields"], json!(["amount"]));
        assert!(
            changed["text"]
                .as_str()
                .unwrap()
                .contains("differing: amount"),
            "{changed}"
        );
        assert_eq!(
            server.effects(),
            i + 1,
            "{mode}: the changed call did not run"
        );
    }
}

#[tokio::test]
async fn everything_but_a_guarded_tool_passes_through() {
    for answers in [Answers::Json, Answers::Sse] {
        let server = McpServer::start(answers).await;
        let proxy = server.proxy("").await;
        for mode in WIRE_FORMS {
            let calls = [
                "list",
                "--",
                "lookup",
                "invoice=in_3",
                "--",
                "report",
                "invoice=in_3",
            ];
            let results = session(&proxy, mode, "wf-reads", &calls).await;
            assert_eq!(results[0], json!(["lookup", "refund", "report"]), "{mode}");
            assert_eq!(results[1]["text"], "0 refunds of in_3", "{mode}");
            assert_eq!(results[2]["text"], "report of in_3", "{mode}");
            if answers == Answers::Sse {
                assert_eq!(
                    results[2]["progress"], 2,
                    "{mode}: notifications stream through"
                );
            }
        }
        let ops = crate::common::send(http::Method::GET, &proxy.admin_url("/ops"), &[], "")
            .await
            .expect("ops")
            .json();
        assert_eq!(ops["ops"], json!([]), "nothing recorded");
        assert_eq!(server.effects(), 0);
    }
}

#[tokio::test]
async fn a_tool_that_answers_is_error_is_failed_and_runs_again() {
    let server = McpServer::start(Answers::Json).await;
    let proxy = server.proxy("").await;
    for (i, mode) in WIRE_FORMS.iter().enumerate() {
        let workflow = format!("wf-{mode}");
        let id = format!("billing/refund/{workflow}:in_4");
        let call = ["refund", "invoice=in_4", "amount=-5"];
        for attempt in 1..=2 {
            let result = session(&proxy, mode, &workflow, &call).await;
            assert!(is_error(&result[0]), "{mode}: {result:?}");
            assert_eq!(
                result[0]["meta"],
                Value::Null,
                "{mode}: the tool's own error"
            );
            assert_eq!(state(&proxy, &id).await, "failed");
            assert_eq!(server.effects(), 2 * i + attempt, "{mode}: run again");
        }
    }
}

#[tokio::test]
async fn notifications_reach_the_first_caller_and_only_the_response_is_stored() {
    let server = McpServer::start(Answers::Sse).await;
    let report = "\n[[route]]\nname = \"report\"\nmatch = \"tools/call report\"\n\
                  operation_id = \"{header:x-workflow-id}:{json:/params/arguments/invoice}\"\n";
    let proxy = Proxy::builder()
        .policy("billing", &format!("{}{report}", server.policy("")))
        .start()
        .await;
    for mode in WIRE_FORMS {
        let workflow = format!("wf-{mode}");
        let first = session(&proxy, mode, &workflow, &["report", "invoice=in_5"]).await;
        let again = session(&proxy, mode, &workflow, &["report", "invoice=in_5"]).await;
        assert_eq!(first[0]["progress"], 2, "{mode}: {first:?}");
        assert_eq!(
            again[0]["progress"], 0,
            "{mode}: a replay is the response alone"
        );
        assert_eq!(again[0]["text"], first[0]["text"]);
        let id = format!("billing%2Freport%2F{workflow}:in_5");
        let stored = crate::common::send(
            http::Method::GET,
            &proxy.admin_url(&format!("/ops/{id}/response")),
            &[],
            "",
        )
        .await
        .expect("stored response");
        assert_eq!(
            stored.header("content-type"),
            Some("application/json"),
            "{mode}"
        );
        assert_eq!(stored.header("mcp-session-id"), None, "{mode}");
        let message = stored.json();
        assert_eq!(
            message["result"]["content"][0]["text"], "report of in_5",
            "{message}"
        );
    }
}
