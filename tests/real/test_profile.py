"""The step profile and its parts on a tiny real engine: rows in the calibration-table format that
parse back, the grid points an engine can run, the model its shape describes."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="the real engine needs transformers (the extra infralab[real])")

from infralab.calibration_table import parse_table, render_table
from infralab.real.engine import RealEngine
from infralab.real.model_shape import TINY
from infralab.real.profile import PREPARE_KERNEL, STEP_KERNEL, ProfileGrid, calibration_rows, comments, profile
from infralab.real.step_shape import StepShape
from infralab.real.synthetic_step import fits

GRID = ProfileGrid(q_tokens=(1, 4, 40, 4096), kv_tokens=(4, 96), seqs=(1, 4), repeats=2)
"""q=4096 is over any tiny engine's token budget; (q=40, kv=4) has fewer keys than queries."""


def test_profile_rows_parse_back_in_the_table_format(engine: RealEngine) -> None:
    result = profile(engine, GRID)
    rows = calibration_rows(engine, result)
    parsed = parse_table(render_table(rows, comments(engine, result)), "profile.csv")
    assert [(r.kernel, r.shape, r.device, r.dtype, r.variant) for r in parsed] == \
        [(r.kernel, r.shape, r.device, r.dtype, r.variant) for r in rows]
    assert all(r.median_s > 0 for r in parsed)
    # Two rows per point, forward first, keyed q_tokens;kv_tokens;seqs.
    assert [r.kernel for r in rows] == [STEP_KERNEL, PREPARE_KERNEL] * len(result.points)
    assert {r.shape_text for r in rows} == {f"q_tokens={p.q_tokens};kv_tokens={p.kv_tokens};seqs={p.seqs}"
                                           for p in result.points}


def test_the_grid_keeps_exactly_the_points_the_engine_can_run(engine: RealEngine) -> None:
    points = GRID.points(engine)
    assert StepShape(4, 96, 4) in points and StepShape(1, 4, 1) in points
    assert all(p.q_tokens != 4096 for p in points)  # over the token budget
    assert StepShape(40, 4, 1) not in points  # fewer keys than queries
    assert StepShape(1, 4, 4) not in points  # more sequences than query tokens
    assert all(fits(engine, p) is None for p in points)


def test_the_built_model_has_the_parameters_its_shape_counts(engine: RealEngine) -> None:
    assert sum(p.numel() for p in engine.model.parameters()) == TINY.parameters()
