"""Bad input: a clear one-paragraph message naming the file, key or argument, a non-zero
exit, no traceback, and nothing already built removed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def kiln(tmp_path: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {"KILN_HOME": str(tmp_path / "home"), "KILN_STATE_HOME": str(tmp_path / "state"),
           "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "wheelkiln", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, check=False)


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """An output directory holding an earlier wheel and record, which must survive."""
    out = tmp_path / "dist"
    out.mkdir()
    (out / "demo_cpp-0.1.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"earlier wheel")
    (out / "demo-cpp-py3.11-linux-x86_64.build.json").write_text("{}")
    return out


def write_recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    return path


CASES = {
    "unknown recipe name": (["build", "no-such-recipe"], 2, "No recipe named 'no-such-recipe'"),
    "recipe file missing": (["build", "missing.toml"], 2, "missing.toml: no such recipe file."),
    "unknown cell": (["build", ROOT / "recipes" / "demo-cpp.toml", "--cell", "python=2.7"], 2,
                     "--cell 'python=2.7' matches no cell of demo-cpp."),
    "unknown cell axis": (["build", ROOT / "recipes" / "demo-cpp.toml", "--cell", "gpu=a100"], 2,
                          "--cell: unknown axis 'gpu'."),
    "shard index out of range": (["shard", ROOT / "recipes" / "demo-cpp.toml", "--index", "4",
                                  "--count", "4"], 2, "--index 4 is outside 0..3 for --count 4."),
    "link without shards dir": (["link", ROOT / "recipes" / "demo-cpp.toml", "--shards", "nowhere"], 2,
                                "--shards nowhere is not a directory:"),
    "verify a missing wheel": (["verify", "a.whl", "b.whl"], 2, "a.whl: no such wheel."),
    "unknown cache backend": (["build", ROOT / "recipes" / "demo-cpp.toml", "--cache", "distcc"], 2,
                              "Invalid value for '--cache'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_arguments(tmp_path: Path, built: Path, case: str) -> None:
    args, code, message = CASES[case]
    result = kiln(tmp_path, *args, "--out", built) if args[0] in ("build", "shard", "link") else kiln(tmp_path, *args)
    assert result.returncode == code, result.stderr
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert (built / "demo_cpp-0.1.0-cp311-cp311-linux_x86_64.whl").read_bytes() == b"earlier wheel"
    assert (built / "demo-cpp-py3.11-linux-x86_64.build.json").read_text() == "{}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\n[source]\npath = "."\n[sharding]\ncuont = 2\n',
         "unknown key 'sharding.cuont' in [sharding]. Perhaps you meant 'sharding.count'?"),
        ('name = "x"\n', "missing required key 'source'."),
        ('name = "x"\n[source]\npath = "."\n[matrix]\npython = "3.11"\n', "key 'matrix.python'"),
        ('name = "x"\n[source]\npath = "."\n[sharding]\nplatforms = ["linux-aarch64"]\n',
         "key 'sharding.platforms': 'linux-aarch64' is not in matrix.platforms"),
        ('name = "x"\n[source]\npath = "nowhere"\n', "key 'source.path':"),
        ("name = [\n", "not valid TOML"),
    ],
)
def test_bad_recipes(tmp_path: Path, built: Path, text: str, message: str) -> None:
    recipe = write_recipe(tmp_path, text)
    for args in (["recipe", "check", recipe], ["build", recipe, "--out", built]):
        result = kiln(tmp_path, *args)
        assert result.returncode == 2, result.stderr
        assert str(recipe) in result.stderr.replace("\n", "")
        assert message in " ".join(result.stderr.split())
        assert "Traceback" not in result.stderr
    assert (built / "demo_cpp-0.1.0-cp311-cp311-linux_x86_64.whl").read_bytes() == b"earlier wheel"


def test_every_command_has_help(tmp_path: Path) -> None:
    for command in (["build"], ["shard"], ["link"], ["verify"], ["matrix"], ["ci", "github"],
                    ["bench"], ["bench", "report"], ["recipe", "check"], ["recipe", "schema"]):
        result = kiln(tmp_path, *command, "--help")
        assert result.returncode == 0, command
        assert "Usage:" in result.stdout and len(result.stdout.splitlines()) > 4
