"""The build job's environment: the caller's variables kiln removes, the recipe's
``build.env`` placeholders, and the precedence of the compile job count."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheelkiln.builder.job_env import (
    expand_recipe_env,
    inherited_environment,
    jobs_environment,
    resolve_jobs,
)
from wheelkiln.builder.wheel_cache import _cell_digest
from wheelkiln.cache.launch import (
    NvccEnvironmentError,
    compile_command,
    compile_environment,
    nvcc_environment_args,
)
from wheelkiln.errors import RecipeError


def _venv(root: Path) -> Path:
    (root / "lib" / "python3.11" / "site-packages").mkdir(parents=True, exist_ok=True)
    return root


def test_placeholders_name_the_build_environment(tmp_path: Path) -> None:
    env_root = _venv(tmp_path / "envs" / "0123abcd")
    expanded = expand_recipe_env(
        {
            "NCCL_ROOT": "{site_packages}/nvidia/nccl",
            "CMAKE_PREFIX_PATH": "{build_env}",
            "PLAIN": "no placeholder",
            "BRACES": "{{build_env}} and a }} and a {{",
        },
        env_root,
        "r.toml",
    )
    assert expanded == {
        "NCCL_ROOT": f"{env_root}/lib/python3.11/site-packages/nvidia/nccl",
        "CMAKE_PREFIX_PATH": str(env_root),
        "PLAIN": "no placeholder",
        "BRACES": "{build_env} and a } and a {",
    }


@pytest.mark.parametrize("value", ["{buildenv}/lib", "{site-packages}", "{}", "{ build_env }"])
def test_an_unknown_placeholder_names_the_key(tmp_path: Path, value: str) -> None:
    with pytest.raises(RecipeError) as error:
        expand_recipe_env({"OK": "{build_env}", "NCCL_ROOT": value}, tmp_path, "recipes/x.toml")
    message = error.value.render()
    assert message.startswith("recipes/x.toml: build.env.NCCL_ROOT uses the placeholder {")
    assert "{build_env} (the cell's build environment (its root directory))" in message
    assert "{site_packages}" in message


def test_cache_settings_in_a_recipe_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"r\.toml: build\.env\.CCACHE_SLOPPINESS configures"):
        expand_recipe_env({"CCACHE_SLOPPINESS": "time_macros"}, tmp_path, "r.toml")


@pytest.mark.parametrize("name", ["KILN_SEAT_FRONT", "KILN_FRONT_CACHE", "KILN_HOME"])
def test_kilns_own_variables_in_a_recipe_are_refused(tmp_path: Path, name: str) -> None:
    """A recipe that set them would switch a shard's wrapper off or hand every compile to
    a program of its choosing, behind the gate's back."""
    with pytest.raises(RecipeError, match=rf"r\.toml: build\.env\.{name} is a name of kiln's own"):
        expand_recipe_env({name: "0"}, tmp_path, "r.toml")


def test_quoted_nvcc_flags_in_a_recipe_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"r\.toml: build\.env: NVCC_APPEND_FLAGS="):
        expand_recipe_env({"NVCC_APPEND_FLAGS": "-DNAME='x'"}, tmp_path, "r.toml")


def test_the_input_digest_records_the_filled_in_values(tmp_path: Path) -> None:
    """Two build environments, same recipe: a placeholder makes the inputs differ."""
    from wheelkiln.builder.environment import BuildEnvironment
    from wheelkiln.cells import NO_CUDA, NO_TORCH, Cell
    from wheelkiln.recipe.load import LoadedRecipe, parse_recipe
    from wheelkiln.settings import BuildOptions

    recipe_path = tmp_path / "r.toml"

    def digest(env: dict[str, str], env_dir: str) -> str:
        recipe = parse_recipe(
            {"name": "r", "source": {"path": "."}, "build": {"env": env}}, recipe_path
        )
        environment = BuildEnvironment(_venv(tmp_path / env_dir), ())
        cell = Cell("r", "3.11", NO_CUDA, NO_TORCH, "linux-x86_64")
        loaded = LoadedRecipe(recipe, recipe_path)
        return _cell_digest(loaded, cell, BuildOptions(), "src", environment, {"gcc": "12"})

    with_placeholder = {"NCCL_ROOT": "{site_packages}/nvidia"}
    assert digest(with_placeholder, "a") != digest(with_placeholder, "b")
    assert digest({"X": "1"}, "a") != digest({"X": "2"}, "a")


@pytest.mark.parametrize(
    ("cli", "recipe_jobs", "recipe_env", "environ", "expected"),
    [
        (3, 5, {"MAX_JOBS": "7"}, {"MAX_JOBS": "9"}, (3, "--jobs")),
        (None, 5, {"MAX_JOBS": "7"}, {"MAX_JOBS": "9"}, (5, "build.jobs")),
        (None, None, {"MAX_JOBS": "7"}, {"MAX_JOBS": "9"}, (7, "build.env.MAX_JOBS")),
        (None, None, {}, {"MAX_JOBS": "9"}, (9, "MAX_JOBS in the environment")),
        (None, None, {"MAX_JOBS": " "}, {}, (None, "cores")),
    ],
)
def test_jobs_precedence(
    cli: int | None,
    recipe_jobs: int | None,
    recipe_env: dict[str, str],
    environ: dict[str, str],
    expected: tuple[int | None, str],
) -> None:
    resolved = resolve_jobs(cli, recipe_jobs, recipe_env, environ)
    assert resolved.source == expected[1]
    if expected[0] is not None:
        assert resolved.jobs == expected[0]
    else:
        assert resolved.jobs >= 1


@pytest.mark.parametrize("text", ["zero", "0", "-2"])
def test_a_bad_max_jobs_in_the_recipe_is_an_error(text: str) -> None:
    with pytest.raises(RecipeError, match=r"^r\.toml: build\.env\.MAX_JOBS is "):
        resolve_jobs(None, None, {"MAX_JOBS": text}, {}, "r.toml")


def test_the_job_count_reaches_every_backend() -> None:
    assert jobs_environment(3) == {"MAX_JOBS": "3", "CMAKE_BUILD_PARALLEL_LEVEL": "3"}


def test_the_callers_cache_settings_are_removed() -> None:
    environ = {
        "PATH": "/usr/bin",
        "CCACHE_DISABLE": "1",
        "CCACHE_CONFIGPATH": "/home/me/ccache.conf",
        "CCACHE_LOGFILE": "/tmp/ccache.log",
        "CCACHE_MAXSIZE": "5G",
        "SCCACHE_RECACHE": "1",
        "SCCACHE_LOG": "debug",
        "DEPENDENCIES_OUTPUT": "deps.d",
        "SUNPRO_DEPENDENCIES": "deps.d",
        "PYTHONPATH": "/x",
        "CPATH": "/opt/include",
        "KILN_FRONT_CACHE": "/old/venv/bin/ccache",  # a job's, left in the shell
    }
    assert inherited_environment(environ) == {
        "PATH": "/usr/bin",
        "CCACHE_LOGFILE": "/tmp/ccache.log",
        "CCACHE_MAXSIZE": "5G",
        "SCCACHE_LOG": "debug",
        "CPATH": "/opt/include",
    }


def test_nvcc_flag_variables_move_onto_the_command_line() -> None:
    environ = {
        "NVCC_PREPEND_FLAGS": " -O3  -lineinfo ",
        "NVCC_APPEND_FLAGS": "-std=c++20 --threads 4",
        "NVCC_CCBIN": "/usr/bin/g++-12",
        "CCACHE_NODEPEND": "1",
        "KEEP": "me",
    }
    args = ["-c", "k.cu", "-o", "k.o"]
    assert compile_command("/bin/ccache", "/cuda/bin/nvcc", args, environ) == [
        "/bin/ccache", "/cuda/bin/nvcc",
        "-O3", "-lineinfo", "-c", "k.cu", "-o", "k.o",
        "-ccbin", "/usr/bin/g++-12", "-std=c++20", "--threads", "4",
        "-MD", "-MF", "k.o.d",
    ]  # fmt: skip
    assert compile_environment("/bin/ccache", "/cuda/bin/nvcc", environ) == {
        "KEEP": "me",
        "CCACHE_DEPEND": "1",
    }
    # without a cache the variables still move, and nothing else changes
    assert compile_environment(None, "nvcc", environ) == {"CCACHE_NODEPEND": "1", "KEEP": "me"}
    # gcc is not nvcc: nothing moves
    assert compile_command(None, "gcc", args, environ) == ["gcc", *args]
    assert compile_environment("/bin/ccache", "gcc", environ) is None


def test_a_command_line_host_compiler_wins_over_nvcc_ccbin() -> None:
    environ = {"NVCC_CCBIN": "/usr/bin/g++-12"}
    for spelled in (["-ccbin", "clang++"], ["--compiler-bindir", "clang++"],
                    ["--compiler-bindir=clang++"]):  # fmt: skip
        assert nvcc_environment_args(["-c", "k.cu", *spelled], environ) == ([], [])


@pytest.mark.parametrize("value", ['-Xcompiler "-O2 -g"', "-DNAME='x'", r"-DA=a\ b"])
def test_quoted_nvcc_flags_are_refused(value: str) -> None:
    with pytest.raises(NvccEnvironmentError, match="holds quotes or backslashes"):
        nvcc_environment_args(["-c", "k.cu"], {"NVCC_APPEND_FLAGS": value})
