"""The compile ledger, from wrapper records shaped like a real CMake CUDA shard's
(demo-rdc, shard 1/3: CMake's device link and host link both ran through the wrapper)."""

from __future__ import annotations

from wheelkiln.shard.ledger import compile_ledger
from wheelkiln.shard.wrapper_log import WrapperRecord

BUILD = "/work/demo-rdc-shard-{index}-of-3/build"
MODULE = "demo_rdc/_core.cpython-311-x86_64-linux-gnu.so"
TUS = ["csrc/module.cpp", "csrc/device_math.cu", "csrc/stages/alpha.cu", "csrc/stages/beta.cu"]


def _object(tu: str) -> str:
    return f"CMakeFiles/_core.dir/{tu}.o"


def shard_log(index: int, compiled: set[str], *, module_file: str = MODULE) -> list[WrapperRecord]:
    build = BUILD.format(index=index)
    records: list[WrapperRecord] = []
    for tu in TUS:
        records.append(
            {
                "tu": tu,
                "action": "compile" if tu in compiled else "stub",
                "seconds": 1.0,
                "exit": 0,
                "output": f"{build}/{_object(tu)}",
                "argv": [
                    "/usr/local/cuda/bin/nvcc",
                    "-x",
                    "cu",
                    "-rdc=true",
                    "-c",
                    f"../src/{tu}",
                    "-o",
                    _object(tu),
                ],
                "cwd": build,
                "pid": 1,
            }
        )
    objects = [_object(tu) for tu in TUS]
    device_link = "CMakeFiles/_core.dir/cmake_device_link.o"
    records.append(
        {
            "tu": None,
            "action": "link-unresolved",
            "seconds": 0.4,
            "exit": 255,
            "output": f"{build}/{device_link}",
            "argv": [
                "/usr/local/cuda/bin/nvcc",
                "-shared",
                "-dlink",
                *objects,
                "-o",
                device_link,
                "-lcudadevrt",
            ],
            "cwd": build,
            "pid": 2,
        }
    )
    so_name = module_file.rsplit("/", 1)[-1]
    records.append(
        {
            "tu": None,
            "action": "link-unresolved",
            "seconds": 0.7,
            "exit": 1,
            "output": f"{build}/{so_name}",
            "argv": [
                "/usr/bin/g++",
                "-fPIC",
                "-shared",
                "-o",
                so_name,
                *objects[:1],
                device_link,
                *objects[1:],
            ],
            "cwd": build,
            "pid": 3,
        }
    )
    return records


def test_every_tu_compiled_by_its_shard_passes_and_counts_device_links() -> None:
    logs = {
        0: shard_log(0, {"csrc/module.cpp", "csrc/stages/beta.cu"}),
        1: shard_log(1, {"csrc/device_math.cu"}),
        2: shard_log(2, {"csrc/stages/alpha.cu"}),
    }
    ledger = compile_ledger([MODULE], logs)
    assert ledger.problems == ()
    (module,) = ledger.modules
    assert module.tus == tuple(sorted(TUS))
    assert module.compiled_by == {
        "csrc/device_math.cu": (1,),
        "csrc/module.cpp": (0,),
        "csrc/stages/alpha.cu": (2,),
        "csrc/stages/beta.cu": (0,),
    }
    assert (module.device_links, module.device_links_tolerated) == (3, 3)


def test_a_module_every_shard_stubbed_fails_by_name() -> None:
    """An off-by-one shard index: the shard that owned the module stubbed it too."""
    logs = {index: shard_log(index, set()) for index in range(3)}
    ledger = compile_ledger([MODULE], logs)
    assert ledger.problems == (
        f"{MODULE}: no shard compiled any of its 4 TU(s) (csrc/device_math.cu, csrc/module.cpp, "
        "csrc/stages/alpha.cu, ...); every shard stubbed the whole module (a shard index or "
        "partition map that sends its TUs to no shard?)",
    )
    assert ledger.modules[0].stubbed_everywhere == tuple(sorted(TUS))


def test_a_failed_compile_is_no_compile_record() -> None:
    logs = {0: shard_log(0, set(TUS))}
    for record in logs[0]:
        if record["action"] == "compile":
            record["exit"] = 1
    assert compile_ledger([MODULE], logs).problems != ()


def test_a_module_no_shard_linked_is_unmapped_not_failed() -> None:
    logs = {0: shard_log(0, set(), module_file="pkg/_other.so")}
    ledger = compile_ledger([MODULE], logs)
    assert ledger.unmapped == (MODULE,)
    assert ledger.problems == ()


def test_summary_line_names_the_module_no_shard_compiled() -> None:
    from wheelkiln.shard.ledger import describe_ledger

    stubbed = compile_ledger([MODULE], {index: shard_log(index, set()) for index in range(3)})
    assert describe_ledger(stubbed.as_dict()) == (
        f"1 of 1 module(s) compiled by no shard: {MODULE}; 3 device link(s), 3 tolerated"
    )
    fine = compile_ledger([MODULE, "pkg/_other.so"], {0: shard_log(0, set(TUS))})
    assert describe_ledger(fine.as_dict()) == (
        "1 module(s) with shard compile records; 1 not in any shard's links; "
        "1 device link(s), 1 tolerated"
    )
    assert describe_ledger(None) == "not kept"


def test_sharded_summary_has_the_ledger_line_when_the_link_kept_one() -> None:
    from wheelkiln.executors.sharded import summary_lines

    ledger = compile_ledger([MODULE], {index: shard_log(index, set()) for index in range(3)})
    report = {
        "count": 3, "wall_seconds": 9.0, "slowest_shard_plus_link_seconds": 7.0,
        "measured": {"shards": 3, "parallel": 2, "jobs": [1, 1, 1], "cpus": 2},
        "unsharded_cold_seconds": None,
        "link": {"cache": {"hits": 0, "misses": 4, "total": 4}, "link": {"ledger": ledger.as_dict()}},
        "gate": {"passed": False, "problems": list(ledger.problems)},
    }  # fmt: skip
    assert f"ledger: 1 of 1 module(s) compiled by no shard: {MODULE}; 3 device link(s), 3 tolerated" in (
        summary_lines(report)
    )
