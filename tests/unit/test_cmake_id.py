"""A kept CMake compiler identification: keyed by the compilers, seeded only into a
fresh build directory, never reused after a compiler change."""

from __future__ import annotations

from pathlib import Path

from wheelkiln.builder.cmake_id import identification_key, keep, seed


def fake_compilers(directory: Path, version: str) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("cc", "c++", "gcc", "g++", "nvcc"):
        tool = directory / name
        tool.write_text(f"#!/bin/sh\necho '{name} (Fake) {version}'\n")
        tool.chmod(0o755)
    return {"PATH": str(directory)}


def test_the_key_follows_the_compilers_and_what_identification_reads(tmp_path: Path) -> None:
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text("project(x CXX CUDA)\n")
    env = fake_compilers(tmp_path / "bin", "12.2.0")
    cmake = str(tmp_path / "bin" / "cc")  # any file: its path and the version name it

    def key(environ: dict[str, str]) -> str:
        return identification_key(cmake, "3.25.1", tree, environ, [])

    base = key(env)
    assert key(dict(env)) == base
    # What identification does not read (and names the job) leaves the key alone.
    assert key({**env, "SKBUILD_BUILD_DIR": "/w/job-link/build"}) == base
    assert key({**env, "CMAKE_CXX_COMPILER_LAUNCHER": "/w/job/kiln-bin/cache-front"}) == base
    # A compiler that reports another version, another compiler chosen, other flags,
    # another CUDA architecture list or project: another key.
    assert key(fake_compilers(tmp_path / "bin2", "12.3.0")) != base
    assert key({**env, "CUDACXX": str(tmp_path / "bin" / "nvcc")}) != base
    assert key({**env, "CXXFLAGS": "-O1"}) != base
    assert key({**env, "CMAKE_CUDA_ARCHITECTURES": "90"}) != base
    assert identification_key(cmake, "3.29.0", tree, env, []) != base
    (tree / "CMakeLists.txt").write_text("project(x CXX)\n")
    assert key(env) != base


def test_kept_files_seed_only_a_fresh_build_directory(tmp_path: Path) -> None:
    built = tmp_path / "built"
    files = built / "CMakeFiles" / "3.25.1"
    files.mkdir(parents=True)
    for name in (
        "CMakeSystem.cmake",
        "CMakeCXXCompiler.cmake",
        "CMakeDetermineCompilerABI_CXX.bin",
    ):
        (files / name).write_text(name)
    (built / "CMakeCache.txt").write_text(
        "CMAKE_CXX_COMPILER:FILEPATH=/usr/bin/c++\nCMAKE_EXECUTABLE_FORMAT:INTERNAL=ELF\n"
        "HAS_FLTO:INTERNAL=1\nFOO_DIR:PATH=/env/x\n"
    )
    store = tmp_path / "cmake-id" / "key"
    assert not seed(store, tmp_path / "fresh0", "3.25.1"), "nothing kept yet"
    keep(store, "3.25.1", built)
    fresh = tmp_path / "fresh"
    assert seed(store, fresh, "3.25.1")
    seeded = sorted(p.name for p in (fresh / "CMakeFiles" / "3.25.1").iterdir())
    assert seeded == [
        "CMakeCXXCompiler.cmake",
        "CMakeDetermineCompilerABI_CXX.bin",
        "CMakeSystem.cmake",
    ]
    # Identification's own cache entries only: the project's checks and paths are redone.
    assert (fresh / "CMakeCache.txt").read_text() == (
        "CMAKE_PLATFORM_INFO_INITIALIZED:INTERNAL=1\n"
        "CMAKE_CXX_COMPILER:FILEPATH=/usr/bin/c++\nCMAKE_EXECUTABLE_FORMAT:INTERNAL=ELF\n"
    )
    assert not seed(store, fresh, "3.25.1"), "a configured directory is never seeded"
