"""Command lines and wrapper records taken from real PyPI builds, one test per fix.

pycryptodome 4.4.0 (setuptools, C) and awkward-cpp 57 (scikit-build-core, CMake, C++),
sharded 3 ways with ``kiln build --shards 3`` on Debian 12, gcc 12.2, cmake 3.25. The
argv lists below are copied from the shards' ``wrapper.jsonl``; only the job
directories are shortened to ``/w/...``.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from wheelkiln.shard.gate import scratch_probe_failures, shard_gate
from wheelkiln.shard.wrapper import SeatConfig, decide
from wheelkiln.wheels.compare import compare_wheels

PYCRYPTODOME_TREE = "/w/pycryptodome-py3.11-linux-x86_64-shard-1-of-3/src"

# compiler_opt.test_compilation(): distutils' compile and link_executable of build/test1.c,
# one feature probe per call, all under the same name (the -msse2, -maes ... variants add
# flags at the end).
PROBE_COMPILE = [
    "gcc", "-Wsign-compare", "-DNDEBUG", "-g", "-fwrapv", "-O3", "-Wall", "-fPIC",
    "-c", "build/test1.c", "-o", "build/test1.o",
]  # fmt: skip
PROBE_LINK = [
    "gcc", "-Wsign-compare", "-DNDEBUG", "-g", "-fwrapv", "-O3", "-Wall",
    "build/test1.o", "-o", "build/test1.out",
]  # fmt: skip
# the TU that follows the probes: src/MD4.c for the extension Crypto.Hash._MD4
MD4_COMPILE = [
    "gcc", "-Wsign-compare", "-DNDEBUG", "-g", "-fwrapv", "-O3", "-Wall", "-fPIC",
    "-DHAVE_STDINT_H", "-DPYCRYPTO_LITTLE_ENDIAN", "-DSYS_BITS=64", "-DHAVE_UINT128",
    "-DHAVE_CPUID_H", "-DHAVE_POSIX_MEMALIGN", "-DHAVE_X86INTRIN_H", "-DUSE_SSE2",
    "-Isrc/", "-I/root/.kiln/envs/02502923c1fd0a7a/include",
    "-I/root/.pyenv/versions/3.11.7/include/python3.11",
    "-c", "src/MD4.c", "-o", "build/temp.linux-x86_64-cpython-311/src/MD4.o", "-msse2",
]  # fmt: skip


def _record(action: str, exit_code: int, argv: list[str], tu: str | None) -> dict[str, object]:
    output = next(argv[i + 1] for i, arg in enumerate(argv) if arg == "-o")
    return {
        "tu": tu,
        "action": action,
        "exit": exit_code,
        "output": f"{PYCRYPTODOME_TREE}/{output}",
        "argv": argv,
        "cwd": PYCRYPTODOME_TREE,
    }


def _probe(action: str, exit_code: int, *extra: str) -> dict[str, object]:
    return _record(action, exit_code, [*PROBE_COMPILE, *extra], "build/test1.c")


def _link(exit_code: int) -> dict[str, object]:
    return _record("link", exit_code, PROBE_LINK, None)


# The first records of shard 2/3 (in whose slice build/test1.c falls): the probes for
# stdint.h, uint128 and cpuid.h pass, intrin.h fails (not on Linux) and x86intrin.h with
# -msse2 passes, then the SSE2, AES-NI ... probes; the extensions' TUs come last.
IN_SLICE_PROBES = [
    _probe("compile", 0), _link(0),
    _probe("compile", 0), _link(0),
    _probe("compile", 1),  # intrin.h: a Windows header
    _probe("compile", 0, "-msse2"), _link(0),
    _probe("compile", 1),  # wmmintrin.h without -maes
    _probe("compile", 0, "-maes"), _link(0),
    _record("compile", 0, MD4_COMPILE, "src/MD4.c"),
]  # fmt: skip
# The same probes in shard 1/3, where build/test1.c is out of slice: stubbed, then
# compiled for real when the executable link consumes the stub.
OUT_OF_SLICE_PROBES = [
    _probe("stub", 0), _probe("link-probe-rebuild", 0), _link(0),
    _probe("stub", 0), _probe("link-probe-rebuild", 1), _link(1),
    _probe("stub", 0, "-msse2"), _probe("link-probe-rebuild", 0, "-msse2"), _link(0),
    _record("compile", 0, MD4_COMPILE, "src/MD4.c"),
]  # fmt: skip
OBJECTS = [(f"{PYCRYPTODOME_TREE}/build/temp.linux-x86_64-cpython-311/src/MD4.o", 20_480)]


def _seat(index: int) -> SeatConfig:
    return SeatConfig(shard_index=index, shard_count=3, package_root=PYCRYPTODOME_TREE)


def test_pycryptodome_probe_is_a_tu_and_its_link_an_executable_link() -> None:
    """build/test1.c has a stable key, so one shard compiles it and the others stub it;
    the executable link is what catches the stub (link-probe-rebuild)."""
    actions = {
        decide(PROBE_COMPILE[0], PROBE_COMPILE[1:], PYCRYPTODOME_TREE, _seat(index),
               called_by_nvcc=False).action
        for index in range(3)
    }  # fmt: skip
    assert actions == {"compile", "stub"}
    link = decide(PROBE_LINK[0], PROBE_LINK[1:], PYCRYPTODOME_TREE, _seat(0), called_by_nvcc=False)
    assert link.action == "link"
    assert not link.parsed.shared and link.output == f"{PYCRYPTODOME_TREE}/build/test1.out"


@pytest.mark.parametrize("records", [IN_SLICE_PROBES, OUT_OF_SLICE_PROBES], ids=["in", "out"])
def test_pycryptodome_failed_feature_probes_pass_the_shard_gate(
    records: list[dict[str, object]],
) -> None:
    """Broke: every pycryptodome shard failed its gate with "10 TU compile(s) failed in the
    wrapper: build/test1.c, ...": the intrin.h and ARMv8 probes fail on x86-64 on purpose."""
    assert len(scratch_probe_failures(records)) == 2 if records is IN_SLICE_PROBES else 1
    result = shard_gate(0, "", OBJECTS, records)
    assert result.passed, result.reasons


def test_a_probe_failure_with_a_compiler_diagnostic_in_the_log_is_excused() -> None:
    """With PYCRYPTODOME_DEBUG=1 the probes' errors reach the build log."""
    log = "build/test1.c:2:14: fatal error: intrin.h: No such file or directory\n"
    assert shard_gate(0, log, OBJECTS, IN_SLICE_PROBES).passed


def test_a_real_tu_failure_is_still_a_failure() -> None:
    """A failed compile that nothing compiles again afterwards stopped the build."""
    broken = _record("compile", 1, MD4_COMPILE, "src/MD4.c")
    result = shard_gate(1, "", OBJECTS, [*IN_SLICE_PROBES[:-1], broken])
    assert not result.passed
    assert any("1 TU compile(s) failed in the wrapper: src/MD4.c" in r for r in result.reasons)
    # the same TU compiled successfully *before* it failed does not excuse it either
    first_ok = _record("compile", 0, MD4_COMPILE, "src/MD4.c")
    assert not shard_gate(1, "", OBJECTS, [first_ok, broken]).passed
    # nor does a last probe that fails with nothing after it
    assert not shard_gate(0, "", OBJECTS, [*IN_SLICE_PROBES, _probe("compile", 1)]).passed


# ---------------------------------------------------------------- kiln verify

needs_binutils = pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("strip") and shutil.which("nm")),
    reason="needs gcc and binutils",
)


MD4_SOURCE = "int md4_digest_size(void) { return 16; }\nint md4_block_size(void) { return 64; }\n"


def _wheel(tmp_path: Path, tree_name: str, source: str = MD4_SOURCE) -> Path:
    """A one-module wheel built like pycryptodome's _MD4: compiled with -g in its own tree.

    The link job's object is a cache hit stored by a shard, so its DWARF comp_dir names
    the shard's tree while the unsharded build names its own, and GNU ld's build ID,
    hashed over the whole output, differs with it.
    """
    tree = tmp_path / tree_name / "src"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "MD4.c").write_text(source)
    (tree / "build").mkdir()
    compile_line = ["gcc", "-g", "-O3", "-fPIC", "-c", "src/MD4.c", "-o", "build/MD4.o"]
    subprocess.run(compile_line, cwd=tree, check=True)
    subprocess.run(["gcc", "-shared", "build/MD4.o", "-o", "_MD4.abi3.so"], cwd=tree, check=True)
    wheel = tmp_path / tree_name / "pkg-1.0-cp39-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(tree / "_MD4.abi3.so", "Crypto/Hash/_MD4.abi3.so")
        archive.writestr("pkg-1.0.dist-info/RECORD", tree_name)
    return wheel


@needs_binutils
def test_verify_sees_through_comp_dir_and_build_id(tmp_path: Path) -> None:
    """Broke: kiln verify called all 53 extension modules of the sharded pycryptodome
    wheel "differ": strip --strip-debug left the build IDs, which still differed."""
    sharded = _wheel(tmp_path, "pycryptodome-py3.11-linux-x86_64-shard-1-of-3")
    unsharded = _wheel(tmp_path, "pycryptodome-py3.11-linux-x86_64")
    with zipfile.ZipFile(sharded) as a, zipfile.ZipFile(unsharded) as b:
        assert a.read("Crypto/Hash/_MD4.abi3.so") != b.read("Crypto/Hash/_MD4.abi3.so")
    result = compare_wheels(sharded, unsharded)
    assert result.equivalent, result.as_dict()
    assert result.debug_info_only == ["Crypto/Hash/_MD4.abi3.so"]


@needs_binutils
def test_verify_still_finds_a_code_difference(tmp_path: Path) -> None:
    sharded = _wheel(tmp_path, "pycryptodome-py3.11-linux-x86_64-shard-1-of-3")
    changed = _wheel(tmp_path, "pycryptodome-py3.11-linux-x86_64", MD4_SOURCE.replace("64", "128"))
    result = compare_wheels(sharded, changed)
    assert not result.equivalent
    assert result.differing == ["Crypto/Hash/_MD4.abi3.so"]


# ---------------------------------------------------------------- the sdist fetcher


def _sdist(path: Path, top: str) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"[build-system]\nrequires = []\n"
        info = tarfile.TarInfo(f"{top}/pyproject.toml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


@pytest.fixture
def fake_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A package index on 127.0.0.1 serving awkward-cpp 57's file name and layout
    (``awkward_cpp-57.tar.gz`` holding ``awkward_cpp-57/``) through the PEP 691 JSON
    API; the list collects every file download."""
    import hashlib
    import http.server
    import json
    import threading
    import time

    downloads: list[str] = []
    sdist = tmp_path / "pypi" / "awkward_cpp-57.tar.gz"
    sdist.parent.mkdir()
    _sdist(sdist, "awkward_cpp-57")
    listing = json.dumps({"files": [
        {"filename": sdist.name, "url": f"../../files/{sdist.name}",
         "hashes": {"sha256": hashlib.sha256(sdist.read_bytes()).hexdigest()}},
    ]}).encode()

    class Index(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/simple/awkward-cpp/":
                body, kind = listing, "application/vnd.pypi.simple.v1+json"
            elif self.path == f"/files/{sdist.name}":
                downloads.append(self.path)
                time.sleep(0.2)  # long enough for a second job to arrive meanwhile
                body, kind = sdist.read_bytes(), "application/gzip"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
    yield downloads
    server.shutdown()
    server.server_close()


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fetch_pypi_downloads_once_for_parallel_shards(
    tmp_path: Path, fake_pip: list[str]
) -> None:
    """`kiln build --shards 3` starts its shard jobs in parallel, and each fetches the
    source on its first build: one download, one extraction, one tree."""
    from concurrent.futures import ThreadPoolExecutor

    from wheelkiln.builder.source import _fetch_pypi

    digest = _sha256(tmp_path / "pypi" / "awkward_cpp-57.tar.gz")
    store = tmp_path / "sources"
    # an sdist whose name only starts like this one's must never be taken for it
    (store / "sdists").mkdir(parents=True)
    _sdist(store / "sdists" / "awkward_cpp-570.tar.gz", "awkward_cpp-570")
    with ThreadPoolExecutor(3) as pool:
        trees = list(pool.map(lambda _: _fetch_pypi("awkward-cpp==57", digest, store), range(3)))
    assert fake_pip == ["/files/awkward_cpp-57.tar.gz"]
    assert len(set(trees)) == 1 and (trees[0] / "pyproject.toml").is_file()
    assert sorted(p.name for p in (store / "sdists").iterdir()) == [
        "awkward_cpp-57.tar.gz",
        "awkward_cpp-570.tar.gz",
    ]
    # fetched: later builds neither download nor extract again
    assert _fetch_pypi("awkward-cpp==57", digest, store) == trees[0]
    assert len(fake_pip) == 1


def test_fetch_pypi_refuses_a_changed_upload(tmp_path: Path, fake_pip: list[str]) -> None:
    from wheelkiln.builder.source import _fetch_pypi
    from wheelkiln.errors import SourceError

    store = tmp_path / "sources"
    with pytest.raises(SourceError, match="lists no file of awkward-cpp==57 with the pinned sha256 0000"):
        _fetch_pypi("awkward-cpp==57", "0" * 64, store)
    assert fake_pip == [], "nothing is downloaded when the index lists no such digest"
    assert list((store / "sdists").iterdir()) == [], "a file with the wrong digest is not kept"


def test_verify_blanks_nvcc_path_hashes_in_internal_symbols(tmp_path: Path) -> None:
    """torch-scatter, built in two trees: nvcc's `_INTERNAL_<8 hex>_` names hash the
    source's absolute path, so the modules differ in those bytes only."""
    import zipfile

    from wheelkiln.wheels.compare import compare_wheels

    def wheel(path: Path, tag: bytes) -> Path:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("pkg/data.bin", b"\x7fELF..._INTERNAL_" + tag + b"_kernel..._GLOBAL__N__" + tag + b"_x")
        return path

    result = compare_wheels(wheel(tmp_path / "a.whl", b"1f2e3d4c"), wheel(tmp_path / "b.whl", b"9a8b7c6d"))
    assert result.nvcc_temp_names_only == ["pkg/data.bin"] and result.equivalent
    other = compare_wheels(wheel(tmp_path / "c.whl", b"1f2e3d4c"), wheel(tmp_path / "d.whl", b"not-hex!"))
    assert other.differing == ["pkg/data.bin"] and not other.equivalent


def test_miss_explanation_ignores_quotes_ccache_drops_from_its_log() -> None:
    """torch passes `--compiler-options "'-fPIC'"`: the quotes are literal in the argv,
    and gone from ccache's log line, which is no difference between the two jobs."""
    from wheelkiln.shard.link import _difference

    shard = ["nvcc", "--compiler-options", "'-fPIC'", "-c", "k.cu", "-o", "k.o"]
    link = ["nvcc", "--compiler-options", "-fPIC", "-c", "k.cu", "-o", "k.o"]
    assert _difference(shard, link).startswith("same arguments")
    assert _difference(shard, [*link, "-DNEW"]) == "only in the shard: -; only in the link job: -DNEW"
