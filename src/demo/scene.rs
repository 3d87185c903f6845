//! One part's cast: a fake provider, the proxy in front of it, and the agent's refund step.
//!
//! It owns what a part needs to act and to check: the operation ID the proxy should derive,
//! the agent's calls (each with a fresh SDK key, as SDKs make them) and the provider's record
//! of the refund it really made. It never prints and never judges an answer.

use std::sync::atomic::{AtomicU32, Ordering};

use super::DemoError;
use super::agent::{Agent, Received, Refund};
use super::provider::FakeProvider;
use super::stage::{ROUTE, Stage};

/// One provider, one agent workflow: what a part needs to send and to check.
pub struct Scene<'a> {
    pub stage: &'a Stage,
    pub agent: &'a Agent,
    pub provider: &'a FakeProvider,
    pub name: &'static str,
    pub refund: Refund,
    /// How many calls the agent's SDK has made (each gets a fresh key of its own).
    calls: AtomicU32,
}

impl<'a> Scene<'a> {
    pub fn new(
        stage: &'a Stage,
        agent: &'a Agent,
        provider: &'a FakeProvider,
        name: &'static str,
        workflow: &'static str,
        charge: &'static str,
    ) -> Scene<'a> {
        let refund = Refund {
            workflow,
            charge,
            amount: 500,
            step: 2,
        };
        Scene {
            stage,
            agent,
            provider,
            name,
            refund,
            calls: 0.into(),
        }
    }

    /// The operation ID the proxy derives for this scene's refund.
    pub fn operation_id(&self) -> String {
        let r = &self.refund;
        format!(
            "{}/{ROUTE}/{}:{}:refund:{}",
            self.name, r.workflow, r.charge, r.step
        )
    }

    /// The agent sends `refund` through the proxy, with a fresh SDK key as SDKs do.
    pub async fn send(&self, refund: &Refund) -> Result<Received, DemoError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let sdk_key = format!("sdk-generated-{}-{n}", self.name);
        let proxy = self.stage.bound.proxy;
        self.agent.refund(proxy, self.name, refund, &sdk_key).await
    }

    /// The refund the provider really made first, as its dashboard shows it.
    pub fn first_refund_id(&self) -> Option<String> {
        let refund = self.provider.refund(1)?;
        refund.get("id")?.as_str().map(str::to_string)
    }
}
