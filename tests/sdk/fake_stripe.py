"""A fake of Stripe's API (https://docs.stripe.com/api) for what the tests drive: refunds.

Form-encoded requests, JSON answers, errors in Stripe's `{"error": {...}}` envelope, a
`Request-Id` on every answer. Dedupe as Stripe documents it
(https://docs.stripe.com/api/idempotent_requests): the same `Idempotency-Key` with the same
parameters answers the first result again with `Idempotent-Replayed: true`; with other
parameters a 400 `idempotency_error`; while the first request runs, a 409
`idempotency_key_in_use`.
"""

from fakebase import Answer, Created, FakeProvider


class FakeStripe(FakeProvider):
    routes = [
        ("POST", "/v1/refunds", "create_refund"),
        ("GET", "/v1/refunds/{id}", "retrieve_refund"),
    ]

    def __init__(self):
        super().__init__()
        self.refunds = {}

    def headers(self):
        return {"request-id": self.next_id("req_")}

    def create_refund(self, request):
        form = request.form()
        return Created(self.key_of(request), form, lambda: self.commit_refund(form))

    def commit_refund(self, form):
        refund = {
            "id": self.next_id("re_"),
            "object": "refund",
            "amount": int(form["amount"]),
            "charge": form["charge"],
            "currency": "usd",
            "status": "succeeded",
            "metadata": {k[9:-1]: v for k, v in form.items() if k.startswith("metadata[")},
        }
        self.refunds[refund["id"]] = refund
        return refund, Answer(200, refund, self.headers())

    def retrieve_refund(self, request):
        refund = self.refunds.get(request.captures["id"])
        if refund is None:
            return self.error(404, "invalid_request_error", "No such refund", code="resource_missing")
        return Answer(200, refund, self.headers())

    def replayed(self, first):
        return Answer(200, first.body, {**first.headers, "idempotent-replayed": "true"})

    def mismatch(self, created):
        return self.error(
            400,
            "idempotency_error",
            "Keys for idempotent requests can only be used with the same parameters they were "
            f"first used with. Try using a key other than '{created.key}' if you meant to "
            "execute a different request.",
        )

    def in_progress(self, created):
        return self.error(
            409,
            "invalid_request_error",
            "There is currently another in-progress request using this Idempotent Key (that "
            "probably means you submitted twice, and the other request is still going "
            f"through): {created.key}. Please try again later.",
            code="idempotency_key_in_use",
        )

    def error(self, status, type_, message, code=None):
        error = {"type": type_, "message": message}
        if code:
            error["code"] = code
        return Answer(status, {"error": error}, self.headers())
