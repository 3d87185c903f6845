//! Named crash points: places in the request path and the background work where a test can
//! make the process die on the spot, to prove that every crash window keeps the guarantees
//! (docs/guarantees.md, "Every crash window", lists each point and what it means).
//!
//! Compiled only with the cargo feature `failpoints` (the `fail` crate): without it
//! `crash_point!` expands to nothing and the shipped binary holds none of this. With it, the
//! points named in the `FAILPOINTS` environment variable, in the `fail` crate's own syntax
//! (`claim.after_commit=return`, `ledger.staged=1*off->return`, several separated by `;`), are
//! armed when the proxy is ready to serve (`arm`, before its ready line): a point armed with
//! `return` aborts the process when reached, running no destructor and flushing nothing, as a
//! power cut or a SIGKILL would. It must never do anything else: a crash point never changes
//! what the code does when it is not armed.

/// Dies here when the crash point `$name` is armed (see the module's documentation); nothing
/// at all without the `failpoints` feature.
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        $crate::crash::reached($name);
    };
}

/// Arms the crash points named in `FAILPOINTS` for the rest of the process's life; nothing
/// without the `failpoints` feature. Panics on a `FAILPOINTS` the `fail` crate cannot parse.
pub fn arm() {
    #[cfg(feature = "failpoints")]
    std::mem::forget(fail::FailScenario::setup());
}

/// The point `name` is reached: aborts the process if it is armed with `return`.
#[cfg(feature = "failpoints")]
pub fn reached(name: &'static str) {
    fail::eval(name, |_| std::process::abort());
}
