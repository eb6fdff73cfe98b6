"""A pure wheel written by hand (stdlib only).

Tests use it directly, and in-tree build backends import it: a backend runs in the
backend's own process, which cannot import the ``tests`` package, so
:func:`copy_beside` puts this file next to the backend as ``kiln_test_wheels.py``.
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


def copy_beside(backend_directory: Path) -> None:
    """This module as ``kiln_test_wheels.py`` in an in-tree backend's directory."""
    shutil.copyfile(__file__, backend_directory / "kiln_test_wheels.py")
