"""Schemathesis hooks for conformance/schemathesis.sh (docs/TESTING.md).

Two kinds, both narrow:

* Live reads wait: a long-poll or SSE request waits up to `waitMs` (default
  and maximum 25 s), a watch observation up to `timeoutMs`, a pull up to its
  body's `waitMs`. A few thousand cases cannot wait that long, so waits are
  bounded to WAIT_MS before a request is sent (a value that is not a whole
  number is left alone: it is there to be refused).

* The negative case of a bytes record's `minLength: 1` (an empty body) is
  sent as the JSON text `""`, which is a record: that is not the request the
  check meant; an empty body is refused (server/tests/openapi.rs).

* A few refusals of schema-valid requests depend on what no schema can state:
  server-issued tokens, the server's state, the clock, or a rule across
  fields or headers that JSON Schema cannot express. The positive-data check
  ("a schema-valid request is accepted") is dropped for exactly those
  answers, each recognised from the request that caused it, and for nothing
  else; every other check still judges the same responses.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import schemathesis
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.openapi.checks import RejectedPositiveData

WAIT_MS = 200
WAIT_PARAMETERS = ("waitMs", "timeoutMs")
# Cursors a client may write itself (docs/API.md §8); every other cursor is
# an opaque, authenticated token the server issued for one scope.
KNOWN_CURSORS = ("", "beginning", "now")
PRODUCER_HEADERS = ("producer-id", "producer-epoch", "producer-seq")
# Byte limits the schema can only state as character counts (maxLength).
BYTE_LIMITS = {
    "invalid_name": 512,
    "invalid_consumer_name": 128,
    "invalid_routing_key": 1024,
}


def _bounded(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value > WAIT_MS:
        return WAIT_MS
    if isinstance(value, str) and value.isascii() and value.isdigit() and int(value) > WAIT_MS:
        return str(WAIT_MS)
    return value


@schemathesis.hook
def before_call(context, case, kwargs):
    query = case.query if isinstance(case.query, dict) else None
    path = case.operation.path
    if path.endswith((":long-poll", ":sse")) or path.endswith("{watchKey}"):
        if query is None:
            query = case.query = {}
        for name in WAIT_PARAMETERS:
            if name in query:
                query[name] = _bounded(query[name])
            elif name == ("timeoutMs" if path.endswith("{watchKey}") else "waitMs"):
                query[name] = WAIT_MS
    if path.endswith(":pull") and isinstance(case.body, dict) and "waitMs" in case.body:
        case.body["waitMs"] = _bounded(case.body["waitMs"])


def _error(response) -> tuple[str | None, str]:
    """The product error's code and message."""
    try:
        error = response.json()["error"]
        return error["code"], error["message"]
    except Exception:
        return None, ""


def _headers(case) -> dict[str, str]:
    return {k.lower(): v for k, v in (case.headers or {}).items()}


def _query(case) -> dict[str, Any]:
    return case.query if isinstance(case.query, dict) else {}


def _body(case) -> Any:
    return case.body if isinstance(case.body, (dict, list)) else None


def _too_many_bytes(code: str, case) -> bool:
    """A value within `maxLength` characters but over the byte limit."""
    limit = BYTE_LIMITS[code]
    values = [
        *(str(v) for v in (case.path_parameters or {}).values()),
        str(_query(case).get("routingKey", "")),
        str(_headers(case).get("prisma-routing-key", "")),
    ]
    body = _body(case)
    if isinstance(body, dict):
        values += [str(body.get(k, "")) for k in ("routingKey", "deadLetterStream")]
    return any(len(v.encode("utf-8", "surrogatepass")) > limit for v in values)


def _expiry_in_the_past(body: Any) -> bool:
    try:
        at = datetime.datetime.fromisoformat(body["expiry"]["at"].replace("z", "Z"))
    except Exception:
        return False
    if at.tzinfo is None:
        return False
    return at <= datetime.datetime.now(datetime.timezone.utc)


def _duplicate_watch_names(body: Any) -> bool:
    try:
        names = [w["name"] for w in body["watches"]]
    except Exception:
        return False
    return len(names) != len(set(names))


def _settle_tokens(body: Any) -> int:
    if not isinstance(body, dict):
        return 0
    return sum(len(body.get(k) or []) for k in ("acks", "retries", "extends"))


def _inapplicable(case, code: str | None, message: str) -> bool:
    """Whether a refusal of a schema-valid request is one no schema can predict."""
    query, headers, body = _query(case), _headers(case), _body(case)
    path = case.operation.path
    if code == "invalid_cursor":
        # Opaque tokens: generated ones do not authenticate, and tokens
        # harvested from other answers belong to another scope.
        return str(query.get("cursor", "")) not in KNOWN_CURSORS
    if code == "invalid_producer":
        # Producer-Id, -Epoch and -Seq go together, and on a seal only with a
        # final record: OpenAPI cannot tie headers to each other or to the body.
        present = sum(h in headers for h in PRODUCER_HEADERS)
        plain_seal = path.endswith(":seal") and "final" not in (body or {})
        return present not in (0, len(PRODUCER_HEADERS)) or (present > 0 and plain_seal)
    if code == "producer_epoch_must_start_at_zero":
        # Depends on the producer's current epoch on the server.
        return True
    if code in ("unknown_dead_letter_stream", "dead_letter_sealed", "dead_letter_key_mismatch"):
        # Depends on another collection's existence, seal state and key.
        return True
    if code == "batch_unsupported_format":
        # Depends on the collection's format (a bytes collection has no batches).
        return True
    if code == "invalid_body" and path.endswith(":seal"):
        # A final record needs a JSON collection (the collection's format).
        return "needs a JSON collection" in message
    if code == "invalid_body" and path.endswith(":settle"):
        # At most 3,000 tokens across the three lists: a rule across arrays.
        return _settle_tokens(body) > 3000
    if code == "invalid_config" and path == "/v1/streams/{name}" and isinstance(body, dict):
        # "In the future" depends on the clock; unique watch names are a rule
        # across array items that JSON Schema cannot state.
        return _expiry_in_the_past(body) or _duplicate_watch_names(body)
    if code in BYTE_LIMITS:
        return _too_many_bytes(code, case)
    return False


def _not_sent_empty(case, response) -> bool:
    """An empty record the check meant, sent as something else than no bytes."""
    sent = getattr(response.request, "body", None) or b""
    return case.operation.path.endswith("/records") and case.body == "" and len(sent) > 0


@schemathesis.hook
def filter_failure(context, failure, case, response):
    code, message = _error(response)
    drop = (isinstance(failure, AcceptedNegativeData) and _not_sent_empty(case, response)) or (
        isinstance(failure, RejectedPositiveData) and _inapplicable(case, code, message)
    )
    # STRATA_SCHEMATHESIS_DROPPED=FILE lists what was dropped, to review.
    log = os.environ.get("STRATA_SCHEMATHESIS_DROPPED")
    if drop and log:
        with open(log, "a", encoding="utf-8") as f:
            line = [case.operation.label, f"{response.status_code} {code}", message, repr(case.body)]
            f.write("\t".join(field[:160] for field in line) + "\n")
    return not drop
