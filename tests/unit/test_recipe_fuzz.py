"""A generated fuzz test of recipe loading: hundreds of malformed recipes, zero tracebacks.

Two valid recipes, one per partition (seat and source), are mutated programmatically:
a wrong type at every key, an unknown key (and a near-miss of a real one) in every
table, extreme values at every scalar, deep nesting, escaping paths, both partitions
at once, and garbage files (binary, invalid UTF-8, invalid TOML, empty, oversized).

Every case is loaded with :func:`load_recipe`. The only acceptable outcomes are a
:class:`RecipeError` whose every line names the file (and, where the case has one, the
dotted key), or acceptance of a case that is valid. Anything else, an unexpected
exception or a malformed recipe accepted, is counted and reported; the count must be 0.
Pure loading, no builds: the whole test takes a few seconds.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from wheelkiln.errors import RecipeError
from wheelkiln.recipe.load import load_recipe

ROOT = Path(__file__).resolve().parents[2]

Key = tuple[str | int, ...]

SEAT: dict[str, Any] = {
    "name": "fuzzpkg",
    "source": {"path": "../src/demo", "subdir": "pkg", "exclude": ["build", "**/out"]},
    "build": {
        "frontend": "pip",
        "requires": ["wheel>=0.40"],
        "env": {"MAX_JOBS": "2", "CFLAGS": "-O2 -I{build_env}/include"},
        "config_settings": {"mode": "release"},
        "jobs": 4,
        "cuda_home_nvcc": False,
    },
    "matrix": {
        "python": ["3.11", "3.12"],
        "cuda": [{"version": "13.0", "arch_list": ["8.0", "9.0"]}],
        "torch": ["2.9"],
        "platforms": ["linux-x86_64", "linux-aarch64"],
        "links_torch": True,
    },
    "sharding": {
        "count": 4,
        "filter": "seat",
        "platforms": ["linux-x86_64"],
        "partition_map": "../maps/map.json",
    },
    "families": [{"name": "sm80", "pattern": "sm80/"}, {"name": "sm90", "pattern": "sm90/"}],
    "verify": {"import": "fuzzpkg", "extension_modules": ["fuzzpkg/*.so"], "smoke": "pass"},
    "cache": {"backend": "ccache", "remote": "redis://localhost:6379", "namespace": "fuzz"},
}
"""The seat partition, from a local tree with a subdir and a partition map."""

SOURCE: dict[str, Any] = {
    "name": "fuzzsrc",
    "source": {"pypi": "fuzzsrc==1.0.0", "sha256": "ab" * 32, "subdir": "python"},
    "build": {"frontend": "build", "env": {"NVCC_THREADS": "2"}},
    "matrix": {"python": ["3.11"], "platforms": ["linux-x86_64"]},
    "sharding": {
        "count": 3,
        "filter": "source",
        "source_globs": ["csrc/generated/**/*.cpp", "csrc/*.cu"],
    },
    "families": [{"name": "core", "pattern": "csrc/generated/core/"}],
    "verify": {"extension_modules": ["fuzzsrc/_core*.so"]},
    "cache": {"backend": "sccache"},
}
"""The source partition, from a pinned sdist."""

BASES = {"seat": SEAT, "source": SOURCE}
FREE_FORM = {("build", "env"), ("build", "config_settings")}
"""Tables whose keys are data, not fields: an extra key there is not unknown."""


# --- writing TOML ------------------------------------------------------------------------


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_string(key)


def toml_string(text: str) -> str:
    if re.fullmatch(r"[^'\x00-\x1f\x7f]*", text):
        return f"'{text}'"  # a literal string: no escapes, and quick to parse when long
    # JSON escapes are TOML escapes, except that TOML also wants DEL escaped.
    return json.dumps(text).replace("\x7f", "\\u007f")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def toml_document(data: dict[str, Any]) -> str:
    """Scalars first, then one ``[table]`` per table, arrays of tables inline."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"\n[{toml_key(key)}]")
            lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()]
    return "\n".join(lines) + "\n"


# --- the cases ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    content: bytes | None
    """The file's bytes; None: the case's path is made a directory instead."""
    outcome: str
    """'error' (must be refused), 'ok' (must load) or 'either' (may do both, never crash)."""
    key: str | None = None
    """The dotted key an error must name, when there is one."""


def dotted(key: Key) -> str:
    """The dotted key as errors spell it: ``a.b[0].c``, a key that is not bare in quotes."""
    text = ""
    for part in key:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            bare = re.fullmatch(r"[A-Za-z0-9_-]+", part)
            text += ("." if text else "") + (part if bare else json.dumps(part))
    return text


def get(data: Any, key: Key) -> Any:
    for part in key:
        data = data[part]
    return data


def replaced(base: dict[str, Any], key: Key, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(base)
    get(data, key[:-1])[key[-1]] = value
    return data


def walk(data: Any, key: Key = ()) -> Iterator[tuple[Key, Any]]:
    """Every key below *data* with its value, parents before children."""
    items: Any = data.items() if isinstance(data, dict) else enumerate(data)
    for part, value in items:
        yield (*key, part), value
        if isinstance(value, dict | list):
            yield from walk(value, (*key, part))


def wrong_types(value: Any) -> list[Any]:
    """Values of every TOML type that *value*'s type is not (lists never empty)."""
    candidates: list[Any] = [
        "4",
        7,
        True,
        4.0,
        ["x"],
        {"x": "y"},
        datetime.date(2024, 1, 1),
    ]
    kind = type(value)
    return [c for c in candidates if type(c) is not kind and not (kind is list and c == [])]


def document(data: dict[str, Any]) -> bytes:
    return toml_document(data).encode()


def type_cases(name: str, base: dict[str, Any]) -> Iterator[Case]:
    for key, value in walk(base):
        for number, wrong in enumerate(wrong_types(value)):
            yield Case(
                f"{name}-type-{dotted(key)}-{number}",
                document(replaced(base, key, wrong)),
                "error",
                dotted(key),
            )


def tables(base: dict[str, Any]) -> Iterator[Key]:
    yield ()
    for key, value in walk(base):
        if isinstance(value, dict) and key not in FREE_FORM:
            yield key


def typo(word: str) -> str:
    return word[1] + word[0] + word[2:] if len(word) > 2 else word + "x"


def unknown_key_cases(name: str, base: dict[str, Any]) -> Iterator[Case]:
    for table in tables(base):
        where = dotted(table)
        prefix = f"{where}." if where else ""
        existing = [k for k in get(base, table) if isinstance(k, str)]
        for unknown in ("bogus", "x" * 300, "with space", typo(existing[0])):
            data = replaced(base, (*table, unknown), 1) if table else {**base, unknown: 1}
            yield Case(
                f"{name}-unknown-{where or 'top'}-{unknown[:12]}",
                document(data),
                "error",
                prefix + dotted((unknown,)),
            )
        # a table of unknown keys nested a few thousand levels deep below this one
        header = ".".join(f"k{n}" for n in range(3000))
        text = (
            toml_document(base) + f"\n[{prefix}{header}]\nx = 1\n"
            if not any(isinstance(p, int) for p in table)
            else None
        )
        if text is not None:
            yield Case(
                f"{name}-deep-header-{where or 'top'}", text.encode(), "error", prefix + "k0"
            )


def extreme_cases(name: str, base: dict[str, Any]) -> Iterator[Case]:
    for key, value in walk(base):
        label = f"{name}-extreme-{dotted(key)}"
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            for number, extreme in enumerate([0, -1, -(2**63), 2**63 - 1, 10**30, 257, 1025]):
                outcome = "either" if extreme in (257, 1025) else "error"  # jobs may be 257
                yield Case(
                    f"{label}-{number}",
                    document(replaced(base, key, extreme)),
                    outcome,
                    dotted(key),
                )
            text = toml_document(base).replace(
                f"{key[-1]} = {value}\n", f"{key[-1]} = {'9' * 5000}\n"
            )
            yield Case(f"{label}-5000-digits", text.encode(), "error", None)
        elif isinstance(value, str):
            for number, extreme in enumerate(["y" * 70_000, "a\0b", "\0", "-" + value]):
                outcome = "either" if extreme.startswith("-") else "error"
                yield Case(
                    f"{label}-{number}",
                    document(replaced(base, key, extreme)),
                    outcome,
                    dotted(key),
                )
            yield Case(f"{label}-empty", document(replaced(base, key, "")), "either", dotted(key))
            yield Case(
                f"{label}-newline", document(replaced(base, key, "a\nb")), "either", dotted(key)
            )
        elif isinstance(value, list) and value and not isinstance(value[0], dict):
            many = [value[0]] * 2000
            yield Case(
                f"{label}-2000-items", document(replaced(base, key, many)), "error", dotted(key)
            )
        if not isinstance(value, dict | list) and isinstance(key[-1], str):
            deep: Any = value
            for _ in range(60):
                deep = [deep]
            yield Case(
                f"{label}-nested-60", document(replaced(base, key, deep)), "error", dotted(key)
            )
            text = toml_document(base).replace(
                f"{toml_key(str(key[-1]))} = {toml_value(value)}",
                f"{toml_key(str(key[-1]))} = " + "[" * 5000 + "]" * 5000,
                1,
            )
            yield Case(f"{label}-nested-5000", text.encode(), "error", None)


Mutation = tuple[Any, ...]
"""(label, key, value, outcome[, the key the error names when it is not *key*])"""

ESCAPES: list[Mutation] = [
    ("path-root", ("source", "path"), "/", "error"),
    ("path-etc", ("source", "path"), "/etc", "error"),
    ("path-up", ("source", "path"), "../../outside", "error"),
    ("path-far-up", ("source", "path"), "../" * 40, "error"),
    ("path-up-down", ("source", "path"), "../src/../../outside", "error"),
    ("path-link-out", ("source", "path"), "../escape", "error"),
    ("path-absolute-out", ("source", "path"), "{tmp}/outside", "error"),
    ("path-absolute-in", ("source", "path"), "{tmp}/project/src/demo", "ok"),
    ("path-missing", ("source", "path"), "../src/none", "error"),
    ("path-a-file", ("source", "path"), "../maps/map.json", "error"),
    ("path-tilde", ("source", "path"), "~", "error"),
    ("path-name-too-long", ("source", "path"), "a" * 300, "error"),
    ("path-too-long", ("source", "path"), "ab/" * 1300, "error"),
    ("subdir-name-too-long", ("source", "subdir"), "a" * 300, "error"),
    ("map-name-too-long", ("sharding", "partition_map"), "m" * 300, "error"),
    ("subdir-up", ("source", "subdir"), "../demo", "error"),
    ("subdir-up-deep", ("source", "subdir"), "pkg/../../..", "error"),
    ("subdir-absolute", ("source", "subdir"), "/etc", "error"),
    ("subdir-windows", ("source", "subdir"), "C:\\Windows", "error"),
    ("subdir-unc", ("source", "subdir"), "\\\\server\\share", "error"),
    ("subdir-link-out", ("source", "subdir"), "link-out", "error"),
    ("subdir-dotdot", ("source", "subdir"), "..", "error"),
    ("exclude-up", ("source", "exclude", 0), "../x", "error"),
    ("exclude-absolute", ("source", "exclude", 0), "/", "error"),
    ("map-dev-zero", ("sharding", "partition_map"), "/dev/zero", "error"),
    ("map-proc", ("sharding", "partition_map"), "/proc/self/environ", "error"),
    ("map-passwd", ("sharding", "partition_map"), "../../../../../../../../etc/passwd", "error"),
    ("map-link-out", ("sharding", "partition_map"), "../escape/map.json", "error"),
    ("map-a-directory", ("sharding", "partition_map"), "../maps", "error"),
    ("map-not-yet-written", ("sharding", "partition_map"), "../maps/later.json", "ok"),
    ("map-absolute-in", ("sharding", "partition_map"), "{tmp}/project/maps/map.json", "ok"),
    ("namespace-up", ("cache", "namespace"), "../up", "error"),
    ("namespace-absolute", ("cache", "namespace"), "/tmp/x", "error"),
    ("name-slash", ("name",), "a/b", "error"),
    ("name-dotdot", ("name",), "..", "error"),
    ("name-long", ("name",), "n" * 65, "error"),
    ("name-longest", ("name",), "n" * 64, "ok"),
    ("family-slash", ("families", 0, "name"), "../sm80", "error"),
    ("torch-slash", ("matrix", "torch", 0), "2.9/../..", "error"),
    ("requires-option", ("build", "requires", 0), "--index-url=https://evil.example", "error"),
    ("requires-editable", ("build", "requires", 0), "-e/", "error"),
    ("env-key-equals", ("build", "env", "A=B"), "1", "error"),
    ("env-key-empty", ("build", "env", ""), "1", "error"),
    ("env-key-nul", ("build", "env", "A\0"), "1", "error"),
    ("env-value-nul", ("build", "env", "CFLAGS"), "-O2\0", "error"),
    ("env-placeholder", ("build", "env", "LDFLAGS"), "-L{site_packages}/torch/lib", "ok"),
    ("setting-equals", ("build", "config_settings", "a=b"), "c", "error"),
    ("import-code", ("verify", "import"), "os;os.system('x')", "error"),
    ("jobs-huge", ("build", "jobs"), 10**6, "error"),
    ("count-coerced-string", ("sharding", "count"), "4", "error"),
    ("count-coerced-bool", ("sharding", "count"), True, "error"),
    ("count-coerced-float", ("sharding", "count"), 4.0, "error"),
    ("pattern-bad-regex", ("families", 0, "pattern"), "(unclosed", "error"),
    ("arch-garbage", ("matrix", "cuda", 0, "arch_list", 0), "sm_80; rm -rf", "error"),
    ("platform-unknown", ("matrix", "platforms", 0), "linux-riscv64", "error"),
]
SOURCE_ESCAPES: list[Mutation] = [
    ("glob-up", ("sharding", "source_globs", 0), "../*.cpp", "error"),
    ("glob-up-inside", ("sharding", "source_globs", 0), "csrc/../../*.cpp", "error"),
    ("glob-absolute", ("sharding", "source_globs", 0), "/etc/*", "error"),
    ("glob-windows", ("sharding", "source_globs", 0), "C:/x/*.cpp", "error"),
    ("glob-backslash", ("sharding", "source_globs", 0), "\\x\\*.cpp", "error"),
    ("glob-dotdot", ("sharding", "source_globs", 0), "..", "error"),
    ("glob-empty", ("sharding", "source_globs", 0), "", "error"),
    ("glob-blank", ("sharding", "source_globs", 0), "   ", "error"),
    ("glob-star-star", ("sharding", "source_globs", 0), "**/*.cu", "ok"),
    ("git-option-url", ("source", "git"), "--upload-pack=touch /tmp/x", "error"),
    (
        "git-option-rev",
        ("source",),
        {"git": "https://example.com/x.git", "rev": "-x"},
        "error",
        "source.rev",
    ),
    ("git-without-rev", ("source",), {"git": "https://example.com/x.git"}, "error", "source.rev"),
    ("two-sources", ("source", "path"), ".", "error", "source.path"),
    ("no-source", ("source",), {"subdir": "python"}, "error", "source.path"),
    ("pypi-without-sha", ("source",), {"pypi": "fuzzsrc==1.0.0"}, "error", "source.sha256"),
    ("pypi-bad-spec", ("source", "pypi"), "fuzzsrc>=1", "error"),
    ("sha-short", ("source", "sha256"), "ab", "error"),
]


def escape_cases(
    name: str, base: dict[str, Any], table: list[Mutation], tmp: Path
) -> Iterator[Case]:
    for label, key, value, outcome, *named in table:
        if isinstance(value, str):
            value = value.replace("{tmp}", str(tmp))
        error_key = named[0] if named else dotted(key)
        yield Case(
            f"{name}-escape-{label}", document(replaced(base, key, value)), outcome, error_key
        )


def partition_cases() -> Iterator[Case]:
    both = replaced(SEAT, ("sharding", "source_globs"), ["csrc/*.cu"])
    yield Case("both-partitions", document(both), "error", "sharding.source_globs")
    no_globs = copy.deepcopy(SOURCE)
    del no_globs["sharding"]["source_globs"]
    yield Case("source-without-globs", document(no_globs), "error", "sharding.source_globs")
    yield Case("seat-without-map", document({**SEAT, "sharding": {"count": 2}}), "ok")
    for mechanism in ("both", "none", "Seat", "", "source "):
        yield Case(
            f"filter-{mechanism!r}",
            document(replaced(SEAT, ("sharding", "filter"), mechanism)),
            "error",
            "sharding.filter",
        )
    no_cache = replaced(SOURCE, ("cache", "backend"), "none")
    yield Case("sharded-without-cache", document(no_cache), "error", "cache.backend")
    yield Case(
        "shard-platform-outside-matrix",
        document(replaced(SEAT, ("sharding", "platforms"), ["windows-amd64"])),
        "error",
        "sharding.platforms",
    )
    yield Case(
        "links-torch-without-torch",
        document(replaced(SEAT, ("matrix", "torch"), [])),
        "error",
        "matrix.torch",
    )


def garbage_cases() -> Iterator[Case]:
    rng = random.Random(9)
    for number in range(12):
        size = rng.choice([1, 7, 100, 4096, 70_000])
        yield Case(
            f"garbage-binary-{number}", bytes(rng.randrange(256) for _ in range(size)), "error"
        )
    valid = toml_document(SEAT).encode()
    for number, bad in enumerate([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]):
        yield Case(f"garbage-utf8-{number}", valid.replace(b"fuzzpkg", b"fuzz" + bad, 1), "error")
    yield Case("garbage-utf16", toml_document(SEAT).encode("utf-16"), "error")
    yield Case("garbage-bom", b"\xef\xbb\xbf" + valid, "either")
    for number, text in enumerate(
        [
            "name = ",
            'name = "unterminated',
            "[source",
            "[[families]",
            "name = 'a'\nname = 'b'",
            "x = [1, 2",
            "x = {a = 1",
            "= 1",
            "a.b = 1\na = 2",
            "[a]\n[a]",
            'name = "\\q"',
            "name = 1979-05-27T07:32:00Z\n[source",
            "x = 0x",
            "x = 1__0",
            "[source]\npath = '''",
            "\0",
            'name = "a\0b"',
            "{",
            "x = [[[[",
            "x = " + "{a = " * 50,
        ]
    ):
        yield Case(f"garbage-toml-{number}", text.encode(), "error")
    yield Case("garbage-json", json.dumps(SEAT).encode(), "error")
    yield Case("garbage-yaml", b"name: fuzzpkg\nsource:\n  path: ../src/demo\n", "error")
    yield Case("garbage-empty", b"", "error", "name")
    yield Case("garbage-blank", b"   \n\n\t\n", "error", "name")
    yield Case("garbage-comments", b"# only a comment\n", "error", "source")
    yield Case("garbage-oversized", valid + b"#" * (1 << 20), "error")
    yield Case("garbage-deep-array", ("x = " + "[" * 10_000 + "]" * 10_000).encode(), "error")
    yield Case(
        "garbage-deep-inline", ("x = " + "{a = " * 10_000 + "1" + "}" * 10_000).encode(), "error"
    )
    yield Case("garbage-a-directory", None, "error")
    yield Case("garbage-only-top", b'name = "x"\n', "error", "source")


def all_cases(tmp: Path) -> list[Case]:
    cases: list[Case] = [Case(f"{n}-valid", document(b), "ok") for n, b in BASES.items()]
    for name, base in BASES.items():
        cases += type_cases(name, base)
        cases += unknown_key_cases(name, base)
        cases += extreme_cases(name, base)
    cases += escape_cases("seat", SEAT, ESCAPES, tmp)
    cases += escape_cases("source", SOURCE, SOURCE_ESCAPES, tmp)
    cases += partition_cases()
    cases += garbage_cases()
    return cases


# --- running them ------------------------------------------------------------------------


def make_project(tmp: Path) -> Path:
    """project/recipes/ (the cases), project/src/demo/pkg (the tree), project/maps/map.json,
    and outside/ beside the project, reachable through project/escape and src/demo/link-out."""
    project = tmp / "project"
    (project / "recipes").mkdir(parents=True)
    (project / "src" / "demo" / "pkg").mkdir(parents=True)
    (project / "maps").mkdir()
    (project / "maps" / "map.json").write_text("{}")
    (tmp / "outside").mkdir()
    (tmp / "outside" / "map.json").write_text("{}")
    (project / "escape").symlink_to(tmp / "outside", target_is_directory=True)
    (project / "src" / "demo" / "link-out").symlink_to(tmp / "outside", target_is_directory=True)
    return project / "recipes"


def check(case: Case, path: Path) -> str | None:
    """What is wrong with loading *path*, or None when the outcome is acceptable."""
    try:
        load_recipe(path)
    except RecipeError as exc:
        if case.outcome == "ok":
            return f"refused a valid recipe: {exc.message[:300]}"
        lines = [line for line in exc.message.splitlines() if line.strip()]
        if not lines or not all(str(path) in line for line in lines):
            return f"a line does not name the file: {exc.message[:300]}"
        if case.key is not None and f"'{case.key}'" not in exc.message:
            return f"does not name the key {case.key!r}: {exc.message[:300]}"
        if "Traceback" in exc.render():
            return "a traceback in the message"
        return None
    except Exception as exc:  # counting these is the point of the test
        return f"TRACEBACK {type(exc).__name__}: {str(exc)[:200]}"
    if case.outcome == "error":
        return "accepted"
    return None


def test_generated_malformed_recipes_give_only_recipe_errors(tmp_path: Path) -> None:
    tmp = tmp_path.resolve()
    recipes = make_project(tmp)
    cases = all_cases(tmp)
    assert len({case.id for case in cases}) == len(cases), "case ids must be unique"
    problems: dict[str, str] = {}
    outcomes = {"error": 0, "ok": 0, "either": 0}
    for number, case in enumerate(cases):
        path = recipes / f"case-{number:04d}.toml"
        if case.content is None:
            path.mkdir()
        else:
            path.write_bytes(case.content)
        problem = check(case, path)
        if problem is not None:
            problems[case.id] = problem
        outcomes[case.outcome] += 1
    malformed = outcomes["error"]
    tracebacks = sum(1 for p in problems.values() if p.startswith("TRACEBACK"))
    summary = (
        f"{len(cases)} recipes ({malformed} malformed), {tracebacks} tracebacks, "
        f"{len(problems)} problems:\n"
    )
    assert malformed >= 300, summary
    assert not problems, summary + "\n".join(f"{k}: {v}" for k, v in sorted(problems.items()))


@pytest.mark.parametrize("path", sorted((ROOT / "recipes").glob("*.toml")), ids=lambda p: p.stem)
def test_bundled_recipes_still_load(path: Path) -> None:
    loaded = load_recipe(path)
    assert loaded.name == path.stem


def test_the_generator_covers_every_key_of_both_partitions(tmp_path: Path) -> None:
    """Every key of both base recipes gets a wrong-type case, every table an unknown key."""
    cases = all_cases(tmp_path)
    ids = {case.id for case in cases}
    for name, base in BASES.items():
        for key, _value in walk(base):
            assert f"{name}-type-{dotted(key)}-0" in ids
        for table in tables(base):
            assert f"{name}-unknown-{dotted(table) or 'top'}-bogus" in ids
    assert {"seat-valid", "source-valid", "both-partitions", "garbage-empty"} <= ids
