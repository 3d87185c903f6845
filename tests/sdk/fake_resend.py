"""A fake of Resend's API (https://resend.com/docs/api-reference) for sending email.

JSON requests and answers; errors as `{"statusCode", "name", "message"}`
(https://resend.com/docs/api-reference/errors). Dedupe as Resend documents it
(https://resend.com/docs/dashboard/emails/idempotency-keys): the same `Idempotency-Key` with
the same payload answers the first email's id again; another payload is a 409
`invalid_idempotent_request`; while the first request still runs, a 409
`concurrent_idempotent_requests`.
"""

from fakebase import Answer, Created, FakeProvider


class FakeResend(FakeProvider):
    routes = [
        ("POST", "/emails", "send_email"),
        ("GET", "/emails/{id}", "get_email"),
    ]

    def __init__(self):
        super().__init__()
        self.emails = {}

    def send_email(self, request):
        params = request.json()
        return Created(self.key_of(request), params, lambda: self.commit_email(params))

    def commit_email(self, params):
        email = {"id": self.next_id("4ef9a417-02e9-4d39-ad75-")}
        self.emails[email["id"]] = {**params, **email, "object": "email", "last_event": "sent"}
        return email, Answer(200, email)

    def get_email(self, request):
        email = self.emails.get(request.captures["id"])
        if email is None:
            return self.error(404, "not_found", "Email not found")
        return Answer(200, email)

    def replayed(self, first):
        return Answer(first.status, first.body)

    def mismatch(self, created):
        return self.error(
            409, "invalid_idempotent_request",
            "Same idempotency key used with a different request payload. Change your "
            "idempotency key or payload.",
        )

    def in_progress(self, created):
        return self.error(
            409, "concurrent_idempotent_requests",
            "Same idempotency key used while original request is still in progress. Try the "
            "request again later.",
        )

    def error(self, status, name, message):
        return Answer(status, {"statusCode": status, "name": name, "message": message})
