"""What ``--json`` prints is strict JSON: a non-finite number has no JSON spelling."""

from __future__ import annotations

import json

import pytest

from wheelkiln.cli.options import emit_json


def test_emit_json_writes_a_non_finite_number_as_null_and_says_where(
    capsys: pytest.CaptureFixture[str],
) -> None:
    emit_json({"jobs": [{"seconds": float("nan")}, {"seconds": 1.5}], "total": float("inf")})
    out, err = capsys.readouterr()
    assert json.loads(out) == {"jobs": [{"seconds": None}, {"seconds": 1.5}], "total": None}
    assert "NaN" not in out and "Infinity" not in out
    assert "written as null: jobs[0].seconds, total." in err
    emit_json({"a": 1.0})
    assert capsys.readouterr() == ('{\n  "a": 1.0\n}\n', "")
