"""Reading recipe files into validated models, with errors a person can act on."""

from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from wheelkiln.errors import RecipeError
from wheelkiln.recipe.model import Recipe

SCHEMA_PATH = Path(__file__).with_name("recipe.schema.json")


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


def recipe_schema() -> dict[str, Any]:
    schema = Recipe.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "wheelkiln recipe"
    return schema


def render_schema() -> str:
    return json.dumps(recipe_schema(), indent=2, sort_keys=True) + "\n"


def _dotted(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item}]" if parts else f"[{item}]"
        else:
            parts.append(item)
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
    text = str(error["msg"])
    text = text.removeprefix("Value error, ")
    where = f"key '{key}'" if key else "recipe"
    received = error.get("input")
    shown = "" if isinstance(received, dict) else f" (got {received!r})"
    return f"{path}: {where}: {text}{shown}."


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
    if sharding.filter == "source" and not sharding.source_globs:
        problems.append(
            f"{path}: key 'sharding.source_globs': filter = 'source' needs globs naming the "
            "generated sources to partition."
        )
    if sharding.filter == "seat" and sharding.source_globs:
        problems.append(
            f"{path}: keys 'sharding.filter' and 'sharding.source_globs': with filter = 'seat' "
            "and source globs both partitions would act. Each shard would then compile about "
            "1/N² of the work and the union would miss most of the build, while still going "
            "green. Choose one: remove source_globs, or set filter = 'source'."
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
    if recipe.source.path is not None:
        tree = (path.parent / recipe.source.path).resolve()
        if not tree.is_dir():
            problems.append(
                f"{path}: key 'source.path': {tree} is not a directory. Point it at the "
                "package's source tree, relative to the recipe file."
            )
    return problems


def parse_recipe(data: dict[str, Any], path: Path) -> Recipe:
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        lines = [_explain(error, path) for error in exc.errors()]
        raise RecipeError(
            "\n".join(lines),
            hint=f"Fix the recipe, then check it with: kiln recipe check {path}",
        ) from None
    problems = _consistency(recipe, path)
    if problems:
        raise RecipeError(
            "\n".join(problems), hint=f"Fix the recipe, then run: kiln recipe check {path}"
        )
    return recipe


def load_recipe(path: Path | str) -> LoadedRecipe:
    """Load and validate one recipe file."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(
            f"{path}: no such recipe file.",
            hint="Give the path of a recipe TOML file, e.g. recipes/demo-cpp.toml.",
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{path}: not valid TOML: {exc}.", hint="Fix the syntax.") from None
    except UnicodeDecodeError:
        raise RecipeError(f"{path}: not UTF-8 text.", hint="Save the recipe as UTF-8.") from None
    return LoadedRecipe(parse_recipe(data, path.resolve()), path.resolve())


def find_recipe(name_or_path: str, search_dirs: list[Path] | None = None) -> LoadedRecipe:
    """Accept a recipe path, or a bare name looked up as recipes/NAME.toml."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.exists():
        return load_recipe(candidate)
    dirs = search_dirs or [Path.cwd() / "recipes"]
    for directory in dirs:
        path = directory / f"{name_or_path}.toml"
        if path.is_file():
            return load_recipe(path)
    known = sorted(p.stem for d in dirs if d.is_dir() for p in d.glob("*.toml"))
    guesses = difflib.get_close_matches(name_or_path, known, n=1, cutoff=0.6)
    hint = f"Perhaps you meant '{guesses[0]}'? " if guesses else ""
    raise RecipeError(
        f"No recipe named '{name_or_path}' in {', '.join(str(d) for d in dirs)}.",
        hint=hint + (f"Known recipes: {', '.join(known)}." if known else "Give a recipe path."),
    )
