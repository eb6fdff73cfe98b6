"""build.linker: how each build system is told, and the refusal when the linker is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheelkiln.builder.linker import find_linker, linker_environment, linker_versions
from wheelkiln.errors import RecipeError, ToolNotFoundError
from wheelkiln.recipe.load import load_recipe


def test_default_changes_nothing() -> None:
    assert linker_environment("default", "setuptools", {"LDFLAGS": "-L/x"}) == {}
    assert linker_versions("default", "r.toml", {"PATH": ""}) == {}


@pytest.mark.parametrize("kind", ["setuptools", "meson"])
def test_setuptools_and_meson_get_fuse_ld_after_the_callers_ldflags(kind: str) -> None:
    assert linker_environment("mold", kind, {"LDFLAGS": "-L/opt/lib"}) == {
        "LDFLAGS": "-L/opt/lib -fuse-ld=mold"
    }
    assert linker_environment("lld", kind, {}) == {"LDFLAGS": "-fuse-ld=lld"}


def test_cmake_uses_linker_type_from_3_29_and_init_flags_before() -> None:
    environ = {"CMAKE_ARGS": "-DFOO=1"}
    assert linker_environment("lld", "cmake", environ, cmake=(3, 29)) == {
        "CMAKE_ARGS": "-DFOO=1 -DCMAKE_LINKER_TYPE=LLD"
    }
    assert linker_environment("mold", "cmake", environ, cmake=(3, 25)) == {
        "CMAKE_ARGS": "-DFOO=1 -DCMAKE_EXE_LINKER_FLAGS_INIT=-fuse-ld=mold "
        "-DCMAKE_SHARED_LINKER_FLAGS_INIT=-fuse-ld=mold "
        "-DCMAKE_MODULE_LINKER_FLAGS_INIT=-fuse-ld=mold"
    }


def test_an_absent_linker_is_refused_naming_the_recipe_and_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ToolNotFoundError) as refused:
        find_linker("mold", {"PATH": str(tmp_path)}, "recipes/x.toml")
    assert refused.value.message == (
        "recipes/x.toml: build.linker = 'mold', but ld.mold is not on PATH."
    )
    assert refused.value.hint == (
        'Install mold (e.g. `apt-get install mold`), or set build.linker = "default".'
    )
    fake = tmp_path / "ld.lld"
    fake.write_text("#!/bin/sh\necho 'LLD 99.1 (compatible with GNU linkers)'\n")
    fake.chmod(0o755)
    assert linker_versions("lld", "r.toml", {"PATH": str(tmp_path)}) == {
        "linker": "LLD 99.1 (compatible with GNU linkers)"
    }


def test_the_recipe_takes_only_known_linkers(tmp_path: Path) -> None:
    recipe = tmp_path / "x.toml"
    recipe.write_text('name = "x"\n[source]\npath = "."\n[build]\nlinker = "mold"\n')
    assert load_recipe(recipe).recipe.build.linker == "mold"
    recipe.write_text('name = "x"\n[source]\npath = "."\n[build]\nlinker = "gold"\n')
    with pytest.raises(RecipeError) as bad:
        load_recipe(recipe)
    assert "build.linker" in bad.value.message
