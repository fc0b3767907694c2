"""Findings: local coordinates, evidence, and verdicts attached from the criteria that read their arm."""

import json

import pytest

from infralab.agent.findings import Evidence, Finding, Where, combine_verdicts, with_verdicts


def finding(arm: str) -> Finding:
    return Finding(
        validator="kernel-check", arm=arm,
        where=Where.of("kernel", kernel="matmul", shape="M=8;N=32;K=64", split="row/2 (sequential sum)",
                       worst_index=(3, 17), missing=None),
        what="split differs from unsplit",
        evidence=Evidence(numbers={"rel_err": 2.5e-4, "nan": float("nan")}, reference="float64", files=("a.json",)),
    )


def test_where_keeps_given_coordinates_in_order_and_drops_none():
    w = finding("x").where
    assert [k for k, _ in w.coords] == ["kernel", "shape", "split", "worst_index"]
    assert w.text() == "kernel: kernel=matmul, shape=M=8;N=32;K=64, split=row/2 (sequential sum), worst_index=[3, 17]"


def test_to_dict_is_strict_json():
    d = finding("x").to_dict()
    text = json.dumps(d, allow_nan=False)
    assert json.loads(text)["where"] == {"kind": "kernel", "kernel": "matmul", "shape": "M=8;N=32;K=64",
                                        "split": "row/2 (sequential sum)", "worst_index": [3, 17]}
    assert d["evidence"]["numbers"]["nan"] is None and d["evidence"]["files"] == ["a.json"]
    assert d["verdict"] == "not-judged"


@pytest.mark.parametrize("verdicts, expected", [
    ([], "unmeasured"),
    (["accepted", "accepted"], "accepted"),
    (["accepted", "rejected", "inconclusive"], "rejected"),
    (["accepted", "inconclusive"], "inconclusive"),
    (["accepted", "unmeasured"], "partial"),
    (["unmeasured"], "unmeasured"),
])
def test_combine_verdicts(verdicts, expected):
    assert combine_verdicts(verdicts) == expected


def test_findings_get_the_verdicts_of_the_criteria_reading_their_arm():
    criteria = {
        "a.rel_err < 1e-6": ("accepted", frozenset({"a"})),
        "b.rel_err < a.rel_err": ("rejected", frozenset({"a", "b"})),
    }
    fa, fb, fc = with_verdicts([finding("a"), finding("b"), finding("c")], criteria)
    assert fa.verdict == "rejected" and fa.criteria == ("a.rel_err < 1e-6", "b.rel_err < a.rel_err")
    assert fb.verdict == "rejected" and fb.criteria == ("b.rel_err < a.rel_err",)
    assert fc.verdict == "not-judged" and fc.criteria == ()
    assert fa.headline().startswith("[rejected] kernel-check / a / kernel: kernel=matmul")
