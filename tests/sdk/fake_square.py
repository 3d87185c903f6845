"""A fake of Square's API (https://developer.squareup.com/reference/square) for payments.

JSON requests and answers; errors as `{"errors": [{"category", "code", "detail", "field"}]}`.
The idempotency key is the body's `idempotency_key`, at most 45 characters for CreatePayment
(https://developer.squareup.com/reference/square/payments-api/create-payment): a longer one is
a 400 `VALUE_TOO_LONG`, so a test proves the policy's `key_length`. The same key with the same
parameters answers the first payment again; with other parameters a 400
`IDEMPOTENCY_KEY_REUSED` (https://developer.squareup.com/docs/build-basics/common-api-patterns/idempotency);
while the first request still runs, a 409 `CONFLICT` (Square documents no in-progress answer:
this one is the fake's assumption, and the shipped policy leaves a 409 `unknown`).
"""

from fakebase import Answer, Created, FakeProvider

KEY_LIMIT = 45


class FakeSquare(FakeProvider):
    routes = [
        ("POST", "/v2/payments", "create_payment"),
        ("GET", "/v2/payments/{payment_id}", "get_payment"),
    ]

    def __init__(self):
        super().__init__()
        self.payments = {}

    def key_of(self, request):
        try:
            return request.json().get("idempotency_key")
        except ValueError:
            return None

    def create_payment(self, request):
        body = request.json()
        key = body.get("idempotency_key", "")
        if not key or len(key) > KEY_LIMIT:
            return self.error(
                400, "VALUE_TOO_LONG", f"Field must not be greater than {KEY_LIMIT} length",
                field="idempotency_key",
            )
        params = {k: v for k, v in body.items() if k != "idempotency_key"}
        return Created(key, params, lambda: self.commit_payment(params))

    def commit_payment(self, params):
        payment = {
            "id": self.next_id("sqpay_"),
            "status": "COMPLETED",
            "source_type": "CARD",
            "amount_money": params["amount_money"],
            "reference_id": params.get("reference_id"),
            "note": params.get("note"),
        }
        self.payments[payment["id"]] = payment
        return payment, Answer(200, {"payment": payment})

    def get_payment(self, request):
        payment = self.payments.get(request.captures["payment_id"])
        if payment is None:
            return self.error(404, "NOT_FOUND", "Could not find payment.", category="INVALID_REQUEST_ERROR")
        return Answer(200, {"payment": payment})

    def replayed(self, first):
        return Answer(first.status, first.body)

    def mismatch(self, created):
        return self.error(
            400, "IDEMPOTENCY_KEY_REUSED",
            "The idempotency key can only be retried with the same request data.",
        )

    def in_progress(self, created):
        return self.error(409, "CONFLICT", "A request with this idempotency key is in progress.")

    def error(self, status, code, detail, field=None, category="INVALID_REQUEST_ERROR"):
        error = {"category": category, "code": code, "detail": detail}
        if field:
            error["field"] = field
        return Answer(status, {"errors": [error]})
