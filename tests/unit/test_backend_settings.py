"""What kiln tells each build backend itself: build directory, job count, keep-going."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheelkiln.builder.backend import backend_settings, frontend_arguments
from wheelkiln.errors import RecipeError

BUILD = Path("/w/job/build")


def test_meson_gets_a_stable_build_dir_the_job_count_and_keep_going_in_shards() -> None:
    shard = backend_settings("meson", BUILD, 3, keep_going=True, recipe_settings={}, environ={})
    assert shard.config_settings == (
        ("build-dir", "/w/job/build"), ("compile-args", "-j3"), ("compile-args", "-k0"),
    )
    assert shard.build_dir == BUILD
    whole = backend_settings("meson", BUILD, 2, keep_going=False, recipe_settings={}, environ={})
    assert ("compile-args", "-k0") not in whole.config_settings
    assert frontend_arguments("pip", shard.config_settings) == [
        "--config-settings=build-dir=/w/job/build",
        "--config-settings=compile-args=-j3",
        "--config-settings=compile-args=-k0",
    ]
    assert frontend_arguments("build", shard.config_settings)[0] == "--config-setting=build-dir=/w/job/build"


def test_recipe_settings_come_after_kilns_and_may_not_move_the_build_dir() -> None:
    settings = backend_settings("meson", BUILD, 1, keep_going=False,
                                recipe_settings={"setup-args": "-Dfoo=true"}, environ={})
    assert settings.config_settings[-1] == ("setup-args", "-Dfoo=true")
    for key in ("build-dir", "builddir"):
        with pytest.raises(RecipeError, match=f"build.config_settings.{key}: kiln gives meson-python"):
            backend_settings("meson", BUILD, 1, keep_going=False, recipe_settings={key: "b"}, environ={})


def test_cmake_keeps_going_through_scikit_build_core_with_ninja_only() -> None:
    shard = backend_settings("cmake", BUILD, 2, keep_going=True, recipe_settings={}, environ={})
    assert shard.env["SKBUILD_BUILD_DIR"] == "/w/job/build"
    assert shard.env["SKBUILD_BUILD_TOOL_ARGS"] == "-k0"
    assert shard.env["CMAKE_EXPORT_COMPILE_COMMANDS"] == "ON"
    assert shard.config_settings == ()
    make = backend_settings("cmake", BUILD, 2, keep_going=True, recipe_settings={},
                            environ={"CMAKE_GENERATOR": "Unix Makefiles"})
    assert "SKBUILD_BUILD_TOOL_ARGS" not in make.env, "-k0 is ninja's spelling"
    setuptools = backend_settings("setuptools", BUILD, 2, keep_going=True, recipe_settings={}, environ={})
    assert setuptools.build_dir is None and setuptools.config_settings == ()
