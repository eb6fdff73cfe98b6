"""The source partition: out-of-slice files deleted, the union over shards complete."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wheelkiln.builder.source import copy_tree
from wheelkiln.errors import SourceError
from wheelkiln.shard.partition import shard_of
from wheelkiln.shard.source_filter import (
    _unlink_inside,
    apply_source_partition,
)

KERNELS = [f"csrc/kernels/gen/k{n:02d}_sm80.cu" for n in range(30)]
OTHER = ["csrc/api.cpp", "csrc/kernels/common.cuh", "setup.py", "README.md"]


def make_tree(root: Path) -> Path:
    for name in [*KERNELS, *OTHER]:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"// {name}\n")
    return root


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_union_over_shards_is_every_matched_file_once(tmp_path: Path, count: int) -> None:
    template = make_tree(tmp_path / "template")
    kept_by: dict[str, list[int]] = {}
    for index in range(count):
        tree = tmp_path / f"shard{index}"
        shutil.copytree(template, tree)
        result = apply_source_partition(tree, ["csrc/**/*.cu"], index, count)
        assert sorted(result.kept + result.deleted) == sorted(KERNELS)
        assert result.kept == sorted(result.kept)
        for key in result.kept:
            assert (tree / key).is_file()
            assert shard_of(key, count) == index
            kept_by.setdefault(key, []).append(index)
        for key in result.deleted:
            assert not (tree / key).exists()
        for name in OTHER:  # files no glob matches are never touched
            assert (tree / name).is_file()
    assert sorted(kept_by) == sorted(KERNELS)
    assert all(len(shards) == 1 for shards in kept_by.values())


def test_several_globs_and_a_partition_map(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    forced = {KERNELS[0]: 1, "csrc/api.cpp": 1}
    result = apply_source_partition(tree, ["csrc/kernels/gen/*.cu", "csrc/*.cpp"], 1, 2, forced)
    assert KERNELS[0] in result.kept
    assert "csrc/api.cpp" in result.kept
    assert len(result.kept) + len(result.deleted) == len(KERNELS) + 1


def test_symlinks_are_removed_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.cu"
    outside.write_text("keep me")
    tree = tmp_path / "tree"
    (tree / "csrc").mkdir(parents=True)
    links = [tree / "csrc" / f"l{n}.cu" for n in range(12)]
    for link in links:
        link.symlink_to(outside)
    result = apply_source_partition(tree, ["csrc/*.cu"], 0, 2)
    assert result.deleted  # some were out of slice
    assert outside.read_text() == "keep me"


OUTSIDE = [f"k{n}.cpp" for n in range(8)]


def tree_with_a_link_out(tmp_path: Path) -> tuple[Path, Path]:
    """A pristine tree whose ``dir/ext`` is a symlink to a directory of 8 outside .cpp
    files, beside a real ``dir/own`` with 8 of its own; and that outside directory."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in OUTSIDE:
        (outside / name).write_text(f"// outside {name}\n")
    pristine = tmp_path / "pristine"
    (pristine / "dir" / "own").mkdir(parents=True)
    for name in OUTSIDE:
        (pristine / "dir" / "own" / name).write_text(f"// own {name}\n")
    (pristine / "dir" / "ext").symlink_to(outside, target_is_directory=True)
    (pristine / "ext-top").symlink_to(outside, target_is_directory=True)
    return pristine, outside


@pytest.mark.parametrize("glob", ["dir/*/*.cpp", "dir/**/*.cpp", "**/*.cpp", "*/*/*", "**/k?.cpp"])
def test_a_directory_symlink_is_never_followed(tmp_path: Path, glob: str) -> None:
    """The shard's tree is copied with its symlinks kept (as the build copies it); no
    shard of the source partition deletes anything behind a symlinked directory."""
    pristine, outside = tree_with_a_link_out(tmp_path)
    count = 4
    kept_by: dict[str, int] = {}
    for index in range(count):
        tree = tmp_path / f"shard{index}"
        copy_tree(pristine, tree)
        assert (tree / "dir" / "ext").is_symlink()  # the copy kept the link
        result = apply_source_partition(tree, [glob], index, count)
        assert sorted(result.kept + result.deleted) == [f"dir/own/{n}" for n in OUTSIDE]
        kept_by.update(dict.fromkeys(result.kept, index))
        assert sorted(p.name for p in outside.iterdir()) == OUTSIDE
        assert all((outside / n).read_text() == f"// outside {n}\n" for n in OUTSIDE)
        assert (tree / "dir" / "ext").is_symlink() and (tree / "ext-top").is_symlink()
    assert sorted(kept_by) == [f"dir/own/{n}" for n in OUTSIDE]


def test_a_file_whose_directory_resolves_outside_is_not_deleted(tmp_path: Path) -> None:
    """The last check before each unlink: the entry's directory must resolve under the
    tree, whatever path led to it."""
    pristine, outside = tree_with_a_link_out(tmp_path)
    with pytest.raises(SourceError, match="outside the tree"):
        _unlink_inside(pristine.resolve(), "dir/ext/k0.cpp")
    assert (outside / "k0.cpp").is_file()
    with pytest.raises(SourceError, match="it is a directory"):
        _unlink_inside(pristine.resolve(), "dir/own")
    _unlink_inside(pristine.resolve(), "dir/ext")  # the link itself lies in the tree
    assert not (pristine / "dir" / "ext").exists() and (outside / "k0.cpp").is_file()


@pytest.mark.parametrize("glob", ["/abs/*.cu", "../*.cu", "csrc/../../x.cu", ""])
def test_globs_must_stay_inside_the_tree(tmp_path: Path, glob: str) -> None:
    make_tree(tmp_path)
    with pytest.raises(SourceError, match="relative to the package tree"):
        apply_source_partition(tmp_path, [glob], 0, 2)


def test_bad_index_or_tree(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="outside"):
        apply_source_partition(tmp_path, ["*.cu"], 2, 2)
    with pytest.raises(ValueError, match="not a directory"):
        apply_source_partition(tmp_path / "missing", ["*.cu"], 0, 2)
