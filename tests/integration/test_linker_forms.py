"""Every unresolved-symbol form of the installed linkers (GNU ld, gold, lld, mold), live.

The unit tests read captured output; this runs the same cases against the linkers on
this machine, so a linker version that words its errors differently is caught here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.linker_cases import CASES, LINKERS, LinkCase, link, prepare
from wheelkiln.shard.diagnostics import find_diagnostics, is_unresolved_only, unresolved_symbols

pytestmark = pytest.mark.compile


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("linker-forms")
    prepare(directory)
    return directory


@pytest.mark.parametrize("linker", LINKERS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_linker_form(objects: Path, linker: str, case: LinkCase) -> None:
    if shutil.which(f"ld.{linker}") is None:
        pytest.skip(f"ld.{linker} is not installed (apt-get install lld mold binutils)")
    result = link(objects, linker, case)
    if result.returncode == 0:
        assert case.name == "shared-protected-data", f"{linker} linked {case.name}"
        return  # mold leaves protected data to the dynamic loader
    assert is_unresolved_only(result.stderr) is case.unresolved_only, result.stderr
    assert case.symbols <= set(unresolved_symbols(result.stderr)), result.stderr
    assert find_diagnostics(result.stderr) == []
