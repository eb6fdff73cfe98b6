"""nvcc's per-build names in compiled objects, and how to blank them for a comparison.

Two builds of the same CUDA source differ in names that nvcc makes up per compile,
never in code. Found by compiling one ``.cu`` in two directories with nvcc 13.0 and
reading ``nm`` and the raw bytes:

* **temp names**: ``tmpxft_00001ea4_00000000-6_k.cudafe1.cpp``, with nvcc's pid.
* **module ids**: ``<hash>_<n>_<file>_<suffix>``, e.g. ``4ff78616_4_k_cu_ed63f977``,
  where ``<hash>`` is a hash of the source's absolute path, ``<n>`` the length of the
  mangled file name ``<file>`` (``k_cu``), and ``<suffix>`` 8 hex digits (``-rdc``
  builds, optionally followed by ``_<pid>``) or the first device symbol's name. They
  sit in exported symbols (``__cudaRegisterLinkedBinary_<id>``, ``__fatbinwrap_<id>``)
  and inside the fatbin and ``.rodata`` (``_GLOBAL__N__<id>``, ``__nv_static_25__<id>``,
  ``_INTERNAL_<id>``).
* **compressed fatbin entries**: nvcc compresses PTX in the fatbin (zstd, flag 0x8000
  in the entry header), so a module id inside it changes the compressed bytes and
  their length. The entry is padded, so the layout around it stays put.
* **the ELF build id** (``.note.gnu.build-id``): ld hashes the whole output, so it
  differs whenever anything above does.

Every blank has the length of what it replaces, so offsets, sizes and layout still
compare: a changed constant, instruction or symbol remains a difference.
"""

from __future__ import annotations

import re
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from wheelkiln import run

TEMP_NAME = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}(-\d+)?")
PATH_HASH_PREFIXED = re.compile(rb"(_INTERNAL_|_GLOBAL__N__)[0-9a-f]{8}_")
"""Internal-linkage names with the path hash, whatever follows it."""
MODULE_ID = re.compile(rb"(?<=_)[0-9a-f]{8}_(\d{1,3})_")
"""The start of a module id; :func:`_module_id_end` checks the rest (the length field)."""
_ID_SUFFIX = re.compile(rb"[0-9a-f]{8}(?:_\d{1,7}(?![0-9A-Za-z]))?")
_NAME_CHAR = re.compile(rb"[A-Za-z0-9_]")

FATBIN_MAGIC = struct.pack("<IHH", 0xBA55ED50, 1, 16)
"""A fatbin header: magic, version 1, header size 16 (then the entries' total size)."""
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FLAG_ZSTD = 0x8000
BUILD_ID_NOTE = ".note.gnu.build-id"


@dataclass(frozen=True)
class Normalized:
    """A file's bytes with the per-build names blanked and its compressed fatbin entries
    zeroed; the compressed entries themselves are kept beside, in file order."""

    data: bytes
    frames: tuple[bytes, ...] = ()

    def same_as(self, other: Normalized) -> bool:
        """Equal once blanked. Compressed entries that differ are compared decompressed
        (with the ``zstd`` tool) and blanked; identical ones need no decompression."""
        return self.data == other.data and _same_frames(self.frames, other.frames)


def _same_frames(frames_a: tuple[bytes, ...], frames_b: tuple[bytes, ...]) -> bool:
    if len(frames_a) != len(frames_b):
        return False
    if frames_a == frames_b:
        return True
    return [blank_names(p) for p in _decompress(list(frames_a))] == [
        blank_names(p) for p in _decompress(list(frames_b))
    ]


def _module_id_end(data: bytes, match: re.Match[bytes]) -> int | None:
    """Where the module id starting at *match* ends, or None when it is not one."""
    name_start = match.end()
    name_end = name_start + int(match.group(1))
    if name_end >= len(data) or data[name_end : name_end + 1] != b"_":
        return None
    if not all(_NAME_CHAR.fullmatch(data[i : i + 1]) for i in range(name_start, name_end)):
        return None
    suffix = _ID_SUFFIX.match(data, name_end + 1)
    return suffix.end() if suffix else name_end


def _blank_digits(text: bytes) -> bytes:
    return re.sub(rb"[0-9a-f]", b"0", text)


def blank_names(data: bytes) -> bytes:
    """*data* with temp names and module ids blanked (same length)."""
    data = TEMP_NAME.sub(lambda m: b"tmpxft_" + b"0" * (len(m.group(0)) - 7), data)
    data = PATH_HASH_PREFIXED.sub(lambda m: m.group(1) + b"00000000_", data)
    pieces: list[bytes] = []
    position = 0
    for match in MODULE_ID.finditer(data):
        if match.start() < position:
            continue  # inside an id already blanked
        end = _module_id_end(data, match)
        if end is None:
            continue
        length = int(match.group(1))
        name_end = match.end() + length
        pieces += [data[position : match.start()], b"00000000", data[match.start() + 8 : name_end]]
        pieces.append(_blank_digits(data[name_end:end]))
        position = end
    pieces.append(data[position:])
    return b"".join(pieces)


def blank_symbol(name: str) -> str:
    """An exported symbol's name with the per-build parts blanked."""
    return blank_names(name.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")


def _blank_build_id(data: bytearray) -> None:
    for section in elf_sections(bytes(data)) or ():
        if section.name == BUILD_ID_NOTE:
            data[section.offset : section.offset + section.size] = bytes(section.size)


def _compressed_entries(data: bytes) -> list[tuple[int, int, int]]:
    """(field offset, payload offset, compressed size) of every zstd-compressed entry
    of every fatbin in *data*."""
    entries: list[tuple[int, int, int]] = []
    start = data.find(FATBIN_MAGIC)
    while start >= 0:
        try:
            (total,) = struct.unpack_from("<Q", data, start + 8)
            position, end = start + 16, min(start + 16 + total, len(data))
            while position + 64 <= end:
                header_size, payload_size, compressed = struct.unpack_from(
                    "<IQI", data, position + 4
                )
                (flags,) = struct.unpack_from("<Q", data, position + 40)
                payload = position + header_size
                if header_size < 64 or payload + payload_size > end:
                    break  # not a fatbin entry after all
                if flags & _FLAG_ZSTD and data[payload : payload + 4] == _ZSTD_MAGIC:
                    entries.append((position + 16, payload, min(compressed, payload_size)))
                position = payload + payload_size
        except struct.error:
            pass
        start = data.find(FATBIN_MAGIC, start + 16)
    return entries


def _decompress(frames: list[bytes]) -> list[bytes]:
    """zstd frames decompressed by the ``zstd`` tool (Python 3.11 has no zstd module)."""
    if not frames:
        return []
    with tempfile.TemporaryDirectory(prefix="kiln-fatbin-") as tmp:
        paths = [Path(tmp) / f"{index}.zst" for index in range(len(frames))]
        for path, frame in zip(paths, frames, strict=True):
            path.write_bytes(frame)
        run.run(
            ["zstd", "-d", "-q", "-f", *map(str, paths)],
            what="Decompressing nvcc's compressed fatbin entries",
        )
        return [path.with_suffix("").read_bytes() for path in paths]


def normalize(data: bytes) -> Normalized:
    """*data* with nvcc's per-build names and the build id blanked, compressed fatbin
    entries zeroed in place (and kept beside, see :meth:`Normalized.same_as`)."""
    entries = _compressed_entries(data)
    frames = [data[payload : payload + size] for _, payload, size in entries]
    buffer = bytearray(data)
    for field_offset, payload, size in entries:
        buffer[field_offset : field_offset + 4] = bytes(4)  # the compressed size
        buffer[payload : payload + size] = bytes(size)
    _blank_build_id(buffer)
    return Normalized(blank_names(bytes(buffer)), tuple(frames))


# --------------------------------------------------------------------------- linked objects

_SYMBOL_LAYOUT_SECTIONS = frozenset(
    {
        ".dynsym",
        ".dynstr",
        ".symtab",
        ".strtab",
        ".gnu.hash",
        ".hash",
        ".gnu.version",
        ".rela.dyn",
        ".rela.plt",
        ".got",
        ".got.plt",
        BUILD_ID_NOTE,
    }
)
"""Sections whose bytes follow the order of symbol names: ld hashes the names to lay out
the dynamic symbol table (``.gnu.hash``), and the PLT, GOT, relocations and version table
follow that order. They are compared as listings (:func:`_listing`), not as bytes."""
_STUB_SECTIONS = frozenset({".plt", ".plt.got", ".plt.sec"})
"""Linker-made call stubs, one per imported symbol, in symbol order."""
_CODE_FLAGS = 0x4  # SHF_EXECINSTR
_PLT_TARGET = re.compile(r"\b[0-9a-f]+ <([^>\s]+@plt)>")
_COMMENT = re.compile(r"\s*#.*$")
_RIP_TARGET = re.compile(r"([-+]?0x[0-9a-f]+)\(%rip\).*#\s*([0-9a-f]+)\b")
_ADDRESS = re.compile(r"^\s*[0-9a-f]+:\s*")
_NUMBER = re.compile(r"\b(?:0x)?[0-9a-f]+\b")


@dataclass(frozen=True)
class Section:
    name: str
    kind: int
    flags: int
    address: int
    offset: int
    size: int


def elf_sections(data: bytes) -> list[Section] | None:
    """The sections of a 64-bit little-endian ELF file, or None for anything else."""
    if data[:6] != b"\x7fELF\x02\x01" or len(data) < 64:
        return None
    try:
        (section_offset,) = struct.unpack_from("<Q", data, 0x28)
        entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
        headers = [
            struct.unpack_from("<IIQQQQ", data, section_offset + i * entry_size)
            for i in range(count)
        ]
        names_offset = headers[names_index][4]
        sections = []
        for name, kind, flags, address, offset, size in headers:
            start = names_offset + name
            text = data[start : data.index(b"\0", start)].decode("utf-8", "replace")
            sections.append(Section(text, kind, flags, address, offset, size))
    except (struct.error, IndexError, ValueError):
        return None  # not an ELF file we can read: compared as plain bytes
    return sections


def _tool_lines(argv: list[str]) -> list[str]:
    return run.run(argv, what=f"Reading {argv[-1]} with {argv[0]}").output.splitlines()


def _code_listing(path: Path, section: Section, slots: dict[int, str]) -> list[str]:
    """Disassembly of one code section, with what follows symbol order named instead:
    PLT call targets by the function they call, GOT loads by the symbol in the slot."""
    lines = _tool_lines(
        ["objdump", "-d", "-w", "--no-show-raw-insn", "-j", section.name, str(path)]
    )
    listing = []
    for line in lines[3:]:  # after the "file format" header
        target = _RIP_TARGET.search(line)
        if target and int(target.group(2), 16) in slots:
            slot = slots[int(target.group(2), 16)]
            line = line[: target.start(1)] + f"<slot {slot}>" + line[target.end(1) :]
        line = _COMMENT.sub("", line)
        line = _PLT_TARGET.sub(lambda m: "<" + m.group(1) + ">", line)
        listing.append(blank_symbol(line))
    if section.name in _STUB_SECTIONS:
        # Stubs differ only in slot numbers and the order of the slots they jump through.
        return sorted(_NUMBER.sub("#", _ADDRESS.sub("", line)) for line in listing)
    return listing


def _listing(path: Path) -> tuple[list[str], dict[int, str]]:
    """Symbols and relocations, names blanked, without symbol-table indexes, and the
    GOT/PLT slots that relocations fill with a symbol (address -> blanked name).
    Relocations that name a symbol go without their slot's address: slots follow the
    order of the symbols."""
    symbols = _tool_lines(["readelf", "-W", "--syms", "--dyn-syms", str(path)])
    relocations = _tool_lines(["readelf", "-W", "-r", str(path)])
    listing = []
    slots: dict[int, str] = {}
    for line in symbols:
        fields = line.split()
        if len(fields) >= 8 and fields[0].endswith(":"):
            listing.append("symbol " + blank_symbol(" ".join(fields[1:])))
    for line in relocations:
        fields = line.split()
        if len(fields) < 4 or not fields[2].startswith("R_"):
            continue
        if len(fields) >= 5 and re.fullmatch(r"[0-9a-f]+", fields[3]):
            name = blank_symbol(" ".join(fields[4:]))  # "value name + addend"
            slots[int(fields[0], 16)] = name
            listing.append(f"reloc {fields[2]} {name}")
        else:
            listing.append("reloc " + fields[0] + " " + " ".join(fields[2:]))
    return sorted(listing), slots


def same_modulo_names(data_a: bytes, data_b: bytes) -> bool:
    """True when two linked ELF files differ only in nvcc's per-build names and what
    the linker derives from them (symbol hash order, PLT and GOT order, build id).

    The section tables must match (names, types, flags, addresses, sizes). Code
    sections compare as disassembly, data sections as bytes with the names blanked,
    and symbol tables and relocations as sorted listings with the names blanked.
    """
    sections_a, sections_b = elf_sections(data_a), elf_sections(data_b)
    if sections_a is None or sections_b is None:
        return False
    if [(s.name, s.kind, s.flags, s.address, s.size) for s in sections_a] != [
        (s.name, s.kind, s.flags, s.address, s.size) for s in sections_b
    ]:
        return False
    normal_a, normal_b = normalize(data_a), normalize(data_b)
    if not _same_frames(normal_a.frames, normal_b.frames):
        return False
    code: list[Section] = []
    for section_a, section_b in zip(sections_a, sections_b, strict=True):
        if section_a.kind == 8 or section_a.name in _SYMBOL_LAYOUT_SECTIONS:
            continue  # NOBITS has no bytes; symbol-ordered sections go by listing
        if section_a.flags & _CODE_FLAGS:
            code.append(section_a)
            continue
        slice_a = normal_a.data[section_a.offset : section_a.offset + section_a.size]
        slice_b = normal_b.data[section_b.offset : section_b.offset + section_b.size]
        if slice_a != slice_b:
            return False
    with tempfile.TemporaryDirectory(prefix="kiln-verify-") as tmp:
        path_a, path_b = Path(tmp) / "a.so", Path(tmp) / "b.so"
        path_a.write_bytes(data_a)
        path_b.write_bytes(data_b)
        listing_a, slots_a = _listing(path_a)
        listing_b, slots_b = _listing(path_b)
        if listing_a != listing_b:
            return False
        return all(
            _code_listing(path_a, s, slots_a) == _code_listing(path_b, s, slots_b) for s in code
        )
