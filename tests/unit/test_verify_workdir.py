"""Wheel verification: no file in the wheel names a kiln work directory."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from wheelkiln.builder.wheel_checks import check_no_work_directory
from wheelkiln.errors import BuildError


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def test_a_config_file_naming_the_work_directory_fails(tmp_path: Path) -> None:
    work = tmp_path / "work"
    config = f'C_COMPILER = "{work}/demo-meson-py3.11-linux-x86_64-link/kiln-bin/cc"\n'.encode()
    wheel = _wheel(tmp_path / "a.whl", {"pkg/__init__.py": b"", "pkg/__config__.py": config})
    with pytest.raises(BuildError) as error:
        check_no_work_directory(wheel, [work])
    assert error.value.message == (
        f"a.whl: 1 file(s) name the kiln work directory {work}: pkg/__config__.py."
    )
    stable = f'C_COMPILER = "{tmp_path}/home/bin/38a0018d144a410bc5c9/cc"\n'.encode()
    check_no_work_directory(_wheel(tmp_path / "b.whl", {"pkg/__config__.py": stable}), [work])


def test_the_build_environment_seen_through_the_work_directory_is_not_a_job(
    tmp_path: Path,
) -> None:
    # numpy's __config__.py records the build's interpreter: the same in every job.
    work = tmp_path / "work"
    python = f'PYTHON = "{work}/.envs/0d1b2e00dbb51309/bin/python"\n'.encode()
    check_no_work_directory(_wheel(tmp_path / "e.whl", {"pkg/__config__.py": python}), [work])
    both = python + f'CC = "{work}/cell-link/kiln-bin/cc"\n'.encode()
    with pytest.raises(BuildError, match=r"pkg/__config__\.py"):
        check_no_work_directory(_wheel(tmp_path / "f.whl", {"pkg/__config__.py": both}), [work])


@pytest.mark.compile
def test_debug_info_is_not_searched_but_an_rpath_is(tmp_path: Path) -> None:
    work = tmp_path / "work"
    job = work / "cell" / "src"
    job.mkdir(parents=True)
    (job / "m.c").write_text("int f(void) { return 1; }\n")
    subprocess.run(["gcc", "-g", "-shared", "-fPIC", "m.c", "-o", "m.so"], cwd=job, check=True)
    data = (job / "m.so").read_bytes()
    assert str(job).encode() in data, "DWARF names the compile's directory"
    check_no_work_directory(_wheel(tmp_path / "g.whl", {"pkg/m.so": data}), [work])
    subprocess.run(["gcc", "-shared", "-fPIC", "m.c", "-o", "r.so", f"-Wl,-rpath,{job}"],
                   cwd=job, check=True)
    wheel = _wheel(tmp_path / "r.whl", {"pkg/r.so": (job / "r.so").read_bytes()})
    with pytest.raises(BuildError, match=r"pkg/r\.so"):
        check_no_work_directory(wheel, [work])
    with pytest.raises(BuildError, match=r"pkg/r\.so"):  # even the job's own: no object
        check_no_work_directory(wheel, [work], own=work / "cell")
    # An RPATH into the build environment or the CUDA view loads nothing elsewhere either,
    # where a config file may name them.
    for view in (".envs/0d1b2e00dbb51309/lib", ".cuda/38a0018d144a410bc5c9/lib64"):
        subprocess.run(["gcc", "-shared", "-fPIC", "m.c", "-o", "v.so", f"-Wl,-rpath,{work}/{view}"],
                       cwd=job, check=True)
        wheel = _wheel(tmp_path / "v.whl", {"pkg/v.so": (job / "v.so").read_bytes(),
                                             "pkg/config.py": f"LIB = '{work}/{view}'".encode()})
        with pytest.raises(BuildError) as error:
            check_no_work_directory(wheel, [work], own=work / "cell")
        assert error.value.message.endswith(f"name the kiln work directory {work}: pkg/v.so.")


def test_a_package_may_record_the_directory_it_was_built_in(tmp_path: Path) -> None:
    # contourpy 1.3.3's _build_config.py, as meson's configure_file writes it.
    work = tmp_path / "work"
    own = work / "contourpy-py3.11-linux-x86_64"
    config = (
        f'build_dir=r"{own}/build/lib/contourpy/util",\n'
        f'source_dir=r"{own}/src/lib/contourpy/util",\n'
        f'python_path=r"{work}/.envs/6ed332d13f8ea221/bin/python",\n'
    ).encode()
    files = {"contourpy/__init__.py": b"", "contourpy/util/_build_config.py": config}
    wheel = _wheel(tmp_path / "c.whl", files)
    assert check_no_work_directory(wheel, [work], own=own) == ["contourpy/util/_build_config.py"]
    with pytest.raises(BuildError, match=r"contourpy/util/_build_config\.py"):
        check_no_work_directory(wheel, [work], own=work / "other")  # not the maker's own


@pytest.mark.parametrize(
    "elsewhere",
    [
        "contourpy-py3.11-linux-x86_64-shard-0-of-3/build",  # another job's, named alike
        "contourpy-py3.11-linux-x86_64-link/kiln-bin/cc",
        "somewhere-else/x",
    ],
)
def test_no_other_directory_of_the_workdir_may_be_named(tmp_path: Path, elsewhere: str) -> None:
    work = tmp_path / "work"
    own = work / "contourpy-py3.11-linux-x86_64"
    config = f'build_dir=r"{own}/build"\nother=r"{work}/{elsewhere}"\n'.encode()
    wheel = _wheel(tmp_path / "d.whl", {"contourpy/util/_build_config.py": config})
    with pytest.raises(BuildError) as error:
        check_no_work_directory(wheel, [work], own=own)
    assert error.value.message == (
        f"d.whl: 1 file(s) name the kiln work directory {work}: contourpy/util/_build_config.py."
    )
