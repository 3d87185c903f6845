//! The demo's narration: numbered steps in plain words, and the checks behind the exit code.
//!
//! It owns how the story reads on a terminal and the list of every way the run differed from
//! what the story expects. It never decides what to expect: the parts say that. Writing to a
//! closed output is not an error here (the checks still decide the exit code).

use std::fmt::{Debug, Display};
use std::io::Write;

use super::DemoError;
use super::agent::Received;

/// What an answer should look like at one step.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    pub status: u16,
    pub state: &'static str,
    pub replayed: &'static str,
    /// The problem type (without `urn:idemproxy:`), or `None` for the provider's own answer.
    pub problem: Option<&'static str>,
}

/// The narrator, and the differences it noticed.
pub struct Story<'a> {
    out: &'a mut (dyn Write + Send),
    part: u32,
    step: u32,
    differences: Vec<String>,
    /// How many differences there were when the current part began.
    before_part: usize,
}

impl<'a> Story<'a> {
    pub fn new(out: &'a mut (dyn Write + Send)) -> Story<'a> {
        Story {
            out,
            part: 0,
            step: 0,
            differences: Vec::new(),
            before_part: 0,
        }
    }

    /// A line as is.
    pub fn line(&mut self, text: impl Display) {
        let _ = writeln!(self.out, "{text}");
    }

    /// Starts part `n`: a blank line, its title, and step numbering from 1.
    pub fn part(&mut self, title: &str) {
        self.part += 1;
        self.step = 0;
        self.before_part = self.differences.len();
        self.line("");
        self.line(format!("Part {}: {title}", self.part));
    }

    /// The next numbered step.
    pub fn step(&mut self, text: impl Display) {
        self.step += 1;
        self.line(format!("{}. {text}", self.step));
    }

    /// An indented line under the current step.
    pub fn note(&mut self, text: impl Display) {
        self.line(format!("   {text}"));
    }

    /// The proxy's answer with the headers that tell the story.
    pub fn answer(&mut self, answer: &Received) {
        let status = answer.status;
        let what = match (answer.problem(), answer.refund_id()) {
            (Some(problem), _) => format!(" ({problem})"),
            (None, Some(id)) => format!(", refund {id}"),
            (None, None) => String::new(),
        };
        self.note(format!("proxy: {status}{what}"));
        let fields = answer.differing_fields();
        if !fields.is_empty() {
            self.note(format!("       differing_fields: {fields:?}"));
        }
        if let Some(next) = answer.next() {
            self.note(format!("       next: {next}"));
        }
        let state = answer.header("idem-state");
        let replayed = answer.header("idempotent-replayed");
        self.note(format!(
            "       Idem-State: {state} | Idempotent-Replayed: {replayed}"
        ));
    }

    /// Records a difference when `got` is not `expected`.
    pub fn expect<T: PartialEq + Debug>(&mut self, what: &str, expected: T, got: T) {
        if expected != got {
            let at = format!("part {}, step {}", self.part, self.step);
            self.differences
                .push(format!("{at}: {what} was {got:?}, expected {expected:?}"));
        }
    }

    /// Checks status, state, replay flag and problem type of an answer.
    pub fn check(&mut self, answer: &Received, expect: Expect) {
        self.expect("the status", expect.status, answer.status.as_u16());
        self.expect("Idem-State", expect.state, answer.header("idem-state"));
        let replayed = answer.header("idempotent-replayed");
        self.expect("Idempotent-Replayed", expect.replayed, replayed);
        self.expect("the problem type", expect.problem, answer.problem());
    }

    /// Records something that went wrong outside any answer.
    pub fn differed(&mut self, what: impl Display) {
        let at = format!("part {}, step {}", self.part, self.step);
        self.differences.push(format!("{at}: {what}"));
    }

    /// `Ok` while the current part goes as expected. At the first difference the part stops
    /// (later steps would explain things that did not happen): `Differed`, said once.
    pub fn on_track(&mut self) -> Result<(), DemoError> {
        let off = self.differences.len() - self.before_part;
        if off == 0 {
            return Ok(());
        }
        self.note("This is not what should happen; the story stops here (see the end).");
        Err(DemoError::Differed(off))
    }

    /// Every difference noticed so far, in order.
    pub fn differences(&self) -> &[String] {
        &self.differences
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue, StatusCode};
    use serde_json::json;

    fn unknown() -> Received {
        let mut headers = HeaderMap::new();
        headers.insert("idem-state", HeaderValue::from_static("unknown"));
        headers.insert("idempotent-replayed", HeaderValue::from_static("false"));
        Received {
            status: StatusCode::ACCEPTED,
            headers,
            body: json!({"type": "urn:idemproxy:outcome-unknown"}),
        }
    }

    const UNKNOWN: Expect = Expect {
        status: 202,
        state: "unknown",
        replayed: "false",
        problem: Some("outcome-unknown"),
    };

    #[test]
    fn a_matching_answer_is_no_difference_and_is_told() {
        let mut out = Vec::new();
        let mut story = Story::new(&mut out);
        story.part("a title");
        story.step("the agent asks");
        story.answer(&unknown());
        story.check(&unknown(), UNKNOWN);
        assert!(story.differences().is_empty());
        assert!(story.on_track().is_ok());
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("Part 1: a title\n1. the agent asks\n"));
        assert!(text.contains("proxy: 202 Accepted (outcome-unknown)"));
        assert!(text.contains("Idem-State: unknown | Idempotent-Replayed: false"));
    }

    #[test]
    fn each_difference_names_its_step_and_both_values() {
        let mut out = Vec::new();
        let mut story = Story::new(&mut out);
        story.part("p");
        story.step("s1");
        story.step("s2");
        let expect = Expect {
            status: 200,
            state: "succeeded",
            ..UNKNOWN
        };
        story.check(&unknown(), expect);
        assert!(matches!(story.on_track(), Err(DemoError::Differed(2))));
        story.part("the next part starts on track");
        assert!(story.on_track().is_ok());
        assert_eq!(
            story.differences(),
            [
                "part 1, step 2: the status was 202, expected 200",
                "part 1, step 2: Idem-State was \"unknown\", expected \"succeeded\"",
            ]
        );
    }
}
