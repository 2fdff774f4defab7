"""The planner decides exactly as recorded in tests/unit/golden/planner/decisions.json over 160 generated
requests: plan, fallbacks, rejection text, objective and the best-ranked candidate rows (a change made for speed
must not change one). Regenerate it only for a deliberate change: `.venv/bin/python -m tests.unit.planning.decisions`.
"""

from __future__ import annotations

import json
from collections import Counter

from tests.unit.planning.decisions import COUNT, GOLDEN, SEED, decisions, generated_requests


def test_every_decision_is_the_recorded_one() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert (golden["count"], golden["seed"]) == (COUNT, SEED), "regenerate the golden file for the new request set"
    requests = generated_requests()
    changed = [
        f"request {i}: {requests[i]}\n  recorded {old}\n  now      {new}"
        for i, (old, new) in enumerate(zip(golden["decisions"], decisions(), strict=True))
        if old != new
    ]
    assert not changed, f"{len(changed)} of {COUNT} decisions changed:\n" + "\n".join(changed[:5])


def test_the_request_set_covers_plans_rejections_and_fallbacks() -> None:
    golden = json.loads(GOLDEN.read_text())["decisions"]
    kinds = Counter("error" if "error" in d else "rejected" if d["chosen"] == "rejected" else "planned" for d in golden)
    assert kinds["planned"] >= COUNT // 2 and kinds["rejected"] >= COUNT // 10, kinds
    assert any(d.get("fallbacks") == 5 for d in golden) and any(0 < d.get("fallbacks", 0) < 5 for d in golden)
    assert any(" spot " in d.get("chosen", "") for d in golden) and any("cpu x0" in d.get("chosen", "") for d in golden)
