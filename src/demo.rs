//! `idemproxy demo`: a lost-response refund, end to end, offline, in one process.
//!
//! This module owns the story: two fake refund providers (one deduplicates on the key, one
//! cannot), the real proxy in front of them with a temporary ledger, and an agent that retries
//! its refund step. It prints each step in plain words and checks every answer against what
//! the story expects; the exit code says whether the product behaved. It never touches the
//! network beyond 127.0.0.1, never reads a configuration file and leaves nothing on disk.
//!
//! # Layout
//! - `provider`: the fake refund provider and its books (effects, keys, lost answers).
//! - `stage`: the proxy, configured in code, serving on loopback with a temporary ledger.
//! - `agent`: the HTTP client that sends the refund through the proxy.
//! - `scene`: one part's cast: provider, proxy, agent and the refund step.
//! - `operator`: the person who resolves an operation the proxy holds as unknown.
//! - `story`: the narration and the checks behind the exit code.

mod agent;
mod operator;
mod provider;
mod scene;
mod stage;
mod story;

use std::io::Write;

use serde_json::Value;

use crate::policy::{Dedupe, KeyFormat};
use agent::{Agent, Received, Refund};
use provider::FakeProvider;
use scene::Scene;
use stage::{Stage, Upstreamed};
use story::{Expect, Story};

/// Why the demo did not end as the story expects.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("the demo could not start: {0}")]
    Setup(String),
    #[error("the request to {uri} broke: {why}")]
    Exchange { uri: String, why: String },
    #[error("{0} thing(s) did not go as the story expects")]
    Differed(usize),
}

/// The provider that deduplicates on `Idempotency-Key`, like Stripe.
const DEDUPES: &str = "payments";
/// The provider that cannot deduplicate (`dedupe = "none"`).
const CANNOT: &str = "bank";

/// Runs both parts, writing the story to `out`. `Ok` only if each provider made exactly one
/// refund and every answer was the one the story expects; otherwise the differences are
/// written to `out` and counted in `DemoError::Differed`.
pub async fn run(out: &mut (dyn Write + Send)) -> Result<(), DemoError> {
    let setup = |e: std::io::Error| DemoError::Setup(e.to_string());
    let dedupes = FakeProvider::start(true).await.map_err(setup)?;
    let cannot = FakeProvider::start(false).await.map_err(setup)?;
    let stage = Stage::start(&[
        Upstreamed {
            name: DEDUPES,
            addr: dedupes.addr(),
            dedupe: Dedupe::Key,
        },
        Upstreamed {
            name: CANNOT,
            addr: cannot.addr(),
            dedupe: Dedupe::None,
        },
    ])
    .await?;
    let mut story = Story::new(out);
    intro(&mut story);
    let agent = Agent::new();
    let first = Scene::new(&stage, &agent, &dedupes, DEDUPES, "wf-81", "ch_1");
    part_one(&mut story, &first).await;
    let second = Scene::new(&stage, &agent, &cannot, CANNOT, "wf-82", "ch_2");
    part_two(&mut story, &second).await;
    drop(agent);
    stage.stop().await;
    verdict(&mut story)
}

fn intro(story: &mut Story) {
    story
        .line("idemproxy demo: an agent refunds a charge, and the answer is lost on the way back.");
    story.line("Everything runs here, offline: fake refund providers, the proxy with its ledger");
    story.line(
        "in a temporary folder, and an agent that retries the step as a workflow runtime does.",
    );
}

fn verdict(story: &mut Story) -> Result<(), DemoError> {
    story.line("");
    let differences = story.differences().to_vec();
    if differences.is_empty() {
        story.line("One refund per provider, however often the agent retried.");
        return Ok(());
    }
    story.line("The demo did not go as expected:");
    for difference in &differences {
        story.line(format!("  - {difference}"));
    }
    Err(DemoError::Differed(differences.len()))
}

fn dollars(cents: u64) -> String {
    format!("${}.{:02}", cents / 100, cents % 100)
}

/// Checks an answer, and that it names this scene's operation.
fn check(story: &mut Story<'_>, scene: &Scene<'_>, answer: &Received, expect: Expect) {
    story.check(answer, expect);
    let id = scene.operation_id();
    story.expect(
        "Idem-Operation-Id",
        id.as_str(),
        answer.header("idem-operation-id"),
    );
}

/// The answer to a lost response: the outcome cannot be known.
const UNKNOWN: Expect = Expect {
    status: 202,
    state: "unknown",
    replayed: "false",
    problem: Some("outcome-unknown"),
};

/// A refund answered from a record (the provider's or the proxy's).
const REPLAYED: Expect = Expect {
    status: 200,
    state: "succeeded",
    replayed: "true",
    problem: None,
};

/// Step 1 of both parts: the first request, whose answer the provider loses.
async fn lost_answer(story: &mut Story<'_>, scene: &Scene<'_>) -> Result<(), DemoError> {
    let r = &scene.refund;
    story.line(format!("Operation ID: {}", scene.operation_id()));
    story.line("  (from the X-Workflow-Id header, the charge and the workflow step)");
    story.step(format!(
        "The agent asks for a refund of {} on charge {}.",
        dollars(r.amount),
        r.charge
    ));
    let answer = scene.send(r).await?;
    if let Some(made) = scene.first_refund_id() {
        story.note(format!(
            "The provider makes refund {made}, then the connection drops before the answer arrives."
        ));
    }
    story.answer(&answer);
    check(story, scene, &answer, UNKNOWN);
    story.expect("the provider's refunds", 1, scene.provider.effects());
    story.on_track()?;
    story.note("The refund may or may not have happened: the proxy says so instead of guessing.");
    Ok(())
}

/// Ends a part: a broken exchange is a difference too (one that went off track has said so
/// already), then the provider's effect count, the line the demo is about.
fn end_part(story: &mut Story<'_>, scene: &Scene<'_>, told: Result<(), DemoError>) {
    match told {
        Ok(()) | Err(DemoError::Differed(_)) => {}
        Err(broke) => {
            story.note("This is not what should happen; the story stops here (see the end).");
            story.differed(broke);
        }
    }
    let effects = scene.provider.effects();
    let requests = match scene.provider.requests() {
        1 => "1 request".to_string(),
        n => format!("{n} requests"),
    };
    story.line(format!("provider effects: {effects}"));
    story.note(format!("({requests} reached the provider)"));
    story.expect("the provider's effect count", 1, effects);
}

/// Part 1: the provider deduplicates on the key the proxy sends on every attempt.
async fn part_one(story: &mut Story<'_>, scene: &Scene<'_>) {
    story.part("a provider that deduplicates on Idempotency-Key (like Stripe)");
    let told = async {
        lost_answer(story, scene).await?;
        why_202(story);
        provider_replay(story, scene).await?;
        from_ledger(story, scene).await?;
        conflict(story, scene).await
    }
    .await;
    end_part(story, scene, told);
}

/// Part 1, after step 1: why the demo's "not yet" answer is a 202 and the shipped policies'
/// a 503 (docs/policies.md, "Writing a policy for a new provider").
fn why_202(story: &mut Story<'_>) {
    story.note("`next: retry_same` tells the agent to send the same request again: this");
    story.note("provider deduplicates, so the proxy will re-send it with the same key.");
    story.note("This demo answers 202, the default pending_status, because its agent reads");
    story.note("the proxy's answers itself. The shipped policies answer 503 with Retry-After:");
    story.note("official SDKs (stripe-python and others) take any 2xx for the refund they asked");
    story.note("for, while a 503 makes them wait and retry. `idemproxy check` warns about 202.");
}

/// Part 1, step 2: the retry carries the same key, and the provider deduplicates.
async fn provider_replay(story: &mut Story<'_>, scene: &Scene<'_>) -> Result<(), DemoError> {
    story.step("The agent's runtime retries the step. Its SDK makes up a new Idempotency-Key,");
    story.note("but the proxy sends the operation's own key, the same on every attempt.");
    let answer = scene.send(&scene.refund).await?;
    story.answer(&answer);
    check(story, scene, &answer, REPLAYED);
    story.expect(
        "the refund",
        scene.first_refund_id().as_deref(),
        answer.refund_id(),
    );
    let key = crate::identity::key(&scene.operation_id(), KeyFormat::Opaque, 64);
    let keys = vec![Some(key.clone()); 2];
    story.expect("the keys the provider saw", keys, scene.provider.keys());
    story.on_track()?;
    story.note(format!(
        "(The provider saw Idempotency-Key {}... both times: the sha256 of the ID.)",
        key.get(..16).unwrap_or(&key)
    ));
    story.note("The provider knew the key and returned the refund it had already made;");
    story.note("the proxy recorded it as succeeded before answering.");
    Ok(())
}

/// Part 1, step 3: a further retry never reaches the provider.
async fn from_ledger(story: &mut Story<'_>, scene: &Scene<'_>) -> Result<(), DemoError> {
    story.step("The agent retries once more.");
    let before = scene.provider.requests();
    let answer = scene.send(&scene.refund).await?;
    story.answer(&answer);
    check(story, scene, &answer, REPLAYED);
    story.expect(
        "the refund",
        scene.first_refund_id().as_deref(),
        answer.refund_id(),
    );
    story.expect("the provider's requests", before, scene.provider.requests());
    story.on_track()?;
    story.note("Answered from the ledger: the provider was not called.");
    Ok(())
}

/// Part 1, step 4: the same step with another amount is refused.
async fn conflict(story: &mut Story<'_>, scene: &Scene<'_>) -> Result<(), DemoError> {
    let changed = Refund {
        amount: 900,
        ..scene.refund.clone()
    };
    story.step(format!(
        "A confused agent retries the same step with {} instead of {}.",
        dollars(changed.amount),
        dollars(scene.refund.amount)
    ));
    let before = scene.provider.requests();
    let answer = scene.send(&changed).await?;
    story.answer(&answer);
    let expect = Expect {
        status: 409,
        state: "succeeded",
        replayed: "false",
        problem: Some("parameter-mismatch"),
    };
    check(story, scene, &answer, expect);
    story.expect(
        "differing_fields",
        vec!["amount".to_string()],
        answer.differing_fields(),
    );
    story.expect("the provider's requests", before, scene.provider.requests());
    story.on_track()?;
    story.note("Same operation, other parameters: refused (409), and nothing was sent.");
    Ok(())
}

/// Part 2: the provider cannot deduplicate, so only a person can settle the unknown.
async fn part_two(story: &mut Story<'_>, scene: &Scene<'_>) {
    story.part("a provider that cannot deduplicate (dedupe = \"none\")");
    let told = async {
        lost_answer(story, scene).await?;
        held(story, scene).await?;
        resolve(story, scene).await?;
        resolved(story, scene).await
    }
    .await;
    end_part(story, scene, told);
}

/// Part 2, step 2: the retry is held; nothing reaches the provider.
async fn held(story: &mut Story<'_>, scene: &Scene<'_>) -> Result<(), DemoError> {
    story.step("The agent's runtime retries the step.");
    let answer = scene.send(&scene.refund).await?;
    story.answer(&answer);
    check(story, scene, &answer, UNKNOWN);
    story.expect("the provider's requests", 1, scene.provider.requests());
    story.on_track()?;
    story.note("Sending it again could refund twice, so the proxy holds the operation as");
    story.note("unknown and sends nothing until someone who can check resolves it.");
    story.note("(It also logged a warning for operators: only a person can settle this one.)");
    Ok(())
}

/// Part 2, step 3: an operator finds the refund at the provider and resolves the operation
/// through the admin API.
async fn resolve(story: &mut Story<'_>, scene: &Scene<'_>) -> Result<(), DemoError> {
    let refund = scene.provider.refund(1).unwrap_or_default();
    let id = refund.get("id").and_then(|v| v.as_str()).unwrap_or("?");
    story.step(format!(
        "An operator checks the provider's dashboard, finds refund {id} and resolves the"
    ));
    story.note(
        "operation with it (what `idemproxy ops resolve ID --succeeded --body-file F` does):",
    );
    let op_id = scene.operation_id();
    let body = operator::resolve_body(&refund, &format!("refund {id} is in the dashboard"));
    story.note(format!("POST {}", operator::resolve_path(&op_id)));
    story.note(format!(
        "     {{\"outcome\":\"succeeded\",\"status\":200,\"body\":\"<refund {id} as JSON>\",...}}"
    ));
    let stage = scene.stage;
    let token = stage.admin_token.as_ref().map(|t| t.as_str());
    let answer =
        operator::resolve_succeeded(scene.agent, stage.bound.admin, token, &op_id, &body).await?;
    let state = answer.body.get("state").and_then(Value::as_str);
    story.note(format!(
        "admin: {} (state: {})",
        answer.status,
        state.unwrap_or("-")
    ));
    story.expect("the admin API's status", 200, answer.status.as_u16());
    story.expect("the resolved state", Some("succeeded"), state);
    story.on_track()?;
    story.note("The ledger now holds the operation as succeeded, with that refund as its answer.");
    Ok(())
}

/// Part 2, step 4: the next retry gets the operator's answer.
async fn resolved(story: &mut Story<'_>, scene: &Scene<'_>) -> Result<(), DemoError> {
    story.step("The agent retries the step again.");
    let answer = scene.send(&scene.refund).await?;
    story.answer(&answer);
    check(story, scene, &answer, REPLAYED);
    story.expect(
        "the refund",
        scene.first_refund_id().as_deref(),
        answer.refund_id(),
    );
    story.expect("the provider's requests", 1, scene.provider.requests());
    story.on_track()?;
    story.note("The operator's answer, from the ledger: the provider was not called.");
    Ok(())
}
