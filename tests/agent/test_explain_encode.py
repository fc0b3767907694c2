"""`infralab explain`'s encode phase (multimodal runs only): an EPD run and an inline-encoding run
worked by hand, a multimodal run against a text-only one, and a text-only run whose explanation
has exactly the phases it always had."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infralab.agent.explain import ENCODE, PHASES, explain, request_phases
from infralab.agent.run_dir import load_run
from infralab.errors import InputError
from infralab.metrics.encode_records import EncodeRecord
from infralab.metrics.records import RequestRecord, RunRecord
from infralab.metrics.requests_csv import write_requests_csv
from infralab.metrics.run_metrics import summarize
from infralab.metrics.schema import SLOConfig
from infralab.results import dump_json


def request(rid: int, arrival: float, sched: float, first: float, finish: float, tokens: int = 2,
            **times: float) -> RequestRecord:
    req = RequestRecord(id=rid, arrival_s=arrival, prompt_tokens=100, output_tokens=tokens, prefill_instance="p0",
                        decode_instance="d0", first_scheduled_s=sched, first_token_s=first, finish_s=finish, **times)
    gap = (finish - first) / (tokens - 1)
    req.token_times_s.extend([first + k * gap for k in range(tokens)])
    return req


def epd_run() -> RunRecord:
    """EPD, two requests (s):
    r0 (one image): arrives 0; encode-0 starts it at 0.1 (queued 0.1), ends 0.4; embeddings at the
    prefill instance 0.5; first prefill step 0.7; prefill ends 1.0; KV moves 1.0-1.2; finish 2.0.
    -> encode 0.5, queue 0.2, prefill 0.3, kv_wait 0, kv_transfer 0.2, decode 0.8 (E2E 2.0).
    r1 (no image): arrives 0.2; first step 0.3; prefill ends 0.6; KV 0.6-0.7; finish 1.2.
    -> encode 0, queue 0.1, prefill 0.3, kv_wait 0, kv_transfer 0.1, decode 0.5 (E2E 1.0)."""
    run = RunRecord()
    run.requests += [
        request(0, 0.0, 0.7, 1.0, 2.0, prefill_end_s=1.0, kv_transfer_start_s=1.0, kv_transfer_end_s=1.2),
        request(1, 0.2, 0.3, 0.6, 1.2, prefill_end_s=0.6, kv_transfer_start_s=0.6, kv_transfer_end_s=0.7),
    ]
    run.encodes = [EncodeRecord(1, 576, "encode-0", 0.1, 0.4, 0.5, arrival_s=0.0), EncodeRecord(0, 0, arrival_s=0.2)]
    run.end_s = 2.0
    return run


def inline_run() -> RunRecord:
    """Colocated, inline encoding, two requests (s):
    r0 (one image): arrives 0; first step 0.5, which encodes 0.5-0.8 before its forward; first
    token 1.2; finish 2.2. -> queue 0.5, encode 0.3, prefill 0.4, decode 1.0 (E2E 2.2).
    r1 (no image): arrives 1.0; first step 1.2; first token 1.4; finish 1.6.
    -> queue 0.2, encode 0, prefill 0.2, decode 0.2 (E2E 0.6)."""
    run = RunRecord()
    run.requests += [request(0, 0.0, 0.5, 1.2, 2.2), request(1, 1.0, 1.2, 1.4, 1.6)]
    run.encodes = [EncodeRecord(1, 576, "i0", 0.5, 0.8, 0.8, arrival_s=0.0), EncodeRecord(0, 0, arrival_s=1.0)]
    run.end_s = 2.2
    return run


def text_run() -> RunRecord:
    """inline_run's requests without encode records (a text-only run)."""
    run = inline_run()
    run.encodes = None
    return run


def write_folder(folder: Path, run: RunRecord) -> Path:
    folder.mkdir(parents=True)
    dump_json(summarize(run, SLOConfig()).to_json(), folder / "summary.json")
    write_requests_csv(run, folder / "requests.csv")
    return folder


def breakdown(doc: dict) -> dict[str, float]:
    return {c["name"]: c["run_s"] for c in doc["breakdown"]["categories"]}


MULTIMODAL_PHASES = (ENCODE, *PHASES)


def test_epd_encode_phase_is_arrival_to_embeddings_ready_by_hand(tmp_path):
    run = load_run(write_folder(tmp_path / "epd", epd_run()))
    assert run.encodes is not None and run.encodes[0].pooled
    phases = request_phases(run.requests[0], run.encodes[0])
    assert tuple(phases) == MULTIMODAL_PHASES
    assert phases == pytest.approx({"encode": 0.5, "queue": 0.2, "prefill": 0.3, "kv_wait": 0.0,
                                    "kv_transfer": 0.2, "decode": 0.8})
    assert request_phases(run.requests[1], run.encodes[1])["encode"] == 0.0
    doc = explain(run)
    assert doc["metric"]["run"] == pytest.approx((2.0 + 1.0) / 2)
    assert breakdown(doc) == pytest.approx({"encode": 0.25, "queue": 0.15, "prefill": 0.3, "kv_wait": 0.0,
                                            "kv_transfer": 0.15, "decode": 0.65})
    assert sum(breakdown(doc).values()) == pytest.approx(doc["metric"]["run"])
    ttft = explain(run, metric="ttft")
    assert breakdown(ttft) == pytest.approx({"encode": 0.25, "queue": 0.15, "prefill": 0.3})
    assert ttft["metric"]["run"] == pytest.approx((1.0 + 0.4) / 2)
    # the encode phase of the top request, ranked as a cause like any phase
    assert doc["units"]["top"][0]["phases"]["encode"]["run_s"] == pytest.approx(0.5)
    assert any(c["kind"] == "phase" and c["key"] == "encode" for c in doc["causes"])


def test_inline_encode_phase_is_the_encoders_compute_carved_out_of_prefill_by_hand(tmp_path):
    run = load_run(write_folder(tmp_path / "inline", inline_run()))
    assert run.encodes is not None and not run.encodes[0].pooled
    assert request_phases(run.requests[0], run.encodes[0]) == pytest.approx(
        {"encode": 0.3, "queue": 0.5, "prefill": 0.4, "kv_wait": 0.0, "kv_transfer": 0.0, "decode": 1.0})
    doc = explain(run)
    assert breakdown(doc) == pytest.approx({"encode": 0.15, "queue": 0.35, "prefill": 0.3, "kv_wait": 0.0,
                                            "kv_transfer": 0.0, "decode": 0.6})
    assert sum(breakdown(doc).values()) == pytest.approx(doc["metric"]["run"]) == pytest.approx((2.2 + 0.6) / 2)
    # without the encode records the same requests' prefill holds the encoder's time
    plain = request_phases(run.requests[0])
    assert tuple(plain) == PHASES and plain["prefill"] == pytest.approx(0.7)


def test_an_encoding_outside_the_prefill_phase_is_not_carved_out():
    """A request recomputed after a preemption in decode encodes again after its first token: the
    record holds that last encoding, which lies in the decode phase, so encode counts 0 there."""
    req = request(0, 0.0, 0.5, 1.2, 3.0)
    late = EncodeRecord(1, 576, "i0", 2.0, 2.3, 2.3, arrival_s=0.0)
    phases = request_phases(req, late)
    assert phases["encode"] == 0.0 and phases["prefill"] == pytest.approx(0.7)
    assert sum(phases.values()) == pytest.approx(3.0)


def test_a_multimodal_run_against_a_text_only_run_gives_the_baseline_a_zero_encode_phase(tmp_path):
    run = load_run(write_folder(tmp_path / "mm", inline_run()))
    base = load_run(write_folder(tmp_path / "text", text_run()))
    doc = explain(run, base)
    cats = {c["name"]: c for c in doc["breakdown"]["categories"]}
    assert tuple(cats) == MULTIMODAL_PHASES
    assert cats["encode"]["baseline_s"] == 0.0 and cats["encode"]["delta_s"] == pytest.approx(0.15)
    assert cats["prefill"]["delta_s"] == pytest.approx(-0.15)  # the same time, moved out of prefill
    assert doc["metric"]["delta"] == pytest.approx(0.0)
    # and the other way round
    assert tuple(c["name"] for c in explain(base, run)["breakdown"]["categories"]) == MULTIMODAL_PHASES


def test_a_text_only_run_has_exactly_its_old_phases(tmp_path):
    folder = write_folder(tmp_path / "text", text_run())
    run = load_run(folder)
    assert run.encodes is None
    for metric, phases in (("e2e", PHASES), ("ttft", ("queue", "prefill")), ("queue", ("queue",))):
        doc = explain(run, metric=metric)
        assert tuple(c["name"] for c in doc["breakdown"]["categories"]) == phases
        assert ENCODE not in json.dumps(doc)
    assert breakdown(explain(run)) == pytest.approx({"queue": 0.35, "prefill": 0.45, "kv_wait": 0.0,
                                                     "kv_transfer": 0.0, "decode": 0.6})


def test_requests_csv_with_some_encode_columns_is_one_input_error(tmp_path):
    folder = write_folder(tmp_path / "mm", inline_run())
    path = folder / "requests.csv"
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    keep = [i for i, name in enumerate(header) if name != "embeddings_ready_s"]
    path.write_text("\n".join(",".join(line.split(",")[i] for i in keep) for line in lines) + "\n")
    with pytest.raises(InputError, match="embeddings_ready_s"):
        load_run(folder)
