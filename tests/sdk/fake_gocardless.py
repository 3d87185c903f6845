"""A fake of GoCardless's API (https://developer.gocardless.com/api-reference) for payments.

JSON bodies wrapped in the resource's envelope (`{"payments": {...}}`), errors as
`{"error": {"type", "code", "message", "errors": [...]}}`. Dedupe as GoCardless documents it
(https://developer.gocardless.com/api-reference/#making-requests-idempotency-keys): a create
with an `Idempotency-Key` already used is a 409 `invalid_state` whose error has the reason
`idempotent_creation_conflict` and `links.conflicting_resource_id`, whatever its parameters.
While the first request still runs the fake answers the same (GoCardless documents no
in-progress answer: the fake assumes the resource is made in the first request's transaction).
"""

from fakebase import Answer, Created, FakeProvider


class FakeGoCardless(FakeProvider):
    routes = [
        ("POST", "/payments", "create_payment"),
        ("GET", "/payments/{id}", "get_payment"),
    ]

    def __init__(self):
        super().__init__()
        self.payments = {}
        self.key_to_id = {}

    def headers(self):
        return {"x-request-id": self.next_id("req_")}

    def create_payment(self, request):
        params = request.json()["payments"]
        key = self.key_of(request)
        return Created(key, params, lambda: self.commit_payment(key, params))

    def commit_payment(self, key, params):
        payment = {
            "id": self.next_id("PM"),
            "amount": params["amount"],
            "currency": params["currency"],
            "status": "pending_submission",
            "reference": params.get("reference"),
            "metadata": params.get("metadata", {}),
            "links": params["links"],
        }
        self.payments[payment["id"]] = payment
        self.key_to_id[key] = payment["id"]
        return payment, Answer(201, {"payments": payment}, self.headers())

    def get_payment(self, request):
        payment = self.payments.get(request.captures["id"])
        if payment is None:
            return self.error(404, "invalid_api_usage", "Resource not found", [
                {"reason": "resource_not_found", "message": "Resource not found"}])
        return Answer(200, {"payments": payment}, self.headers())

    def conflict(self, created):
        message = "A resource has already been created with this idempotency key"
        return self.error(409, "invalid_state", message, [{
            "reason": "idempotent_creation_conflict",
            "message": message,
            "links": {"conflicting_resource_id": self.key_to_id[created.key]},
        }])

    def reused(self, created, first_params, first_answer):
        # GoCardless never replays: a reused key is a conflict naming the resource.
        return "conflict", self.conflict(created)

    in_progress = conflict

    def error(self, status, type_, message, errors):
        return Answer(status, {"error": {
            "type": type_, "code": status, "message": message, "errors": errors,
            "documentation_url": f"https://developer.gocardless.com/api-reference#{type_}",
            "request_id": self.next_id("req_"),
        }}, self.headers())
