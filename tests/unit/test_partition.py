"""The partition function: one owner per TU, stable keys, map overrides."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path, PurePosixPath

import pytest

from wheelkiln.cells import shard_label
from wheelkiln.shard.partition import (
    PartitionMapFile,
    is_mine,
    load_partition_map,
    shard_of,
    tu_key,
)

REAL_LOOKING = [
    "csrc/flash_attn/src/flash_fwd_hdim128_fp16_sm80.cu",
    "csrc/flash_attn/src/flash_bwd_hdim256_bf16_causal_sm80.cu",
    "csrc/flash_attn/flash_api.cpp",
    "src/natten/cuda/fna/kernels/fna2d_64x64_sm80_float16.cu",
    "spconv/csrc/sparse/all/ops_cpu1d/kernel.cc",
    "cuda/bindings/_bindings/cydriver.cpp",
    "../build/generated/autogen_kernels_17.cu",
    "lib/Cryptodome/SelfTest/test1.c",
    "vllm/csrc/attention/paged_attention_v1.cu",
    "csrc/moe/marlin_moe_wna16/kernel_bf16_ku4b8.cu",
]
SYNTHETIC = [f"csrc/gen/dir{n % 17}/kernel_{n:04d}.cu" for n in range(500)]
ALL_KEYS = REAL_LOOKING + SYNTHETIC


@pytest.mark.parametrize("count", range(1, 65))
def test_every_key_lands_in_exactly_one_shard(count: int) -> None:
    for key in ALL_KEYS:
        owners = [index for index in range(count) if is_mine(key, index, count)]
        assert owners == [shard_of(key, count)], key


def test_shard_is_md5_prefix_mod_count() -> None:
    # an independent computation of the reference farm's rule
    for key in REAL_LOOKING:
        expected = int(hashlib.md5(key.encode()).hexdigest()[:8], 16)
        for count in (1, 2, 3, 4, 7, 16, 64):
            assert shard_of(key, count) == expected % count


def test_slices_are_balanced_for_many_keys() -> None:
    keys = [f"src/k{n}.cu" for n in range(4000)]
    sizes = [sum(shard_of(key, 4) == index for key in keys) for index in range(4)]
    assert sum(sizes) == 4000
    assert all(800 < size < 1200 for size in sizes), sizes


def test_relative_keys_agree_across_absolute_roots(tmp_path: Path) -> None:
    first = tu_key("/work/shard-0/src/csrc/a.cu", "/work/shard-0/src")
    second = tu_key("/home/runner/x/y/src/csrc/a.cu", "/home/runner/x/y/src")
    assert first == second == "csrc/a.cu"
    # relative source resolved against the call's cwd, as the compiler does
    from_build_dir = tu_key("../csrc/a.cu", "/r/tree", cwd="/r/tree/build")
    from_root = tu_key("csrc/a.cu", "/r/tree", cwd="/r/tree")
    assert from_build_dir == from_root == "csrc/a.cu"
    # path-like arguments
    assert tu_key(tmp_path / "pkg" / "x.cpp", tmp_path / "pkg") == "x.cpp"
    assert tu_key(PurePosixPath("/a/b/./c/../d.c"), "/a") == "b/d.c"


def test_symlinked_root_or_resolved_cwd_give_the_same_key(tmp_path: Path) -> None:
    real = tmp_path / "private" / "shard-0" / "tree"
    (real / "csrc").mkdir(parents=True)
    (real / "csrc" / "a.cu").write_text("")
    link = tmp_path / "tmp-link"
    link.symlink_to(tmp_path / "private")
    root_as_given = link / "shard-0" / "tree"
    # the build resolved its cwd (getcwd() does), the root was given through the link
    assert tu_key("csrc/a.cu", root_as_given, cwd=real) == "csrc/a.cu"
    assert tu_key(real / "csrc" / "a.cu", root_as_given) == "csrc/a.cu"
    # a sibling build dir leaves the root, without naming the shard's private path
    assert tu_key(real.parent / "build" / "g.cu", root_as_given, cwd=real) == "../build/g.cu"


def test_generated_sources_in_a_sibling_build_dir_get_a_dotdot_key() -> None:
    key = tu_key("/w/build/generated/k.cu", "/w/tree")
    assert key == "../build/generated/k.cu"
    assert key == tu_key("/other/build/generated/k.cu", "/other/tree")


def test_windows_separators_are_normalised() -> None:
    windows = tu_key("C:\\w\\tree\\csrc\\a.cu", "C:\\w\\tree")
    relative = tu_key("csrc\\a.cu", "C:\\w\\tree", cwd="C:\\w\\tree")
    assert windows == relative == "csrc/a.cu"
    assert shard_of(windows, 5) == shard_of(tu_key("/w/tree/csrc/a.cu", "/w/tree"), 5)


def test_partition_map_overrides_the_hash() -> None:
    key = "csrc/flash_attn/flash_api.cpp"
    hashed = shard_of(key, 4)
    forced = (hashed + 1) % 4
    mapping = {key: forced}
    assert shard_of(key, 4, mapping) == forced
    assert [i for i in range(4) if is_mine(key, i, 4, mapping)] == [forced]
    # keys the map does not name still hash
    assert shard_of("other.cu", 4, mapping) == shard_of("other.cu", 4)


def test_partition_map_for_another_count_is_refused() -> None:
    with pytest.raises(ValueError, match="another shard count"):
        shard_of("a.cu", 2, {"a.cu": 5})


def test_bad_counts_and_indexes_are_refused() -> None:
    with pytest.raises(ValueError):
        shard_of("a.cu", 0)
    with pytest.raises(ValueError):
        is_mine("a.cu", 4, 4)
    with pytest.raises(ValueError):
        is_mine("a.cu", -1, 4)


def test_shard_label_is_one_based() -> None:
    assert shard_label(1, 4) == "shard 2/4"
    assert shard_label(0, 1) == "shard 1/1"


def test_load_partition_map(tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"csrc/a.cu": 1, "csrc\\b.cu": 0}))
    assert load_partition_map(path) == {"csrc/a.cu": 1, "csrc/b.cu": 0}
    path.write_text(json.dumps({"a.cu": "1"}))
    with pytest.raises(ValueError, match="non-negative integer"):
        load_partition_map(path)
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="JSON object"):
        load_partition_map(path)


@pytest.mark.parametrize(
    "content",
    [
        {"csrc/a.cu": 1, "csrc/b.cu": 2, "csrc/a.cu.extra": 0},
        {"csrc/ü.cu": 1, "csrc/a.cu": 3},  # non-ASCII: json escapes it
        {"csrc\\a.cu": 2, "csrc/b.cu": 0},  # backslash: full parser
    ],
)
def test_partition_map_file_agrees_with_the_json_parser(
    tmp_path: Path, content: dict[str, int]
) -> None:
    path = tmp_path / "map.json"
    path.write_text(json.dumps(content, indent=1))
    parsed = load_partition_map(path)
    lazy = PartitionMapFile(path)
    for key in [*parsed, "csrc/missing.cu", "csrc/a", "a.cu"]:
        assert lazy.get(key) == parsed.get(key), key


def test_partition_map_file_takes_the_last_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    path.write_text('{"a.cu": 1, "b.cu": 0, "a.cu" : 3}')
    assert PartitionMapFile(path).get("a.cu") == 3 == load_partition_map(path)["a.cu"]
    assert shard_of("a.cu", 4, PartitionMapFile(path)) == 3


def test_generated_sources_are_keyed_relative_to_the_build_dir() -> None:
    """meson-python's default build dir is <tree>/.mesonpy-<random>: keyed against the
    tree, a generated TU got a different key in every shard."""
    keys = {
        tu_key("_cy.cpython-311-x86_64-linux-gnu.so.p/src/demo_meson/_cy.pyx.c",
               f"/work/shard-{index}/src", f"/work/shard-{index}/src/.mesonpy-{random}",
               f"/work/shard-{index}/src/.mesonpy-{random}")
        for index, random in ((0, "n5_7jr60"), (1, "x2kq0b1d"), (2, "a9zz1c3e"))
    }
    assert keys == {"<build>/_cy.cpython-311-x86_64-linux-gnu.so.p/src/demo_meson/_cy.pyx.c"}
    # a source of the tree itself, compiled from the build dir, keeps its tree key
    assert tu_key("../csrc/kernel.c", "/w/src", "/w/src/.mesonpy-1", "/w/src/.mesonpy-1") == "csrc/kernel.c"
    # a build dir outside the tree (kiln's stable one)
    assert tu_key("table.c", "/w/job/src", "/w/job/build", "/w/job/build") == "<build>/table.c"
    assert tu_key("/w/job/build/x/y.c", "/w/job/src", "/elsewhere", "/w/job/build/") == "<build>/x/y.c"
    assert tu_key("/w/job/buildings/y.c", "/w/job/src", "/", "/w/job/build") == "../buildings/y.c"
    assert tu_key("table.c", "C:\\w\\src", "C:\\w\\build", "C:\\w\\build") == "<build>/table.c"
