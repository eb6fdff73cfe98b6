"""kiln verify when a compressed fatbin entry changes the layout.

Broke: about one build pair in six of the same CUDA sources (test_verify_cuda.py) was
"different". The module id inside the compressed PTX changes the zstd frame's length;
when it crosses an 8-byte padding boundary, ``.nv_fatbin`` grows or shrinks by 8 bytes
and every later section moves, and the comparison refused at the section table.

The objects in fixtures/fatbin-shift are a captured pair that shifts (k.cu, helper.cu
and whole.cu compiled with ``-DDEVICE_FACTOR=3`` in two directories, as
test_verify_cuda.py builds them; ``first`` and ``second``), and ``factor4``: k.cu with
``-DDEVICE_FACTOR=4`` and its device link with ``second/helper.o``. They are linked
here as test_verify_cuda.py links them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from wheelkiln.wheels.compare import compare_wheels
from wheelkiln.wheels.nvcc_names import Section, elf_sections, same_modulo_names

pytestmark = [pytest.mark.compile, pytest.mark.cuda]

FIXTURES = Path(__file__).parent / "fixtures" / "fatbin-shift"
MODULE = "pkg/_m.cpython-311-x86_64-linux-gnu.so"
OBJECTS = ("k.o", "helper.o", "whole.o", "dlink.o")


def _link(directory: Path, objects: dict[str, Path]) -> Path:
    """The shared object linked from *objects* (name -> file), as test_verify_cuda.py's
    ``_build`` links it."""
    directory.mkdir(parents=True)
    for name, source in objects.items():
        shutil.copyfile(source, directory / name)
    subprocess.run(
        [
            "nvcc",
            "-arch=sm_80",
            "-shared",
            *OBJECTS,
            *sorted(set(objects) - set(OBJECTS)),
            "-o",
            "m.so",
        ],
        cwd=directory,
        check=True,
        capture_output=True,
    )
    return directory / "m.so"


def _wheel(shared_object: Path, data: bytes | None = None) -> Path:
    wheel = shared_object.parent / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(MODULE, shared_object.read_bytes() if data is None else data)
        archive.writestr("pkg-1.0.dist-info/RECORD", str(shared_object.parent))
    return wheel


def _sections(data: bytes) -> dict[str, Section]:
    sections = elf_sections(data)
    assert sections is not None
    return {section.name: section for section in sections}


@pytest.fixture(scope="module")
def shifted_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fatbin-shift")
    first = _link(root / "first", {name: FIXTURES / "first" / name for name in OBJECTS})
    second = _link(root / "second", {name: FIXTURES / "second" / name for name in OBJECTS})
    return first, second


def test_the_fixture_shifts_the_layout(shifted_pair: tuple[Path, Path]) -> None:
    first, second = (_sections(path.read_bytes()) for path in shifted_pair)
    assert first[".nv_fatbin"].size != second[".nv_fatbin"].size
    assert first[".nv_fatbin"].address == second[".nv_fatbin"].address
    moved = [name for name in first if first[name].address != second[name].address]
    assert {"__nv_relfatbin", ".eh_frame_hdr", ".eh_frame"} <= set(moved)


def test_a_shifted_fatbin_is_equivalent(shifted_pair: tuple[Path, Path]) -> None:
    first, second = shifted_pair
    result = compare_wheels(_wheel(first), _wheel(second))
    assert result.equivalent, result.as_dict()
    assert result.nvcc_temp_names_only == [MODULE]
    assert result.differing == []


def _patched(data: bytes, section: str, offset: int) -> bytes:
    """*data* with one byte of *section* changed, at *offset* or (for -1) at the first
    byte of an embedded cubin's ELF header that names the machine."""
    place = _sections(data)[section]
    if offset < 0:
        offset = data.index(b"\x7fELF", place.offset + 1) + 18 - place.offset
    buffer = bytearray(data)
    buffer[place.offset + offset] ^= 0x01
    return bytes(buffer)


@pytest.mark.parametrize(
    ("section", "offset"),
    [
        (".rodata", 0),
        (".nv_fatbin", -1),  # the machine of the uncompressed cubin
        (".nvFatBinSegment", 0),  # the wrapper's magic
        (".eh_frame", 13),  # the first CIE's data alignment factor
        (".eh_frame_hdr", 12),  # the first function's address in the search table
        (".gcc_except_table", 0),
        (".rela.dyn", 16),  # the first relocation's addend
    ],
)
def test_a_changed_byte_beside_the_shift_still_differs(
    shifted_pair: tuple[Path, Path], section: str, offset: int
) -> None:
    first, second = shifted_pair
    data = _patched(second.read_bytes(), section, offset)
    assert not same_modulo_names(first.read_bytes(), data)
    result = compare_wheels(_wheel(first), _wheel(second.parent / "patched.so", data))
    assert not result.equivalent
    assert result.differing == [MODULE]


def _flip_at_address(data: bytes, address: int, bits: int) -> bytes:
    """*data* with the byte that *address* (in ``.text``) is loaded from XORed by *bits*."""
    text = _sections(data)[".text"]
    buffer = bytearray(data)
    buffer[text.offset + address - text.address] ^= bits
    return bytes(buffer)


def _disassembly(path: Path) -> list[str]:
    return subprocess.run(
        ["objdump", "-d", "-w", "-j", ".text", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()


def test_a_changed_instruction_beside_the_shift_still_differs(
    shifted_pair: tuple[Path, Path],
) -> None:
    """``host_answer`` returns 43 instead of 42 (``mov $0x2a,%eax`` patched)."""
    first, second = shifted_pair
    (line,) = [line for line in _disassembly(second) if re.search(r"\bmov\s+\$0x2a,%eax", line)]
    address = int(line.split(":")[0], 16)
    assert not same_modulo_names(
        first.read_bytes(), _flip_at_address(second.read_bytes(), address + 1, 0x01)
    )


def test_a_rip_relative_operand_pointing_elsewhere_still_differs(
    shifted_pair: tuple[Path, Path],
) -> None:
    """A ``lea`` of ``__nv_module_id`` (after the shift) moved 16 bytes into that
    section: the displacement differs between the files anyway, the place it names
    must not."""
    first, second = shifted_pair
    pattern = re.compile(r"^\s*([0-9a-f]+):\s+48 8d 05 .*# [0-9a-f]+ <_ZL15__module_id_str>")
    address = next(int(m.group(1), 16) for m in map(pattern.match, _disassembly(second)) if m)
    assert not same_modulo_names(
        first.read_bytes(), _flip_at_address(second.read_bytes(), address + 3, 0x10)
    )


def test_a_changed_device_constant_with_the_shift_still_differs(
    shifted_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """k.o with DEVICE_FACTOR 4 (and its device link) beside second's whole.o, whose
    fatbin has the other size: only the device code differs besides the names."""
    first, _ = shifted_pair
    objects = {name: FIXTURES / "second" / name for name in OBJECTS}
    objects |= {"k.o": FIXTURES / "factor4" / "k.o", "dlink.o": FIXTURES / "factor4" / "dlink.o"}
    changed = _link(tmp_path / "factor4", objects)
    assert (
        _sections(first.read_bytes())[".nv_fatbin"].size
        != _sections(changed.read_bytes())[".nv_fatbin"].size
    )
    result = compare_wheels(_wheel(first), _wheel(changed))
    assert not result.equivalent
    assert result.differing == [MODULE]
    assert result.nvcc_temp_names_only == []


def test_a_grown_section_other_than_a_fatbin_is_not_excused(tmp_path: Path) -> None:
    """The same objects and one more, whose ``.rodata`` is 8 or 16 bytes of zeros: the
    later sections move as they do after a fatbin, but the cause is not one."""
    linked = []
    for size in (8, 16):
        source = tmp_path / f"pad{size}.c"
        source.write_text(f"const char kiln_pad[{size}] = {{0}};\n")
        subprocess.run(
            ["gcc", "-fPIC", "-c", str(source), "-o", str(tmp_path / "pad.o")], check=True
        )
        objects = {name: FIXTURES / "first" / name for name in OBJECTS}
        linked.append(_link(tmp_path / f"pad{size}", objects | {"pad.o": tmp_path / "pad.o"}))
    small, large = (_sections(path.read_bytes()) for path in linked)
    assert small[".nv_fatbin"].size == large[".nv_fatbin"].size
    assert small[".rodata"].size != large[".rodata"].size
    assert small[".eh_frame"].address != large[".eh_frame"].address
    assert not same_modulo_names(linked[0].read_bytes(), linked[1].read_bytes())
    result = compare_wheels(_wheel(linked[0]), _wheel(linked[1]))
    assert result.differing == [MODULE]
