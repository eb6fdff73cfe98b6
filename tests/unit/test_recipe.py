"""Recipes: typed loading, the schema, and errors that name the file and the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wheelkiln.errors import RecipeError
from wheelkiln.matrix.cells import expand_cells, select_cell
from wheelkiln.recipe.load import SCHEMA_PATH, load_recipe, project_root, render_schema

GOOD = """
name = "pkg"
[source]
path = "src"
[build]
env = { MAX_JOBS = "2" }
[matrix]
python = ["3.11", "3.12"]
platforms = ["linux-x86_64", "linux-aarch64"]
[[matrix.cuda]]
version = "12.8"
arch_list = ["8.0", "9.0"]
[[matrix.cuda]]
version = "13.0"
arch_list = ["9.0"]
[sharding]
count = 4
platforms = ["linux-x86_64"]
[[families]]
name = "sm90"
pattern = "sm90/"
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "src").mkdir(exist_ok=True)
    path = tmp_path / "pkg.toml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(RecipeError) as caught:
        load_recipe(write(tmp_path, text))
    return caught.value.message


def test_good_recipe_loads_frozen_with_every_field(tmp_path: Path) -> None:
    loaded = load_recipe(write(tmp_path, GOOD))
    recipe = loaded.recipe
    assert recipe.sharding.count == 4
    assert [lane.version for lane in recipe.matrix.cuda] == ["12.8", "13.0"]
    assert recipe.families[0].name == "sm90"
    assert recipe.build.env == {"MAX_JOBS": "2"}
    with pytest.raises(Exception, match="frozen"):
        recipe.sharding.count = 2  # type: ignore[misc]


def test_cells_cross_axes_and_collapse_torch(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, GOOD)).recipe
    cells = expand_cells(recipe)
    assert len(cells) == 2 * 2 * 2  # python × cuda × platform; torch collapsed
    assert {c.torch for c in cells} == {"none"}
    assert "pkg-py3.11-cu13.0-linux-x86_64" in {c.id for c in cells}
    assert select_cell(recipe, "python=3.12,cuda=12.8").id == "pkg-py3.12-cu12.8-linux-x86_64"


def test_unknown_key_names_file_dotted_key_and_suggestion(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace("count = 4", "cuont = 4"))
    assert f"{tmp_path / 'pkg.toml'}: unknown key 'sharding.cuont' in [sharding]." in message
    assert "Perhaps you meant 'sharding.count'?" in message


def test_unknown_key_in_array_of_tables(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace('arch_list = ["9.0"]', 'arch_lst = ["9.0"]'))
    assert "unknown key 'matrix.cuda[1].arch_lst'" in message
    assert "Perhaps you meant 'matrix.cuda[1].arch_list'?" in message


def test_wrong_type_names_key(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace("count = 4", 'count = "four"'))
    assert message == (
        f"{tmp_path / 'pkg.toml'}: key 'sharding.count': expected an integer, "
        "got a string ('four')."
    )


def test_missing_source(tmp_path: Path) -> None:
    text = GOOD.replace('[source]\npath = "src"\n', "")
    assert "missing required key 'source'" in error_of(tmp_path, text)


def test_sharding_platform_outside_matrix(tmp_path: Path) -> None:
    message = error_of(
        tmp_path,
        GOOD.replace('platforms = ["linux-x86_64"]\n[[fam', 'platforms = ["windows-amd64"]\n[[fam'),
    )
    assert "key 'sharding.platforms': 'windows-amd64' is not in matrix.platforms" in message


def test_both_partitions_refused(tmp_path: Path) -> None:
    message = error_of(
        tmp_path, GOOD.replace("count = 4", 'count = 4\nsource_globs = ["gen/*.cu"]')
    )
    assert "both partitions would act" in message
    assert "1/N²" in message


def test_pypi_source_needs_pinned_digest(tmp_path: Path) -> None:
    text = GOOD.replace('path = "src"', 'pypi = "pycryptodome==3.20.0"')
    assert "key 'source': 'source.pypi' needs 'source.sha256'" in error_of(tmp_path, text)


def test_invalid_toml_names_file(tmp_path: Path) -> None:
    message = error_of(tmp_path, "name = \n")
    assert str(tmp_path / "pkg.toml") in message and "not valid TOML" in message


def test_checked_in_schema_is_current() -> None:
    assert SCHEMA_PATH.read_text() == render_schema(), (
        "recipe.schema.json is stale: run `kiln recipe schema > src/wheelkiln/recipe/recipe.schema.json`"
    )


def test_bundled_recipes_are_valid() -> None:
    recipes = sorted(Path(__file__).parents[2].joinpath("recipes").glob("*.toml"))
    assert recipes, "no recipes under recipes/"
    for path in recipes:
        load_recipe(path)


def test_cli_error_is_one_paragraph_without_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("count = 4", "cuont = 4"))
    kiln = Path(sys.executable).with_name("kiln")
    result = subprocess.run(
        [str(kiln), "recipe", "check", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "error: " in result.stderr and "Perhaps you meant 'sharding.count'?" in result.stderr


@pytest.mark.parametrize(
    ("value", "got"),
    [('"4"', "a string ('4')"), ("true", "a boolean (True)"), ("4.0", "a float (4.0)")],
)
def test_count_is_never_coerced(tmp_path: Path, value: str, got: str) -> None:
    message = error_of(tmp_path, GOOD.replace("count = 4", f"count = {value}"))
    assert message == f"{tmp_path / 'pkg.toml'}: key 'sharding.count': expected an integer, got {got}."


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("count = 4", "count = 257", "key 'sharding.count': must be less than or equal to 256 (got 257)."),
        ("count = 4", "count = 0", "key 'sharding.count': must be greater than or equal to 1 (got 0)."),
        ("[build]", "[build]\njobs = 0", "key 'build.jobs': must be greater than or equal to 1 (got 0)."),
        ("[build]", "[build]\njobs = 100000", "key 'build.jobs': must be less than or equal to 1024"),
        ('name = "pkg"', f'name = "{"p" * 65}"', "key 'name': must have at most 64 characters"),
        ('name = "pkg"', 'name = "../pkg"', "key 'name': must be letters, digits, '.', '_' or '-'"),
        ('name = "pkg"', 'name = "pkg/sub"', "key 'name': must be letters, digits, '.', '_' or '-'"),
        ("[matrix]", '[matrix]\ntorch = ["../2.9"]', "key 'matrix.torch[0]': a torch version looks like"),
        ("[build]", '[cache]\nnamespace = "../up"\n[build]', "key 'cache.namespace': must be letters"),
        ("[build]", '[source.git]\n[build]', "key 'source.git': expected a string, got a table."),
        ("[build]", '[build]\nrequires = ["--index-url=http://evil"]',
         "key 'build.requires[0]': must not start with '-'"),
        ("[build]", '[verify]\nimport = "os; os.system(1)"\n[build]',
         "key 'verify.import': an importable module name looks like 'pkg' or 'pkg.sub'"),
    ],
)
def test_values_are_bounded_and_shaped(tmp_path: Path, old: str, new: str, expected: str) -> None:
    message = error_of(tmp_path, GOOD.replace(old, new, 1))
    assert message.startswith(f"{tmp_path / 'pkg.toml'}: ")
    assert expected in message


@pytest.mark.parametrize(
    ("env", "key", "problem"),
    [
        ('{ "A=B" = "1" }', 'build.env."A=B"', "an environment variable name is letters"),
        ('{ "" = "1" }', 'build.env.""', "an environment variable name is letters"),
        ('{ "1X" = "1" }', "build.env.1X", "an environment variable name is letters"),
        ('{ A = "x\\u0000y" }', "build.env.A", "contains a NUL character"),
        ('{ "A\\u0000" = "1" }', 'build.env."A\\u0000"', "an environment variable name is letters"),
        ("{ A = 1 }", "build.env.A", "expected a string, got an integer (1)"),
    ],
)
def test_env_keys_and_values_are_checked(tmp_path: Path, env: str, key: str, problem: str) -> None:
    message = error_of(tmp_path, GOOD.replace('env = { MAX_JOBS = "2" }', f"env = {env}"))
    assert message.startswith(f"{tmp_path / 'pkg.toml'}: key '{key}': {problem}")


def test_env_placeholders_and_newlines_are_kept(tmp_path: Path) -> None:
    env = 'env = { CFLAGS = "-I{build_env}/include", NOTE = "two\\nlines", _X1 = "" }'
    recipe = load_recipe(write(tmp_path, GOOD.replace('env = { MAX_JOBS = "2" }', env))).recipe
    assert recipe.build.env == {"CFLAGS": "-I{build_env}/include", "NOTE": "two\nlines", "_X1": ""}


@pytest.mark.parametrize(
    ("old", "new", "key", "problem"),
    [
        ('path = "src"', 'path = "src"\nsubdir = "../up"', "source.subdir", "must not contain '..'"),
        ('path = "src"', 'path = "src"\nsubdir = "/etc"', "source.subdir",
         "must be relative to the package root, not absolute"),
        ("count = 4", 'count = 4\npartition = "source"\nsource_globs = ["csrc/../../*.cpp"]',
         "sharding.source_globs[0]", "must not contain '..'"),
        ("count = 4", 'count = 4\npartition = "source"\nsource_globs = ["/abs/*.cpp"]',
         "sharding.source_globs[0]", "must be relative to the package root, not absolute"),
        ("count = 4", 'count = 4\npartition = "source"\nsource_globs = ["C:/x/*.cpp"]',
         "sharding.source_globs[0]", "must be relative to the package root, not absolute"),
        ("count = 4", 'count = 4\npartition = "source"\nsource_globs = [""]',
         "sharding.source_globs[0]", "must not be empty"),
    ],
)
def test_package_paths_stay_inside_the_package(
    tmp_path: Path, old: str, new: str, key: str, problem: str
) -> None:
    message = error_of(tmp_path, GOOD.replace(old, new))
    assert message.startswith(f"{tmp_path / 'pkg.toml'}: key '{key}': {problem}")


def project(tmp_path: Path, source: str, extra: str = "") -> Path:
    """A recipe at project/recipes/pkg.toml, a tree at project/src and one outside."""
    (tmp_path / "project" / "recipes").mkdir(parents=True)
    (tmp_path / "project" / "src" / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    path = tmp_path / "project" / "recipes" / "pkg.toml"
    path.write_text(f'name = "pkg"\n[source]\n{source}\n{extra}')
    return path


@pytest.mark.parametrize(
    "source", ['path = "../src"', 'path = "../src/../src"', 'path = "{project}/src"']
)
def test_source_path_inside_the_project_loads(tmp_path: Path, source: str) -> None:
    path = project(tmp_path, source.format(project=tmp_path / "project"), "")
    assert load_recipe(path).resolve(load_recipe(path).recipe.source.path or "") == (
        tmp_path / "project" / "src"
    )


@pytest.mark.parametrize(
    ("source", "extra", "key"),
    [
        ('path = "../../outside"', "", "source.path"),
        ('path = "{tmp}/outside"', "", "source.path"),
        ('path = "/"', "", "source.path"),
        ('path = "../escape"', "", "source.path"),  # a symlink to outside
        ('path = "../src"', '[sharding]\npartition_map = "/dev/zero"', "sharding.partition_map"),
        ('path = "../src"', '[sharding]\npartition_map = "../../map.json"', "sharding.partition_map"),
    ],
)
def test_paths_resolving_outside_the_project_are_refused(
    tmp_path: Path, source: str, extra: str, key: str
) -> None:
    path = project(tmp_path, source.format(tmp=tmp_path), extra)
    (tmp_path / "project" / "escape").symlink_to(tmp_path / "outside")
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    assert caught.value.message.startswith(f"{path}: key '{key}': ")
    assert f"resolves outside the recipe's project {tmp_path / 'project'}." in caught.value.message


def test_subdir_through_a_symlink_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    path = project(tmp_path, 'path = "../src"\nsubdir = "link"')
    (tmp_path / "project" / "src" / "link").symlink_to(tmp_path / "outside")
    message = error_of_path(path)
    assert message.startswith(f"{path}: key 'source.subdir': 'link' resolves outside the source tree")


def error_of_path(path: Path) -> str:
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    return caught.value.message


def test_project_root_is_the_git_checkout(tmp_path: Path) -> None:
    """Inside a checkout a recipe reaches the whole checkout, and nothing above it."""
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "pkgs" / "one").mkdir(parents=True)
    (checkout / "deep" / "recipes").mkdir(parents=True)
    (tmp_path / "beside").mkdir()
    assert project_root(checkout / "deep" / "recipes" / "x.toml") == checkout
    path = checkout / "deep" / "recipes" / "x.toml"
    path.write_text('name = "x"\n[source]\npath = "../../pkgs/one"\n')
    assert load_recipe(path).recipe.source.path == "../../pkgs/one"
    path.write_text('name = "x"\n[source]\npath = "../../../beside"\n')
    assert "resolves outside the recipe's project" in error_of_path(path)
    # outside any checkout: the recipe directory's parent
    assert project_root(tmp_path / "a" / "b.toml") == tmp_path


@pytest.mark.parametrize(
    "text",
    [
        "x = " + "[" * 5000 + "]" * 5000,
        "x = " + "{a = " * 5000 + "1" + "}" * 5000,
        "x = " + "9" * 5000,
    ],
    ids=["deep-array", "deep-inline-table", "huge-int"],
)
def test_parser_failures_are_recipe_errors(tmp_path: Path, text: str) -> None:
    message = error_of(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'pkg.toml'}: not valid TOML: ")


def test_deep_tables_from_dotted_headers_are_recipe_errors(tmp_path: Path) -> None:
    header = ".".join(f"k{n}" for n in range(3000))
    message = error_of(tmp_path, GOOD + f"[matrix.cuda.{header}]\nx = 1\n")
    assert message.startswith(f"{tmp_path / 'pkg.toml'}: unknown key 'matrix.cuda[1].k0' in ")


def test_oversized_and_unreadable_files(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD + "#" * (1 << 20))
    assert message == f"{tmp_path / 'pkg.toml'}: larger than 1024 KiB; a recipe is a page of TOML."
    path = tmp_path / "bad.toml"
    path.write_bytes(b'name = "\xff"\n')
    assert error_of_path(path) == f"{path}: not UTF-8 text (byte 8)."


def test_names_the_os_refuses_are_recipe_errors(tmp_path: Path) -> None:
    """A path the file system cannot even look up is named, with the OS's reason (a long
    path is shown with its middle elided)."""
    long_name = "a" * 300
    message = error_of(tmp_path, GOOD.replace('path = "src"', f'path = "{long_name}"'))
    assert message.startswith(f"{tmp_path / 'pkg.toml'}: key 'source.path': {tmp_path}")
    assert message.endswith(
        "aaa is not a directory (unreadable: File name too long). Point it at the package's "
        "source tree, relative to the recipe file."
    )
    message = error_of_path(tmp_path / f"{long_name}.toml")
    assert message.startswith(str(tmp_path))
    assert message.endswith("aaa.toml: not a recipe file (unreadable: File name too long).")


def test_executor_settings_load_and_resolve_against_the_recipe(tmp_path: Path) -> None:
    from wheelkiln.settings import resolve_executor

    loaded = load_recipe(write(tmp_path, GOOD + '[executor]\nengine = "dask"\nscheduler = '
                               '"tcp://sched:8786"\nhandoff = "shared"\nworker_memory = 16\n'))
    assert resolve_executor(loaded).settings == {
        "scheduler": "tcp://sched:8786", "handoff": str(tmp_path / "shared"), "worker_memory": "16"}
    # An option (or its variable: click reads them into the same argument) wins per key.
    choice = resolve_executor(loaded, scheduler="tcp://other:1", worker_memory=2)
    assert (choice.engine, choice.settings["scheduler"], choice.settings["worker_memory"]) == (
        "dask", "tcp://other:1", "2")
    # The fleet's keys are for the dask engine only.
    assert resolve_executor(loaded, engine="local").settings == {}
    assert resolve_executor(load_recipe(write(tmp_path, GOOD))).engine == "local"


def test_an_unusable_executor_handoff_is_named_by_its_key(tmp_path: Path) -> None:
    from wheelkiln.errors import PathError
    from wheelkiln.settings import resolve_executor

    (tmp_path / "shared").write_text("a file, not a directory")
    loaded = load_recipe(write(tmp_path, GOOD + '[executor]\nengine = "dask"\nscheduler = '
                               '"tcp://sched:8786"\nhandoff = "shared"\n'))
    with pytest.raises(PathError) as caught:
        resolve_executor(loaded)
    shared = tmp_path / "shared"
    assert str(caught.value) == (f"{tmp_path / 'pkg.toml'}: key 'executor.handoff': {shared}: "
                                 f"{shared} is a file, not a directory.")
    # --handoff (or $KILN_HANDOFF) wins, so the recipe's is not looked at
    given = tmp_path / "given"
    assert resolve_executor(loaded, handoff=given).settings["handoff"] == str(given)


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('engine = "ray"', "key 'executor.engine': must be 'local' or 'dask' (got 'ray')."),
        ('scheduler = "sched:8786"', "key 'executor.scheduler': a Dask scheduler address looks "
                                     "like 'tcp://HOST:8786', as `dask scheduler` prints it"),
        ("worker_memory = 0", "key 'executor.worker_memory': "),
        ('engine = "local"\nscheduler = "tcp://s:1"', "key 'executor': 'executor.scheduler' "
                                                     "applies only with executor.engine = 'dask', "
                                                     "and this recipe says 'local'"),
        ('schedular = "tcp://s:1"', "unknown key 'executor.schedular' in [executor]. Perhaps "
                                    "you meant 'executor.scheduler'?"),
    ],
)
def test_executor_settings_are_checked_naming_the_key(
    tmp_path: Path, table: str, problem: str
) -> None:
    message = error_of(tmp_path, GOOD + f"[executor]\n{table}\n")
    assert message.startswith(f"{tmp_path / 'pkg.toml'}: {problem}"), message


REFUSED_ENV = {
    "an unknown placeholder": (
        '{ X = "{nope}" }',
        "build.env.X uses the placeholder {nope}, which kiln does not know.",
    ),
    "a compiler-cache setting": (
        '{ CCACHE_DIR = "/tmp/c" }',
        "build.env.CCACHE_DIR configures the compiler cache, which kiln configures itself for "
        "correctness (and removes from every build).",
    ),
    "a name of kiln's own": (
        '{ KILN_HOME = "/tmp/k" }',
        "build.env.KILN_HOME is a name of kiln's own: kiln sets such variables for each job",
    ),
    "nvcc flags with quotes": (
        """{ NVCC_APPEND_FLAGS = '-Xcompiler "-O2 -g"' }""",
        "build.env: NVCC_APPEND_FLAGS='-Xcompiler \"-O2 -g\"' holds quotes or backslashes",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_ENV))
def test_recipe_check_refuses_the_build_env_a_build_refuses(tmp_path: Path, case: str) -> None:
    """The issue: `kiln recipe check` said ok, and `kiln build` refused the recipe."""
    env, problem = REFUSED_ENV[case]
    text = GOOD.replace('env = { MAX_JOBS = "2" }', f"env = {env}")
    path = write(tmp_path, text)
    assert error_of(tmp_path, text).startswith(f"{path}: {problem}")
    kiln = Path(sys.executable).with_name("kiln")
    result = subprocess.run([str(kiln), "recipe", "check", str(path)], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 2, result.stderr
    assert " ".join(result.stderr.split()).startswith(f"error: {path}: {problem}"), result.stderr
