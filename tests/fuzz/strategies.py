"""hypothesis strategies for what reaches the service from outside: results documents (valid
ones, and valid ones with one part replaced by anything JSON can carry), webhook bodies and
claim bodies."""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Strings that are not valid Unicode: lone surrogates, which json.dumps writes as `\ud800`
# escapes and json.loads turns back into unencodable Python strings.
lone_surrogates = st.builds(lambda head, bad, tail: head + bad + tail, st.text(max_size=5),
                            st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=2),
                            st.text(max_size=5))
# Any JSON value, including the awkward ones: NUL and other control characters, lone surrogates,
# huge integers, long strings, deep nesting.
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=300), lone_surrogates,
    st.sampled_from(["\x00", "a\x00b", "$x^2$", "m" * 200, "", " ", "false", "1.9"]),
)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=20) | lone_surrogates, inner, max_size=4), max_leaves=12)

names = st.text(min_size=1, max_size=140) | lone_surrogates
metrics = st.fixed_dictionaries({
    "name": names, "unit": st.text(max_size=40),
    "direction": st.sampled_from(["higher_is_better", "lower_is_better", "sideways"]),
    "samples": st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                                  st.integers(min_value=-(10**400), max_value=10**400)), min_size=1, max_size=5),
})


@st.composite
def results_documents(draw: st.DrawFn, suite: str = "decode-throughput") -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema": "parallax.results/1", "suite": suite,
        "metrics": draw(st.lists(metrics, min_size=1, max_size=6, unique_by=lambda m: m["name"])),
        "items": draw(st.none() | st.fixed_dictionaries({
            "name": names, "correct": st.lists(st.sampled_from([0, 1, 2, 1.0]), min_size=1, max_size=8)})),
        "context": draw(st.dictionaries(st.text(max_size=10) | lone_surrogates, json_values, max_size=4)),
        "environment": draw(st.fixed_dictionaries({"platform": st.just("cpu"), "device": json_scalars,
                                                   "simulated": st.booleans()})),
    }
    if draw(st.booleans()):  # one part replaced by anything
        key = draw(st.sampled_from(sorted(document)))
        document[key] = draw(json_values)
    return document


claim_bodies = st.one_of(st.dictionaries(st.sampled_from(["wait_s", "attempt", "x"]), json_values, max_size=2),
                         json_values)


@st.composite
def webhook_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """Push and pull-request shaped bodies with any field replaced by anything."""
    body: dict[str, Any] = {
        "ref": draw(st.sampled_from(["refs/heads/main", "refs/tags/v1", "main", "\x00"]) | st.text(max_size=30)),
        "before": draw(st.sampled_from(["0" * 40, "a" * 40]) | st.text(max_size=41)),
        "after": draw(st.sampled_from(["b" * 40]) | st.text(max_size=41)),
        "repository": {"full_name": draw(st.sampled_from(["demo/engine", "x/y"]) | st.text(max_size=30)),
                       "clone_url": draw(st.text(max_size=30))},
        "commits": draw(st.lists(st.fixed_dictionaries({"id": st.text(max_size=41), "message": st.text(max_size=30)}),
                                 max_size=3)),
        "action": draw(st.sampled_from(["opened", "synchronize", "closed"]) | st.text(max_size=10)),
        "number": draw(st.integers(min_value=-(2**70), max_value=2**70)),
        "pull_request": draw(json_values),
    }
    for key in draw(st.lists(st.sampled_from(sorted(body)), max_size=2, unique=True)):
        body[key] = draw(json_values)
    return body
