"""Reading recipe files into validated models, with errors a person can act on."""

from __future__ import annotations

import ast
import datetime
import difflib
import functools
import inspect
import itertools
import json
import re
import reprlib
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from wheelkiln.errors import RecipeError
from wheelkiln.recipe import model
from wheelkiln.recipe.model import Recipe

SCHEMA_PATH = Path(__file__).with_name("recipe.schema.json")
MAX_RECIPE_BYTES = 1 << 20
"""A recipe is a page of TOML; a bigger file is refused before it is parsed."""
MAX_SHOWN_ERRORS = 20


@dataclass(frozen=True)
class LoadedRecipe:
    """A validated recipe and the file it came from."""

    recipe: Recipe
    path: Path

    @property
    def name(self) -> str:
        return self.recipe.name

    def resolve(self, relative: str) -> Path:
        """A path written in the recipe, relative to the recipe file."""
        return (self.path.parent / relative).resolve()


@functools.cache
def _document_models() -> None:
    """Give every recipe model's fields their docstrings (the text beneath each field in
    ``model.py``) as descriptions, as pydantic's ``use_attribute_docstrings`` would.

    The models do not collect them when they are defined: that reads and tokenizes each
    class's source, about 70 ms of every kiln start, and only the schema shows them."""
    docs: dict[str, dict[str, str]] = {}
    for node in ast.parse(Path(model.__file__).read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for field, after in itertools.pairwise(node.body):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs.setdefault(node.name, {})[field.target.id] = inspect.cleandoc(
                    after.value.value
                )
    # In definition order, so a model's own schema is rebuilt before a model that holds it.
    for name, value in vars(model).items():
        if isinstance(value, type) and issubclass(value, BaseModel) and name in docs:
            for field_name, info in value.model_fields.items():
                if info.description is None and field_name in docs[name]:
                    info.description = docs[name][field_name]
            value.model_rebuild(force=True)


def recipe_schema() -> dict[str, Any]:
    _document_models()
    schema = Recipe.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "wheelkiln recipe"
    return schema


def render_schema() -> str:
    return json.dumps(recipe_schema(), indent=2, sort_keys=True) + "\n"


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _dotted(loc: tuple[int | str, ...]) -> str:
    """The TOML dotted key of a pydantic error location: ``matrix.cuda[1].version``;
    a key that is not a bare TOML key is quoted (``build.env."A=B"``)."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item}]" if parts else f"[{item}]"
        elif item == "[key]":
            continue  # pydantic's marker for "the key itself, not its value"
        elif _BARE_KEY.fullmatch(item):
            parts.append(item)
        else:
            parts.append(json.dumps(item[:60] + ("..." if len(item) > 60 else "")))
    return ".".join(parts)


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that owns the key at ``loc`` (for suggesting its valid keys)."""
    model: type[BaseModel] = Recipe
    for item in loc[:-1]:
        if isinstance(item, int):
            continue
        field = model.model_fields.get(item) or next(
            (f for f in model.model_fields.values() if f.alias == item), None
        )
        if field is None:
            return None
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        for candidate in candidates:
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                model = candidate
                break
        else:
            return None
    return model


def _valid_keys(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "true or false",
    "tuple_type": "an array",
    "list_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}

_SHORT = reprlib.Repr()
_SHORT.maxstring = 160
_SHORT.maxother = 60
_SHORT.maxlevel = 2
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = 4


def _shown(path: Path) -> str:
    """A path for a message, its middle elided past 1000 characters."""
    text = str(path)
    return text if len(text) <= 1000 else f"{text[:500]}...{text[-500:]}"


def _toml_type(value: Any) -> str:
    """What a value read from TOML is, in TOML's words."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime.date | datetime.time):
        return "a date or time"
    return type(value).__name__


def _explain(error: Any, path: Path) -> str:
    loc: tuple[int | str, ...] = tuple(error["loc"])
    key = _dotted(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        model = _model_at(loc)
        valid = _valid_keys(model) if model is not None else []
        parent = _dotted(loc[:-1])
        guesses = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
        where = f"in [{parent}]" if parent else "at the top level"
        message = f"{path}: unknown key '{key}' {where}."
        if guesses:
            full = f"{parent}.{guesses[0]}" if parent else guesses[0]
            message += f" Perhaps you meant '{full}'?"
        if valid:
            message += f" Valid keys here: {', '.join(valid)}."
        return message
    if kind == "missing":
        return f"{path}: missing required key '{key}'."
    where = f"key '{key}'" if key else "recipe"
    received = error.get("input")
    if kind in _EXPECTED:
        got = _toml_type(received)
        shown = "" if isinstance(received, dict | list) else f" ({_SHORT.repr(received)})"
        return f"{path}: {where}: expected {_EXPECTED[kind]}, got {got}{shown}."
    text = str(error["msg"]).removeprefix("Value error, ")
    text = re.sub(r"^(Input|String|Tuple|Dictionary) should (be|have)", r"must \2", text)
    shown = "" if isinstance(received, dict | list) else f" (got {_SHORT.repr(received)})"
    return f"{path}: {where}: {text}{shown}."


def project_root(recipe_path: Path) -> Path:
    """The directory that the paths a recipe names relative to itself must stay inside.

    ``source.path`` and ``sharding.partition_map`` are read against the recipe file's
    directory (an absolute path is taken as written), then resolved: symlinks followed,
    ``..`` collapsed. The result must lie inside the recipe's project, which is the git
    checkout holding the recipe: the nearest directory, from the recipe's own upwards,
    that has a ``.git`` entry (a clone, a worktree or a submodule). A recipe outside any
    checkout gets its directory's parent, which admits the usual layout of a ``recipes/``
    folder beside the trees it builds (``path = "../examples/pkg"``) and nothing above it.

    Both rules depend on where the recipe file is, never on what it says, so a recipe
    cannot widen its own reach; anything a pull request could point at inside the
    checkout it could also have changed.
    """
    directory = recipe_path.resolve().parent
    for candidate in (directory, *directory.parents):
        if (candidate / ".git").exists():
            return candidate
    return directory.parent


def path_kind(path: Path) -> str:
    """'directory', 'file' (regular), 'missing', 'special' (fifo, device, socket), or why
    the OS would not say (a name too long, a permission refused), following symlinks."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except (OSError, ValueError) as exc:
        return f"unreadable: {getattr(exc, 'strerror', None) or exc}"
    if stat.S_ISDIR(mode):
        return "directory"
    return "file" if stat.S_ISREG(mode) else "special"


def resolve_inside(base: Path, written: str, root: Path) -> Path | None:
    """*written* read against *base* and resolved, or None when that lands outside *root*."""
    try:
        resolved = (base / written).resolve()
    except (OSError, RuntimeError, ValueError):
        return None  # a symlink loop or a name the OS refuses: nowhere it may point
    return resolved if resolved.is_relative_to(root.resolve()) else None


def _confinement(recipe: Recipe, path: Path) -> list[str]:
    """Paths that resolve outside where they belong (see :func:`project_root`)."""
    problems: list[str] = []
    root = project_root(path)
    source = recipe.source
    if source.path is not None:
        tree = resolve_inside(path.parent, source.path, root)
        if tree is None:
            problems.append(
                f"{path}: key 'source.path': {source.path!r} resolves outside the recipe's "
                f"project {root}. Keep the source tree inside the checkout that holds the "
                "recipe, or move the recipe next to it."
            )
        elif (kind := path_kind(tree)) != "directory":
            problems.append(
                f"{path}: key 'source.path': {_shown(tree)} is not a directory ({kind}). Point "
                "it at the package's source tree, relative to the recipe file."
            )
        elif source.subdir is not None:
            package = resolve_inside(tree, source.subdir, tree)
            if package is None:
                problems.append(
                    f"{path}: key 'source.subdir': {source.subdir!r} resolves outside the "
                    f"source tree {tree} (through a symlink). Name a directory inside it."
                )
            elif (kind := path_kind(package)) != "directory":
                problems.append(
                    f"{path}: key 'source.subdir': {_shown(package)} is not a directory "
                    f"({kind}). Name the package's directory, relative to source.path."
                )
    partition_map = recipe.sharding.partition_map
    if partition_map is not None:
        mapped = resolve_inside(path.parent, partition_map, root)
        if mapped is None:
            problems.append(
                f"{path}: key 'sharding.partition_map': {partition_map!r} resolves outside "
                f"the recipe's project {root}. Keep the map in the checkout that holds the "
                "recipe, e.g. beside it."
            )
        elif (kind := path_kind(mapped)) not in ("file", "missing"):
            problems.append(
                f"{path}: key 'sharding.partition_map': {_shown(mapped)} is not a regular "
                f"file ({kind}). Point it at the JSON map `kiln shard-plan` writes."
            )
    return problems


def _consistency(recipe: Recipe, path: Path) -> list[str]:
    """Contradictions no single field can see."""
    problems: list[str] = []
    sharding = recipe.sharding
    for platform in sharding.platforms:
        if platform not in recipe.matrix.platforms:
            problems.append(
                f"{path}: key 'sharding.platforms': {platform!r} is not in matrix.platforms "
                f"({', '.join(recipe.matrix.platforms)}). Add it to matrix.platforms or remove it."
            )
    if sharding.partition == "source" and not sharding.source_globs:
        problems.append(
            f"{path}: key 'sharding.source_globs': partition = 'source' needs globs naming the "
            "generated sources to partition."
        )
    if sharding.partition == "seat" and sharding.source_globs:
        problems.append(
            f"{path}: keys 'sharding.partition' and 'sharding.source_globs': with partition = 'seat' "
            "and source globs both partitions would act. Each shard would then compile about "
            "1/N² of the work and the union would miss most of the build, while still going "
            "green. Choose one: remove source_globs, or set partition = 'source'."
        )
    if sharding.count > 1 and recipe.cache.backend == "none":
        problems.append(
            f"{path}: keys 'sharding.count' and 'cache.backend': {recipe.name} shards "
            f"{sharding.count} ways but has no compiler cache; the shards hand their work to "
            "the link job as a cache, so without one it would compile everything again. Set "
            "cache.backend = 'ccache' (or 'sccache'), or sharding.count = 1."
        )
    if recipe.matrix.links_torch and not recipe.matrix.torch:
        problems.append(
            f"{path}: key 'matrix.torch': links_torch = true needs at least one torch version."
        )
    names = [family.name for family in recipe.families]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{path}: key 'families': family name {name!r} appears twice.")
    return problems + _confinement(recipe, path)


PLACEHOLDERS = {
    "build_env": "the cell's build environment (its root directory)",
    "site_packages": "the build environment's site-packages directory",
}
"""Placeholders a recipe's ``build.env`` values may use, with what they stand for
(:func:`wheelkiln.builder.job_env.expand_recipe_env` fills them in)."""

PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
"""A placeholder, ``{{`` or ``}}`` in a ``build.env`` value."""


def unknown_placeholders(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(key, placeholder)`` for every ``{name}`` in *env* that is no placeholder."""
    wrong: list[tuple[str, str]] = []
    for key, value in env.items():
        for match in PLACEHOLDER.finditer(value):
            name = match.group(1)
            if name is not None and name not in PLACEHOLDERS:
                wrong.append((key, match.group(0)))
    return wrong


def check_recipe_env(env: Mapping[str, str], recipe_path: Path | str) -> None:
    """Raise :class:`RecipeError` naming ``build.env.KEY`` for an unknown placeholder, a
    compiler-cache setting, or nvcc flags the launcher cannot move onto the command line.

    Run where every recipe is loaded (:func:`parse_recipe`), and again by each build on
    the recipe it is given: ``kiln recipe check`` passed recipes the build refused.
    """
    from wheelkiln.cache.backend import CACHE_ENV_PREFIXES
    from wheelkiln.cache.launch import NvccEnvironmentError, nvcc_environment_args

    for key in sorted(env):
        if key.startswith("KILN_"):
            raise RecipeError(
                f"{recipe_path}: build.env.{key} is a name of kiln's own: kiln sets such "
                "variables for each job (the compiler fronts, a shard's wrapper) and reads "
                "its settings from the environment it runs in, never from a recipe.",
                hint=f"Remove it; to set {key} for kiln, set it where you run kiln.",
            )
        if key.startswith(CACHE_ENV_PREFIXES):
            raise RecipeError(
                f"{recipe_path}: build.env.{key} configures the compiler cache, which kiln "
                "configures itself for correctness (and removes from every build).",
                hint="Remove it; choose the cache with --cache and its place with --cache-dir.",
            )
    try:
        nvcc_environment_args([], env)
    except NvccEnvironmentError as error:
        raise RecipeError(f"{recipe_path}: build.env: {error}") from None
    wrong = unknown_placeholders(env)
    if not wrong:
        return
    key, placeholder = wrong[0]
    known = ", ".join(f"{{{name}}} ({what})" for name, what in PLACEHOLDERS.items())
    raise RecipeError(
        f"{recipe_path}: build.env.{key} uses the placeholder {placeholder}, which kiln "
        "does not know.",
        hint=f"Known placeholders: {known}. Write {{{{ and }}}} for literal braces.",
    )


def _renamed_keys(data: dict[str, Any], path: Path) -> None:
    """Keys with a new name: the old one is still read, with a warning naming the file
    and the new key; both at once is an error (which one would win is a guess)."""
    sharding = data.get("sharding")
    if not isinstance(sharding, dict) or "filter" not in sharding:
        return
    if "partition" in sharding:
        raise RecipeError(
            f"{path}: keys 'sharding.filter' and 'sharding.partition': 'filter' is the old "
            "name of 'partition', so the recipe sets it twice.",
            hint="Keep 'partition' and delete 'filter'.",
        )
    from wheelkiln import ui

    ui.warn(
        f"{path}: key 'sharding.filter' is deprecated; rename it to 'sharding.partition' "
        "(same values: 'seat' or 'source')."
    )


def parse_recipe(data: dict[str, Any], path: Path) -> Recipe:
    _renamed_keys(data, path)
    try:
        recipe = Recipe.model_validate(data)
    except RecursionError:
        raise RecipeError(
            f"{path}: nested too deeply to validate.",
            hint="A recipe's tables and arrays are a few levels deep; flatten it.",
        ) from None
    except ValidationError as exc:
        errors = exc.errors()
        lines = [_explain(error, path) for error in errors[:MAX_SHOWN_ERRORS]]
        if len(errors) > MAX_SHOWN_ERRORS:
            lines.append(f"{path}: ... and {len(errors) - MAX_SHOWN_ERRORS} more problems.")
        raise RecipeError(
            "\n".join(lines),
            hint=f"Fix the recipe, then check it with: kiln recipe check {path}",
        ) from None
    problems = _consistency(recipe, path)
    if problems:
        raise RecipeError(
            "\n".join(problems), hint=f"Fix the recipe, then run: kiln recipe check {path}"
        )
    check_recipe_env(recipe.build.env, path)
    return recipe


def load_recipe(path: Path | str) -> LoadedRecipe:
    """Load and validate one recipe file."""
    path = Path(path)
    kind = path_kind(path)
    if kind != "file":
        what = "no such recipe file" if kind == "missing" else f"not a recipe file ({kind})"
        raise RecipeError(
            f"{_shown(path)}: {what}.",
            hint="Give the path of a recipe TOML file, e.g. recipes/demo-cpp.toml.",
        )
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_RECIPE_BYTES + 1)
    except OSError as exc:
        raise RecipeError(
            f"{path}: cannot be read: {exc.strerror or exc}.",
            hint="Check the file's permissions.",
        ) from None
    if len(raw) > MAX_RECIPE_BYTES:
        raise RecipeError(
            f"{path}: larger than {MAX_RECIPE_BYTES // 1024} KiB; a recipe is a page of TOML.",
            hint="Check that this is the recipe file.",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(
            f"{path}: not UTF-8 text (byte {exc.start}).", hint="Save the recipe as UTF-8."
        ) from None
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise RecipeError(
            f"{path}: not valid TOML: nested too deeply to read.",
            hint="A recipe's tables and arrays are a few levels deep; flatten it.",
        ) from None
    except ValueError as exc:  # TOMLDecodeError, and an integer too long to convert
        raise RecipeError(
            f"{path}: not valid TOML: {_SHORT.repr(str(exc))[1:-1]}.", hint="Fix the syntax."
        ) from None
    resolved = path.resolve()
    return LoadedRecipe(parse_recipe(data, resolved), resolved)


def find_recipe(name_or_path: str, search_dirs: list[Path] | None = None) -> LoadedRecipe:
    """Accept a recipe path, or a bare name looked up as recipes/NAME.toml."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or path_kind(candidate) != "missing":
        return load_recipe(candidate)
    dirs = search_dirs or [Path.cwd() / "recipes"]
    for directory in dirs:
        path = directory / f"{name_or_path}.toml"
        if path_kind(path) == "file":
            return load_recipe(path)
    known = sorted(p.stem for d in dirs if d.is_dir() for p in d.glob("*.toml"))
    guesses = difflib.get_close_matches(name_or_path, known, n=1, cutoff=0.6)
    hint = f"Perhaps you meant '{guesses[0]}'? " if guesses else ""
    raise RecipeError(
        f"No recipe named '{name_or_path}' in {', '.join(str(d) for d in dirs)}.",
        hint=hint + (f"Known recipes: {', '.join(known)}." if known else "Give a recipe path."),
    )
