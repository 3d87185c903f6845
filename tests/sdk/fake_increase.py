"""A fake of Increase's API (https://increase.com/documentation/api) for account transfers.

JSON requests and answers; errors are flat problem documents (`type`, `title`, `status`,
`detail`). Dedupe as Increase documents it
(https://increase.com/documentation/idempotency-keys): the same `Idempotency-Key` with the
same arguments answers the first object again with `Idempotent-Replayed: true`; other
arguments are a 409 `idempotency_key_already_used_error` with `resource_id`; while the first
request still runs, a 409 `idempotency_key_already_used_error` too, `resource_id` null (Increase
documents no in-progress answer: this is the fake's assumption). List endpoints filter by
`idempotency_key`.
"""

from fakebase import Answer, Created, FakeProvider


class FakeIncrease(FakeProvider):
    routes = [
        ("POST", "/account_transfers", "create_transfer"),
        ("GET", "/account_transfers/{id}", "get_transfer"),
        ("GET", "/account_transfers", "list_transfers"),
    ]

    def __init__(self):
        super().__init__()
        self.transfers = {}

    def create_transfer(self, request):
        params = request.json()
        key = self.key_of(request)
        return Created(key, params, lambda: self.commit_transfer(key, params))

    def commit_transfer(self, key, params):
        transfer = {
            "id": self.next_id("account_transfer_"),
            "type": "account_transfer",
            "account_id": params["account_id"],
            "destination_account_id": params["destination_account_id"],
            "amount": params["amount"],
            "currency": "USD",
            "description": params["description"],
            "status": "complete",
            "idempotency_key": key,
            "created_at": "2026-12-01T10:00:00Z",
        }
        self.transfers[transfer["id"]] = transfer
        return transfer, Answer(200, transfer)

    def get_transfer(self, request):
        transfer = self.transfers.get(request.captures["id"])
        if transfer is None:
            return self.error(404, "object_not_found_error", "Could not find the object.")
        return Answer(200, transfer)

    def list_transfers(self, request):
        wanted = request.query.get("idempotency_key")
        data = [t for t in self.transfers.values() if wanted is None or t["idempotency_key"] == wanted]
        return Answer(200, {"data": data, "next_cursor": None})

    def replayed(self, first):
        return Answer(first.status, first.body, {"idempotent-replayed": "true"})

    def mismatch(self, created):
        first = self.by_key[created.key][1].body
        return self.error(
            409, "idempotency_key_already_used_error",
            "The idempotency key submitted has already been used.", resource_id=first["id"],
        )

    def in_progress(self, created):
        return self.error(
            409, "idempotency_key_already_used_error",
            "The idempotency key submitted has already been used.", resource_id=None,
        )

    def error(self, status, type_, detail, **extra):
        return Answer(status, {"type": type_, "title": detail, "status": status, "detail": detail, **extra})
