"""kiln lint: the natten-shaped guard bug, its fix, and a source list a shard can empty."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.conftest import EXAMPLES, Kiln
from wheelkiln.plan.cmake import read_project, tokenize
from wheelkiln.plan.lint import first_empty, lint_project
from wheelkiln.shard.partition import shard_of

# natten's shape: the producer is guarded on its sources, the consumer on an arch flag.
BROKEN = """\
cmake_minimum_required(VERSION 3.24)
project(natten LANGUAGES CXX CUDA)
set(NATTEN_WITH_HOPPER_FNA ON)
file(GLOB AUTOGEN_HOPPER_FNA csrc/autogen/hopper/*.cu)
add_library(natten SHARED csrc/natten.cpp)
if(NATTEN_WITH_HOPPER_FNA AND (AUTOGEN_HOPPER_FNA OR AUTOGEN_HOPPER_FMHA))
  add_library(natten_hopper OBJECT ${AUTOGEN_HOPPER_FNA} ${AUTOGEN_HOPPER_FMHA})
  target_compile_options(natten_hopper PRIVATE -O3)
endif()
if(NATTEN_WITH_HOPPER_FNA)   # WRONG: true in every shard
  target_link_libraries(natten PRIVATE $<TARGET_OBJECTS:natten_hopper>)
endif()
"""
FIXED = BROKEN.replace(
    "if(NATTEN_WITH_HOPPER_FNA)   # WRONG: true in every shard", "if(TARGET natten_hopper)"
)
GLOBS = ("csrc/autogen/**/*.cu",)


def package(tmp_path: Path, cmake: str, hopper: int = 3) -> Path:
    (tmp_path / "csrc/autogen/hopper").mkdir(parents=True)
    for index in range(hopper):
        (tmp_path / f"csrc/autogen/hopper/fna_{index}.cu").write_text(f"// {index}\n")
    (tmp_path / "csrc/natten.cpp").write_text("int natten;\n")
    (tmp_path / "CMakeLists.txt").write_text(cmake)
    return tmp_path


def test_a_consumer_guarded_on_an_arch_flag_is_named_with_its_fix(tmp_path: Path) -> None:
    findings = lint_project(read_project(package(tmp_path, BROKEN)), GLOBS, 4)
    assert [f.render() for f in findings] == [
        "CMakeLists.txt:11: target_link_libraries uses target 'natten_hopper' under "
        "if(NATTEN_WITH_HOPPER_FNA), but natten_hopper exists only when the shard has its "
        "sources (add_library at CMakeLists.txt:7, under if(NATTEN_WITH_HOPPER_FNA AND "
        "(AUTOGEN_HOPPER_FNA OR AUTOGEN_HOPPER_FMHA))); a shard with none of them fails to "
        "generate. Fix: guard the use with if(TARGET natten_hopper)."
    ]
    assert (findings[0].file, findings[0].line, findings[0].target) == (
        "CMakeLists.txt",
        11,
        "natten_hopper",
    )


def test_the_if_target_form_and_uses_inside_the_producers_block_pass(tmp_path: Path) -> None:
    assert lint_project(read_project(package(tmp_path, FIXED)), GLOBS, 4) == []


def test_an_unguarded_use_and_a_negated_target_test_are_flagged(tmp_path: Path) -> None:
    cmake = FIXED + textwrap.dedent("""\
        add_dependencies(natten natten_hopper)
        if(NOT TARGET natten_hopper)
          install(TARGETS natten_hopper)
        else()
          install(TARGETS natten_hopper)
        endif()
        """)
    findings = lint_project(read_project(package(tmp_path, cmake)), GLOBS, 4)
    assert [(f.line, f.message.split(" but ")[0]) for f in findings] == [
        (13, "add_dependencies uses target 'natten_hopper' unguarded,"),
        (15, "install uses target 'natten_hopper' under if(NOT TARGET natten_hopper),"),
    ]  # the else() branch of if(NOT TARGET ...) at line 17 holds only when it exists


def test_a_target_whose_every_source_the_partition_deletes(tmp_path: Path) -> None:
    cmake = BROKEN.replace(
        "add_library(natten SHARED csrc/natten.cpp)",
        "add_library(natten SHARED csrc/natten.cpp)\n"
        "file(GLOB AUTOGEN_ALL csrc/autogen/hopper/*.cu)\n"
        "add_library(natten_autogen OBJECT ${AUTOGEN_ALL})",
    )
    findings = lint_project(read_project(package(tmp_path, cmake)), GLOBS, 4)
    empty = [f for f in findings if f.rule == "empty-sources"]
    keys = [f"csrc/autogen/hopper/fna_{index}.cu" for index in range(3)]
    held = {shard_of(key, 4) for key in keys}
    none = min(set(range(4)) - held)  # 3 files cannot fill 4 shards
    assert [f.render() for f in empty] == [
        "CMakeLists.txt:7: add_library(natten_autogen) takes all 3 of its sources from files "
        "the source partition deletes out of slice (sharding.source_globs); at --count 4, "
        f"shard {none + 1}/4 holds none of them, and configure fails with "
        '"No SOURCES given to target: natten_autogen". Fix: make it only when its sources '
        "are there (if(AUTOGEN_ALL) around add_library) and guard every use with "
        "if(TARGET natten_autogen)."
    ]
    # natten itself keeps csrc/natten.cpp in every shard, as the reference's ALL_SOURCES.
    assert {f.target for f in findings} == {"natten_hopper", "natten_autogen"}
    assert first_empty(keys, 2) is not None and first_empty(keys, 2)[0] <= 4  # type: ignore[index]


def test_demo_kernels_loops_over_families_and_passes() -> None:
    project = read_project(EXAMPLES / "demo-kernels")
    made = [s.arguments[0] for s in project.steps if s.command.name == "add_library"]
    assert made == ["dk_sm80", "dk_sm89", "dk_sm90"]
    assert lint_project(project, ("csrc/generated/**/*.cu",), 4) == []


def test_comments_brackets_and_continued_lines_keep_line_numbers() -> None:
    commands = tokenize(
        '#[[ two\nlines ]]\nset(A "x\n y" [=[z]=]) # c\n\nif(A AND\n  (B OR C))\n',
        Path("CMakeLists.txt"),
    )
    assert [(c.name, c.line, [a.text for a in c.arguments]) for c in commands] == [
        ("set", 3, ["A", "x\n y", "z"]),
        ("if", 6, ["A", "AND", "(", "B", "OR", "C", ")"]),
    ]


def test_kiln_lint_exits_5_and_names_the_finding(tmp_path: Path, kiln: Kiln) -> None:
    tree = package(tmp_path / "natten", BROKEN)
    (tree / "pyproject.toml").write_text("[project]\nname = 'natten'\nversion = '0'\n")
    recipe = tmp_path / "natten.toml"
    recipe.write_text(
        'name = "natten"\n[source]\npath = "natten"\n'
        '[sharding]\ncount = 4\npartition = "source"\nsource_globs = ["csrc/autogen/**/*.cu"]\n'
    )
    result = kiln("lint", recipe, check=False)
    assert result.returncode == 5, result.stderr
    assert "CMakeLists.txt:11: target_link_libraries uses target 'natten_hopper'" in " ".join(
        result.stderr.split()
    )
    assert "1 finding(s) in 1 CMake file(s) of natten" in " ".join(result.stderr.split())
