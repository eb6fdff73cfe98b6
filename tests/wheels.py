"""A pure wheel written by hand (stdlib only).

Tests use it directly, and in-tree build backends import it: a backend runs in the
backend's own process, which cannot import the ``tests`` package, so
:func:`in_tree_backend` puts this file next to the backend as ``kiln_test_wheels.py``.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import zipfile
from pathlib import Path


def pure_wheel(directory: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A ``py3-none-any`` wheel of *name* *version* holding *files*, with its METADATA,
    WHEEL and a RECORD that hashes every file."""
    directory.mkdir(parents=True, exist_ok=True)
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    contents = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: kiln-test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(data)}")
    contents[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,", ""]).encode()
    wheel = directory / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in contents.items():
            archive.writestr(path, data)
    return wheel


def in_tree_backend(package: Path, module: str, source: str, requires: str = "") -> None:
    """A package at *package* whose build backend is *module* (its *source*) in its own
    ``backend/`` directory (``backend-path``), with this module beside it as
    ``kiln_test_wheels.py``; *requires*: the ``[build-system]`` requirements, quoted."""
    (package / "backend").mkdir(parents=True)
    (package / "backend" / f"{module}.py").write_text(source)
    shutil.copyfile(__file__, package / "backend" / "kiln_test_wheels.py")
    (package / "pyproject.toml").write_text(
        f'[build-system]\nrequires = [{requires}]\nbuild-backend = "{module}"\n'
        'backend-path = ["backend"]\n'
    )
