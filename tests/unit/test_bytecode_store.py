"""Bytecode kept by distribution and linked into new environments whose sources match.

The environments are laid out as uv leaves them (``pyvenv.cfg``, a ``site-packages``
whose files are hard links to one package cache, a ``RECORD`` per distribution); the
bytecode is compiled by ``py_compile`` and imported by a real interpreter.
"""

from __future__ import annotations

import hashlib
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

from wheelkiln.builder import bytecode_store

TAG = sys.implementation.cache_tag
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
RECORD = "demo/__init__.py,sha256=x,10\ndemo/util.py,sha256=y,6\n"
DIST = "demo-1.0-" + hashlib.sha256(RECORD.encode()).hexdigest()[:12]
"""The store's name for the distribution: its version and its modules' hashes."""
SOURCE = "ANSWER = 42\n\ndef where():\n    return where.__code__.co_filename\n"


def package_cache(root: Path) -> Path:
    """One unpacked distribution, as uv's cache holds it."""
    cache = root / "cache"
    (cache / "demo").mkdir(parents=True)
    (cache / "demo" / "__init__.py").write_text(SOURCE)
    (cache / "demo" / "util.py").write_text("X = 1\n")
    return cache


def environment(root: Path, cache: Path, *, link: bool = True,
                implementation: str = "CPython", record: str = RECORD) -> Path:  # fmt: skip
    """An environment holding the cached distribution: hard links, or copies (another
    cache entry of the same version, with other modification times)."""
    site = root / "lib" / f"python{VERSION}" / "site-packages"
    (site / "demo").mkdir(parents=True)
    for name in ("__init__.py", "util.py"):
        if link:
            os.link(cache / "demo" / name, site / "demo" / name)
        else:
            shutil.copyfile(cache / "demo" / name, site / "demo" / name)
            os.utime(site / "demo" / name, (1_000_000_000, 1_000_000_000))
    info = site / "demo-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text(
        f"{record}../../../bin/demo,sha256=z,1\ndemo-1.0.dist-info/RECORD,,\n"
    )
    (root / "pyvenv.cfg").write_text(f"home = /usr/bin\nimplementation = {implementation}\n")
    return root


def compiled(env: Path, module: str) -> Path:
    site = env / "lib" / f"python{VERSION}" / "site-packages"
    return site / "demo" / "__pycache__" / f"{module}.{TAG}.pyc"


def compile_all(env: Path) -> None:
    site = env / "lib" / f"python{VERSION}" / "site-packages"
    for module in ("__init__", "util"):
        py_compile.compile(
            str(site / "demo" / f"{module}.py"), cfile=str(compiled(env, module)),
            invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
        )  # fmt: skip


def kept_from_a_first_environment(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The package cache, a first environment made from it and compiled, and the store
    that environment's bytecode is kept in."""
    cache = package_cache(tmp_path)
    first = environment(tmp_path / "first", cache)
    compile_all(first)
    store = tmp_path / "bytecode"
    bytecode_store.keep(first, store)
    return cache, first, store


def test_a_new_environment_gets_the_kept_bytecode_and_python_uses_it(tmp_path: Path) -> None:
    cache = package_cache(tmp_path)
    first = environment(tmp_path / "first", cache)
    compile_all(first)
    store = tmp_path / "bytecode"
    assert bytecode_store.keep(first, store) == 2
    assert (store / DIST / "demo" / "__pycache__" / f"__init__.{TAG}.pyc").samefile(
        compiled(first, "__init__")
    )
    assert bytecode_store.keep(first, store) == 0  # kept already

    second = environment(tmp_path / "second", cache)
    assert bytecode_store.seed(second, store) == 2
    assert compiled(second, "__init__").samefile(compiled(first, "__init__"))
    # Python loads the linked file as it is (no compile, so nothing is written) and
    # names the second environment's source in the code it runs.
    site = second / "lib" / f"python{VERSION}" / "site-packages"
    before = compiled(second, "__init__").stat().st_mtime_ns
    out = subprocess.run(
        [sys.executable, "-I", "-c",
         "import sys; sys.path.insert(0, sys.argv[1]); import demo; "
         "print(demo.ANSWER, demo.where(), demo.__cached__)", str(site)],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert out == ["42", str(site / "demo" / "__init__.py"), str(compiled(second, "__init__"))]
    assert compiled(second, "__init__").stat().st_mtime_ns == before
    assert compiled(second, "__init__").samefile(compiled(first, "__init__"))


def test_bytecode_of_another_copy_of_the_source_is_not_linked(tmp_path: Path) -> None:
    cache, _, store = kept_from_a_first_environment(tmp_path)
    other = environment(tmp_path / "other", cache, link=False)
    assert bytecode_store.seed(other, store) == 0
    assert not compiled(other, "__init__").exists()
    # Compiled there, it replaces the kept one: the newest copy is the one kept.
    compile_all(other)
    assert bytecode_store.keep(other, store) == 2
    kept = store / DIST / "demo" / "__pycache__" / f"__init__.{TAG}.pyc"
    assert kept.samefile(compiled(other, "__init__"))
    assert not list(kept.parent.glob(".*"))  # no staged link left


def test_another_build_of_the_same_version_shares_nothing(tmp_path: Path) -> None:
    cache, _, store = kept_from_a_first_environment(tmp_path)
    # The same files and times, but its RECORD says another build's hashes.
    rebuilt = environment(tmp_path / "rebuilt", cache, record=RECORD.replace("=x", "=w"))
    assert bytecode_store.seed(rebuilt, store) == 0
    assert not compiled(rebuilt, "__init__").exists()


def test_a_source_changed_after_its_compile_is_not_kept(tmp_path: Path) -> None:
    cache = package_cache(tmp_path)
    first = environment(tmp_path / "first", cache)
    compile_all(first)
    site = first / "lib" / f"python{VERSION}" / "site-packages"
    (site / "demo" / "util.py").write_text("X = 2  # changed\n")
    assert bytecode_store.keep(first, tmp_path / "bytecode") == 1
    assert not (tmp_path / "bytecode" / DIST / "demo" / "__pycache__" /
                f"util.{TAG}.pyc").exists()  # fmt: skip


def test_another_implementation_shares_nothing(tmp_path: Path) -> None:
    cache = package_cache(tmp_path)
    first = environment(tmp_path / "first", cache, implementation="PyPy")
    compile_all(first)
    assert bytecode_store.keep(first, tmp_path / "bytecode") == 0
    assert not (tmp_path / "bytecode").exists()


def test_a_package_whose_modules_are_all_current_needs_no_compile(tmp_path: Path) -> None:
    env = environment(tmp_path / "env", package_cache(tmp_path))
    package = env / "lib" / f"python{VERSION}" / "site-packages" / "demo"
    assert not bytecode_store.compiled_already(env, [package])
    compile_all(env)
    assert bytecode_store.compiled_already(env, [package])
    (package / "util.py").write_text("X = 3  # a longer source than before\n")
    assert not bytecode_store.compiled_already(env, [package])


def test_a_link_planted_in_the_store_is_not_followed(tmp_path: Path) -> None:
    cache, _, store = kept_from_a_first_environment(tmp_path)
    kept = store / DIST / "demo" / "__pycache__" / f"__init__.{TAG}.pyc"
    elsewhere = tmp_path / "elsewhere.pyc"
    kept.rename(elsewhere)  # a valid header, reached only through the link
    kept.symlink_to(elsewhere)
    second = environment(tmp_path / "second", cache)
    assert bytecode_store.seed(second, store) == 1  # util's, not the link
    assert not compiled(second, "__init__").exists()
