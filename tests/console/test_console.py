"""The operator's console in headless Chromium, driven by tests/operators/console.rs.

Usage: python test_console.py '{"admin": URL, "token": T, "unknown": ID, "prepared": ID,
"resolved_body": TEXT, "artifacts": DIR}', or with "scenario": "correct" (and "corrected_body")
the second session: loading, UTC times, an unknown operation's fields and commands, the
empty-body checkbox and correcting a resolution.

It opens the page, gives a wrong token and then the right one when asked, finds both operations in the list, approves the
prepared one and resolves the unknown one as succeeded by clicking (confirmations included,
one cancelled first), and writes screenshots to DIR. The Rust test then checks through the
admin API and the agent's next request that the decisions took effect. Exit status 0 means
every step passed; anything else prints what failed. Uses Debian's /usr/bin/chromium, never a
downloaded browser.
"""

import json
import pathlib
import re
import sys

from playwright.sync_api import expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 30_000


def run(page, cfg, out):
    admin, unknown, prepared = cfg["admin"], cfg["unknown"], cfg["prepared"]
    posts = []
    page.on("request", lambda r: r.method == "POST" and posts.append(r))

    page.goto(admin + "/ui")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", "not-the-token")
    page.get_by_role("button", name="Continue").click()
    expect(page.locator("#error")).to_contain_text("refused that token")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", cfg["token"])
    page.get_by_role("button", name="Continue").click()
    expect(page.locator("#login")).to_be_hidden()

    # The list: both operations, the summary, and the ledger's text shown as text.
    ops = page.locator("#ops")
    expect(ops.get_by_role("link", name=unknown, exact=True)).to_be_visible()
    expect(ops.get_by_role("link", name=prepared, exact=True)).to_be_visible()
    assert ops.locator("em").count() == 0, "an operation ID was rendered as markup"
    summary = page.locator("#summary")
    expect(summary).to_contain_text("unknown")
    expect(summary).to_contain_text("oldest unknown")
    assert cfg["token"] not in page.url, "the token must never be in an address"
    assert page.evaluate("localStorage.length") == 0, "the token is kept for the tab only"
    page.screenshot(path=str(out / "console-list.png"), full_page=True)

    # The filter narrows the list to the unknown one.
    page.select_option("#filter-state", "unknown")
    page.get_by_role("button", name="Filter").click()
    expect(ops.get_by_role("link", name=prepared, exact=True)).to_have_count(0)
    expect(ops.get_by_role("link", name=unknown, exact=True)).to_be_visible()
    page.select_option("#filter-state", "")
    page.get_by_role("button", name="Filter").click()

    # Approve the prepared operation, with the parameters in front of the operator.
    ops.get_by_role("link", name=prepared, exact=True).click()
    expect(page.locator("#op-title")).to_have_text(prepared)
    fields = page.locator("#approval-fields")
    expect(row(fields, "amount")).to_have_text("1000")
    expect(row(fields, "description")).to_have_text("<i>Weekly</i>")
    expect(row(fields, "metadata[trace_id]")).to_have_text("[masked]")
    expect(row(fields, "card[cvc]")).to_have_text("[masked]")
    assert fields.locator("i").count() == 0, "a request value was rendered as markup"
    page.screenshot(path=str(out / "console-operation.png"), full_page=True)
    page.locator("#approve").click()
    confirm(page, prepared)
    expect(page.locator("#op-state")).to_contain_text("approval: approved")
    expect(page.locator("#approve-form")).to_be_hidden()

    # Resolve the unknown one: cancel once (nothing changes), then confirm.
    page.get_by_role("link", name="All operations").click()
    ops.get_by_role("link", name=unknown, exact=True).click()
    expect(page.locator("#op-title")).to_have_text(unknown)
    expect(page.locator("#resolve")).to_be_visible()
    page.check("#outcome-succeeded")
    page.fill("#resolve-status", "200")
    page.fill("#resolve-body", cfg["resolved_body"])
    page.fill("#resolve-reason", "found in the provider's dashboard")
    page.locator("#resolve-submit").click()
    expect(page.locator("#confirm")).to_be_visible()
    page.locator("#confirm-cancel").click()
    expect(page.locator("#confirm")).to_be_hidden()
    expect(page.locator("#op-state")).to_contain_text("unknown")
    page.locator("#resolve-submit").click()
    confirm(page, unknown)
    expect(page.locator("#op-state")).to_contain_text("succeeded")
    expect(page.locator("#resolve-form")).to_be_hidden()
    expect(page.locator("#correct-open")).to_be_visible()
    expect(page.locator("#op-response pre")).to_contain_text('"resolved": true')
    expect(page.locator("#op-events")).to_contain_text("operator.resolved")
    page.screenshot(path=str(out / "console-resolved.png"), full_page=True)

    # The page's own decisions came from the admin listener's own origin (which is why they
    # pass the rule that refuses every other Origin), with the token in a header.
    posts = [dict(r.all_headers(), url=r.url) for r in posts]
    assert [r.get("origin") for r in posts] == [admin, admin], posts
    assert all(r["authorization"] == "Bearer " + cfg["token"] for r in posts), posts
    assert all(cfg["token"] not in r["url"] for r in posts), posts


def run_correct(page, cfg, out):
    """Loading..., UTC times, the unknown operation's fields, held retries and commands, the
    empty-body refusal shown in the form, the checkbox, then correcting the resolution."""
    admin, unknown = cfg["admin"], cfg["unknown"]
    page.add_init_script(
        "sessionStorage.setItem('idemproxy.admin-token', %s)" % json.dumps(cfg["token"])
    )
    held = []

    def listing(url):
        return "/ops?" in url

    def hold(route):
        held.append(route)

    page.route(listing, hold)
    page.goto(admin + "/ui")
    # "Loading..." until the first fetch answers, and nothing else meanwhile.
    loading = page.locator("#loading")
    expect(loading).to_be_visible()
    expect(loading).to_have_text("Loading…")
    for _ in range(WAIT_MS // 50):
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the console never asked for the list"
    expect(loading).to_be_visible()
    expect(page.locator("#list-view")).to_be_hidden()
    for route in held:
        route.continue_()
    page.unroute(listing)
    expect(loading).to_be_hidden()

    # Every time in UTC, ISO 8601, though the browser's zone is New York.
    ops = page.locator("#ops")
    expect(ops.get_by_role("link", name=unknown, exact=True)).to_be_visible()
    created = ops.locator("tbody tr td:nth-child(5)").first.text_content()
    assert ISO.fullmatch(created), created
    expect(page.locator("#status")).to_have_text(STATUS)

    ops.get_by_role("link", name=unknown, exact=True).click()
    expect(page.locator("#op-title")).to_have_text(unknown)
    fields = page.locator("#operator-fields")
    expect(row(fields, "amount")).to_have_text("5")
    expect(row(fields, "card[cvc]")).to_have_text("[masked]")
    expect(page.locator("#held")).to_contain_text("Held retries: 1")
    expect(page.locator("#resolve-commands")).to_contain_text(
        "idemproxy ops resolve " + unknown + " --failed --reason TEXT"
    )
    for time in page.locator("#op-events time").all_text_contents():
        assert ISO.fullmatch(time), time

    # An empty 200 without the checkbox: the 400's words in the form, nothing resolved.
    page.fill("#resolve-status", "200")
    page.fill("#resolve-body", "")
    page.locator("#resolve-submit").click()
    confirm(page, unknown)
    expect(page.locator("#resolve-error")).to_contain_text("empty")
    expect(page.locator("#resolve-error")).to_contain_text("Nothing was recorded")
    expect(page.locator("#op-state")).to_contain_text("unknown")
    page.check("#resolve-empty")
    page.locator("#resolve-submit").click()
    confirm(page, unknown)
    expect(page.locator("#op-state")).to_contain_text("succeeded")
    expect(page.locator("#resolve-error")).to_be_hidden()
    expect(page.locator("#op-response")).to_contain_text("0 bytes")

    # Correct it, with confirmation: the provider's object replaces the empty answer.
    expect(page.locator("#resolve-form")).to_be_hidden()
    page.locator("#correct-open").click()
    page.uncheck("#resolve-empty")
    page.fill("#resolve-body", cfg["corrected_body"])
    page.fill("#resolve-reason", "the object was in the dashboard")
    page.locator("#resolve-submit").click()
    expect(page.locator("#confirm-text")).to_contain_text("Correct the resolution")
    confirm(page, unknown)
    expect(page.locator("#op-events")).to_contain_text("operator.re_resolved")
    expect(page.locator("#op-response pre")).to_contain_text('"corrected": true')
    page.screenshot(path=str(out / "console-corrected.png"), full_page=True)


ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
STATUS = re.compile(r"Updated \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ;")


def row(table, name):
    """The value cell of the approval-fields row named `name`."""
    return table.locator("tr", has=table.page.locator("th", has_text=name)).locator("td")


def confirm(page, operation_id):
    dialog = page.locator("#confirm")
    expect(dialog).to_be_visible()
    expect(page.locator("#confirm-text")).to_contain_text(operation_id)
    page.locator("#confirm-ok").click()
    expect(dialog).to_be_hidden()


def main():
    cfg = json.loads(sys.argv[1])
    out = pathlib.Path(cfg["artifacts"])
    out.mkdir(parents=True, exist_ok=True)
    problems = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        # A zone other than UTC, so a time shown in the browser's own zone would show.
        page = browser.new_page(
            viewport={"width": 1280, "height": 900}, timezone_id="America/New_York"
        )
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        page.on("pageerror", lambda e: problems.append("page error: %s" % e))
        page.on(
            "console",
            lambda m: m.type == "error"
            and "401" not in m.text
            # The refused empty-body resolution is one on purpose.
            and "400 (Bad Request)" not in m.text
            and problems.append("console error: %s" % m.text),
        )
        try:
            (run_correct if cfg.get("scenario") == "correct" else run)(page, cfg, out)
        except Exception:
            page.screenshot(path=str(out / "console-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    if problems:
        sys.exit("the page reported errors (a CSP violation?):\n" + "\n".join(problems))
    print("console: every step passed; screenshots in", out)


if __name__ == "__main__":
    main()
