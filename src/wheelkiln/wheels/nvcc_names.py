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
  their length. The entry is padded to 8 bytes, so usually the layout around it stays
  put; about one build in six the frame's length crosses a padding boundary, the
  fatbin section grows or shrinks by 8 bytes and every later section moves.
* **the ELF build id** (``.note.gnu.build-id``): ld hashes the whole output, so it
  differs whenever anything above does.

Every blank has the length of what it replaces, so offsets, sizes and layout still
compare: a changed constant, instruction or symbol remains a difference. When only the
fatbin sections' sizes differ, :func:`same_modulo_names` compares the fatbins entry by
entry and every address as the section (and offset in it) it points into.
"""

from __future__ import annotations

import bisect
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
_STUB_LABEL = re.compile(r"<[^>\s]+@plt([-+]0x[0-9a-f]+)>")
"""A label at an offset from a stub, named after that stub's import."""
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


def _code_listing(
    path: Path, section: Section, slots: dict[int, str], layout: _Layout | None = None
) -> list[str]:
    """Disassembly of one code section, with what follows symbol order named instead:
    PLT call targets by the function they call, GOT loads by the symbol in the slot.
    With a *layout*, addresses (of instructions, rip-relative operands and branch
    targets) read as the section and offset they point into."""
    lines = _tool_lines(
        ["objdump", "-d", "-w", "--no-show-raw-insn", "-j", section.name, str(path)]
    )
    listing = []
    for line in lines[3:]:  # after the "file format" header
        target = _RIP_TARGET.search(line)
        if target and int(target.group(2), 16) in slots:
            slot = slots[int(target.group(2), 16)]
            line = line[: target.start(1)] + f"<slot {slot}>" + line[target.end(1) :]
        elif target and layout is not None:
            place = layout.locate(int(target.group(2), 16))
            line = line[: target.start(1)] + f"<{place}>" + line[target.end(1) :]
        line = _COMMENT.sub("", line)
        line = _PLT_TARGET.sub(lambda m: "<" + m.group(1) + ">", line)
        if layout is not None:
            line = _located_addresses(line, layout)
        listing.append(blank_symbol(line))
    if section.name in _STUB_SECTIONS:
        return stub_listing(listing)
    return listing


def stub_listing(lines: list[str]) -> list[str]:
    """A stub section's disassembly as a comparison sees it. Stubs differ only in slot
    numbers and the order of the slots they jump through, and so does objdump's label
    for a place between stubs: the PLT's first stub is ``<NAME@plt-0x10>`` after
    whichever import the linker put first."""
    return sorted(
        _NUMBER.sub("#", _ADDRESS.sub("", _STUB_LABEL.sub(r"<stub\1>", line))) for line in lines
    )


def _located_addresses(line: str, layout: _Layout) -> str:
    """A disassembly line with its own address and branch targets (``1234 <name>``)
    as places; the names in angle brackets stay."""
    line = _LINE_ADDRESS.sub(lambda m: m.group(1) + layout.locate(int(m.group(2), 16)) + ":", line)
    return _BRANCH_TARGET.sub(lambda m: layout.locate(int(m.group(1), 16)) + m.group(2), line)


@dataclass(frozen=True)
class _Listing:
    lines: list[str]
    slots: dict[int, str]
    relocated: list[int]
    """Addresses a dynamic relocation writes (8 bytes each on x86-64)."""


def _listing(path: Path, layout: _Layout | None = None) -> _Listing:
    """Symbols and relocations, names blanked, without symbol-table indexes, and the
    GOT/PLT slots that relocations fill with a symbol (address -> blanked name).
    Relocations that name a symbol go without their slot's address: slots follow the
    order of the symbols. With a *layout*, symbol values, relocation offsets outside
    the symbol-ordered sections and relative addends read as places, and symbols in a
    fatbin section go without their size."""
    symbols = _tool_lines(["readelf", "-W", "--syms", "--dyn-syms", str(path)])
    relocations = _tool_lines(["readelf", "-W", "-r", str(path)])
    listing = []
    slots: dict[int, str] = {}
    relocated: list[int] = []
    for line in symbols:
        fields = line.split()
        if len(fields) >= 8 and fields[0].endswith(":"):
            if layout is not None and fields[6].isdigit() and fields[3] != "TLS":
                fields[1] = layout.locate(int(fields[1], 16))
                if int(fields[6]) in layout.fatbin_sections:
                    fields[2] = "-"
            listing.append("symbol " + blank_symbol(" ".join(fields[1:])))
    for line in relocations:
        fields = line.split()
        if len(fields) < 4 or not fields[2].startswith("R_"):
            continue
        offset = int(fields[0], 16)
        relocated.append(offset)
        if len(fields) >= 5 and re.fullmatch(r"[0-9a-f]+", fields[3]):
            name = blank_symbol(" ".join(fields[4:]))  # "value name + addend"
            slots[offset] = name
            place = ""
            if layout is not None and layout.section_of(offset) not in _SYMBOL_LAYOUT_SECTIONS:
                place = " at " + layout.locate(offset)
            listing.append(f"reloc {fields[2]} {name}{place}")
        elif layout is not None:
            rest = fields[3:]
            if fields[2].endswith("_RELATIVE") and len(rest) == 1:
                rest = [layout.locate(int(rest[0], 16))]
            listing.append(" ".join(["reloc", layout.locate(offset), fields[2], *rest]))
        else:
            listing.append("reloc " + fields[0] + " " + " ".join(fields[2:]))
    return _Listing(sorted(listing), slots, relocated)


def same_modulo_names(data_a: bytes, data_b: bytes) -> bool:
    """True when two linked ELF files differ only in nvcc's per-build names and what
    the linker derives from them (symbol hash order, PLT and GOT order, build id, and
    the layout after a fatbin whose compressed entries have different sizes).

    When the section tables match (names, types, flags, addresses, sizes), code
    sections compare as disassembly, data sections as bytes with the names blanked,
    and symbol tables and relocations as sorted listings with the names blanked.
    Otherwise see :func:`_same_after_fatbins`.
    """
    sections_a, sections_b = elf_sections(data_a), elf_sections(data_b)
    if sections_a is None or sections_b is None:
        return False
    if [(s.name, s.kind, s.flags, s.address, s.size) for s in sections_a] != [
        (s.name, s.kind, s.flags, s.address, s.size) for s in sections_b
    ]:
        return _same_after_fatbins(data_a, data_b, sections_a, sections_b)
    normal_a, normal_b = normalize(data_a), normalize(data_b)
    if not _same_frames(normal_a.frames, normal_b.frames):
        return False
    code: list[Section] = []
    for section_a, section_b in zip(sections_a, sections_b, strict=True):
        if section_a.kind == _NOBITS or section_a.name in _SYMBOL_LAYOUT_SECTIONS:
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
        listing_a, listing_b = _listing(path_a), _listing(path_b)
        if listing_a.lines != listing_b.lines:
            return False
        return all(
            _code_listing(path_a, s, listing_a.slots) == _code_listing(path_b, s, listing_b.slots)
            for s in code
        )


# --------------------------------------------------------------- a fatbin that changed size

_NOBITS = 8
_DYNAMIC = 6
_ALLOC_FLAG = 0x2
_TLS_FLAG = 0x400
_ENTRY_SIZE_FIELDS = slice(8, 20)
"""An entry header's payload size (8 bytes) and compressed size (4 bytes)."""
_LINE_ADDRESS = re.compile(r"^(\s*)([0-9a-f]+):")
_BRANCH_TARGET = re.compile(r"\b([0-9a-f]+)( <[^>]*>)")
_FRAME_ADDRESS = re.compile(r"(?<=pc=)[0-9a-f]+|(?<=\.\.)[0-9a-f]+|(?<= to )[0-9a-f]+")
_FRAME_ENTRY = re.compile(r"^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ (?:CIE|FDE)")
_DYNAMIC_POINTERS = frozenset(
    {3, 4, 5, 6, 7, 12, 13, 17, 23, 25, 26, 32, 0x6FFFFEF5, 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFE}
)
"""``.dynamic`` tags whose value is an address (DT_PLTGOT ... DT_VERNEED)."""
_EH_FRAME_HDR_ENCODINGS = b"\x01\x1b\x03\x3b"
"""Version 1; pc-relative eh_frame pointer, 4-byte count, table relative to the header,
as GNU ld writes it."""


def _fatbin_key(data: bytes) -> tuple[tuple[int, ...], tuple[bytes, ...]] | None:
    """Where each fatbin starts in a fatbin section (zero padding between them) and what
    must match: headers without their size fields, uncompressed payloads blanked.
    Compressed payloads are left to :func:`normalize` and :func:`_same_frames`; their
    padding must be zeros. None when *data* is not a run of fatbins."""
    starts: list[int] = []
    key: list[bytes] = []
    position = 0
    try:
        while position < len(data):
            if data[position] == 0:
                position += 1
                continue
            if data[position : position + 8] != FATBIN_MAGIC:
                return None
            (total,) = struct.unpack_from("<Q", data, position + 8)
            end = position + 16 + total
            if end > len(data):
                return None
            starts.append(position)
            key.append(data[position : position + 8])
            entry = position + 16
            while entry < end:
                header_size, payload_size, compressed = struct.unpack_from("<IQI", data, entry + 4)
                (flags,) = struct.unpack_from("<Q", data, entry + 40)
                payload = entry + header_size
                if header_size < 64 or payload + payload_size > end:
                    return None
                header = bytearray(data[entry:payload])
                header[_ENTRY_SIZE_FIELDS] = bytes(12)
                key.append(bytes(header))
                body = data[payload : payload + payload_size]
                if flags & _FLAG_ZSTD and body[:4] == _ZSTD_MAGIC and compressed <= payload_size:
                    if any(body[compressed:]):
                        return None
                    key.append(b"zstd frame")
                else:
                    key.append(blank_names(body))
                entry = payload + payload_size
            position = end
    except struct.error:
        return None
    return (tuple(starts), tuple(key)) if starts else None


class _Layout:
    """Addresses of one linked file as places: the section (by index and name) and the
    offset in it; in a fatbin section, the fatbin and the offset in that."""

    def __init__(self, sections: list[Section], fatbin_starts: dict[int, tuple[int, ...]]):
        self.fatbin_sections = frozenset(fatbin_starts)
        spans: list[tuple[int, int, str, tuple[int, ...]]] = []
        for index, section in enumerate(sections):
            if section.flags & _ALLOC_FLAG and section.size and not section.flags & _TLS_FLAG:
                starts = tuple(sorted({0, *fatbin_starts.get(index, ())}))
                spans.append((section.address, section.size, f"[{index}]{section.name}", starts))
        spans.sort()
        self._spans = spans
        self._addresses = [span[0] for span in spans]

    def _span(self, address: int) -> tuple[int, int, str, tuple[int, ...]] | None:
        index = bisect.bisect_right(self._addresses, address) - 1
        if index < 0 or address > self._spans[index][0] + self._spans[index][1]:
            return None
        return self._spans[index]

    def locate(self, address: int) -> str:
        span = self._span(address)
        if span is None:
            return f"{address:#x}"
        start, size, name, starts = span
        offset = address - start
        if offset == size:
            return f"{name}+end"
        fatbin = bisect.bisect_right(starts, offset) - 1
        if len(starts) == 1:
            return f"{name}+{offset:#x}"
        # No "#": the disassembly's comments start with one and are cut off.
        return f"{name}[fatbin {fatbin}]+{offset - starts[fatbin]:#x}"

    def section_of(self, address: int) -> str | None:
        span = self._span(address)
        return span[2].split("]", 1)[1] if span else None


def _fatbins_resized(
    data_a: bytes, data_b: bytes, sections_a: list[Section], sections_b: list[Section]
) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]] | None:
    """Where the fatbins start in each file's fatbin sections, when the two section
    tables differ only in the sizes of fatbin sections (with matching fatbins) and the
    places of sections; None otherwise."""
    if [(s.name, s.kind, s.flags) for s in sections_a] != [
        (s.name, s.kind, s.flags) for s in sections_b
    ]:
        return None
    starts_a: dict[int, tuple[int, ...]] = {}
    starts_b: dict[int, tuple[int, ...]] = {}
    for index, (a, b) in enumerate(zip(sections_a, sections_b, strict=True)):
        raw_a, raw_b = data_a[a.offset : a.offset + a.size], data_b[b.offset : b.offset + b.size]
        if a.kind == _NOBITS or FATBIN_MAGIC not in raw_a[:64]:
            if a.size != b.size:
                return None
            continue
        key_a, key_b = _fatbin_key(raw_a), _fatbin_key(raw_b)
        if key_a is None or key_b is None:
            if a.size != b.size:
                return None
            continue
        if key_a[1] != key_b[1]:
            return None
        starts_a[index], starts_b[index] = key_a[0], key_b[0]
    return starts_a, starts_b


def _masked(data: bytes, section: Section, relocated: list[int]) -> bytes:
    """A section's bytes with the 8 bytes each dynamic relocation writes zeroed (the
    relocations compare as places in the listing)."""
    buffer = bytearray(data[section.offset : section.offset + section.size])
    first = bisect.bisect_left(relocated, section.address - 7)
    for address in relocated[first:]:
        if address >= section.address + section.size:
            break
        low = max(address - section.address, 0)
        high = min(address - section.address + 8, section.size)
        buffer[low:high] = bytes(high - low)
    return bytes(buffer)


def _section_places(data: bytes, section: Section, layout: _Layout) -> list[str] | None:
    """``.dynamic`` and ``.eh_frame_hdr`` with their addresses as places; None for other
    sections (and a header in an encoding GNU ld does not write)."""
    raw = data[section.offset : section.offset + section.size]
    if section.kind == _DYNAMIC:
        return [
            f"{tag} {layout.locate(value) if tag in _DYNAMIC_POINTERS else value}"
            for tag, value in struct.iter_unpack("<qQ", raw[: len(raw) // 16 * 16])
        ]
    if section.name == ".eh_frame_hdr" and raw[:4] == _EH_FRAME_HDR_ENCODINGS and len(raw) >= 12:
        frame, count = struct.unpack_from("<iI", raw, 4)
        if 12 + 8 * count > len(raw):
            return None
        places = [layout.locate(section.address + 4 + frame), str(count)]
        for found, entry in struct.iter_unpack("<ii", raw[12 : 12 + 8 * count]):
            places.append(
                layout.locate(section.address + found)
                + " "
                + layout.locate(section.address + entry)
            )
        return places
    return None


def _leb128(raw: bytes, position: int) -> int:
    """Where the LEB128 number at *position* ends."""
    while raw[position] & 0x80:
        position += 1
    return position + 1


def _pointer(raw: bytes, position: int, encoding: int, address: int) -> tuple[int, int] | None:
    """The address a DWARF pointer at *position* holds (absolute or pc-relative, 4 or 8
    bytes) and where it ends; None for other encodings. *address* is the section's."""
    formats = {0x00: "<Q", 0x03: "<I", 0x04: "<Q", 0x0B: "<i", 0x0C: "<q"}
    if encoding & 0x0F not in formats or encoding & 0x70 not in (0x00, 0x10):
        return None
    form = formats[encoding & 0x0F]
    (value,) = struct.unpack_from(form, raw, position)
    if encoding & 0x70 == 0x10:
        value += address + position
    return value, position + struct.calcsize(form)


def _augmentation_places(raw: bytes, address: int, layout: _Layout) -> dict[int, str]:
    """The pointers in ``.eh_frame`` augmentation data (personality routine, LSDA) as
    places, by the offset of the CIE or FDE holding them; an entry whose augmentation
    cannot be read is left out (readelf's bytes then compare as they are)."""
    places: dict[int, str] = {}
    cies: dict[int, dict[str, int]] = {}  # CIE offset -> encoding of "L" and "R"
    position = 0
    while position + 8 <= len(raw):
        length, cie = struct.unpack_from("<II", raw, position)
        if length == 0 or length == 0xFFFFFFFF:
            break  # the terminator, or 64-bit DWARF, which ld does not write here
        start, position = position, position + 4 + length
        try:
            if cie == 0:
                found = _cie_augmentation(raw, start, address, layout)
                if found is not None:
                    places[start], cies[start] = found
                continue
            encodings = cies[start + 4 - cie]
            if "L" not in encodings or encodings.get("R", -1) & 0x0F not in (0x03, 0x0B):
                continue
            cursor = _leb128(raw, start + 16)  # after the 4-byte pc begin and range
            pointer = _pointer(raw, cursor, encodings["L"] & 0x7F, address)
            if pointer is not None:
                places[start] = layout.locate(pointer[0])
        except (IndexError, KeyError, UnicodeDecodeError, struct.error):
            continue
    return places


def _cie_augmentation(
    raw: bytes, start: int, address: int, layout: _Layout
) -> tuple[str, dict[str, int]] | None:
    """A CIE's augmentation data with the personality pointer as a place, and the
    encodings of the FDEs' LSDA and code pointers; None when it cannot be read."""
    cursor = start + 9  # after length, CIE id and version
    augmentation = raw[cursor : raw.index(b"\0", cursor)].decode("ascii")
    cursor = _leb128(raw, _leb128(raw, cursor + len(augmentation) + 1))  # code, data factor
    cursor = cursor + 1 if raw[start + 8] == 1 else _leb128(raw, cursor)  # return register
    if not augmentation.startswith("z"):
        return None
    cursor = _leb128(raw, cursor)  # augmentation data length
    found: list[str] = []
    encodings: dict[str, int] = {}
    for letter in augmentation[1:]:
        encoding = raw[cursor]
        found.append(f"{encoding:#x}")
        if letter == "P":
            pointer = _pointer(raw, cursor + 1, encoding & 0x7F, address)
            if pointer is None:
                return None
            found.append(layout.locate(pointer[0]))
            cursor = pointer[1]
        elif letter in "LR":
            encodings[letter] = encoding
            cursor += 1
        else:
            return None
    return " ".join(found), encodings


def _frame_listing(path: Path, section: Section, data: bytes, layout: _Layout) -> list[str]:
    """The call frame information (``.eh_frame``) as readelf decodes it, code addresses
    and the pointers in augmentation data as places."""
    raw = data[section.offset : section.offset + section.size]
    places = _augmentation_places(raw, section.address, layout)
    listing = []
    entry = -1
    for line in _tool_lines(["readelf", "--debug-dump=frames", str(path)]):
        header = _FRAME_ENTRY.match(line)
        if header:
            entry = int(header.group(1), 16)
        elif line.lstrip().startswith("Augmentation data:") and entry in places:
            line = "  Augmentation data: " + places[entry]
        listing.append(_FRAME_ADDRESS.sub(lambda m: layout.locate(int(m.group(0), 16)), line))
    return listing


def _same_after_fatbins(
    data_a: bytes, data_b: bytes, sections_a: list[Section], sections_b: list[Section]
) -> bool:
    """Two linked files whose layouts differ only because fatbin entries compressed to
    different sizes (padded to 8 bytes, so a fatbin section grows or shrinks and every
    later section moves). The fatbins compare entry by entry; every address (symbol
    values, relocations, the pointers relocations write, rip-relative operands, branch
    targets, ``.dynamic``, unwind tables) compares as the place it points to."""
    starts = _fatbins_resized(data_a, data_b, sections_a, sections_b)
    if starts is None:
        return False
    normal_a, normal_b = normalize(data_a), normalize(data_b)
    if not _same_frames(normal_a.frames, normal_b.frames):
        return False
    layout_a, layout_b = _Layout(sections_a, starts[0]), _Layout(sections_b, starts[1])
    with tempfile.TemporaryDirectory(prefix="kiln-verify-") as tmp:
        path_a, path_b = Path(tmp) / "a.so", Path(tmp) / "b.so"
        path_a.write_bytes(data_a)
        path_b.write_bytes(data_b)
        listing_a, listing_b = _listing(path_a, layout_a), _listing(path_b, layout_b)
        if listing_a.lines != listing_b.lines:
            return False
        relocated_a, relocated_b = sorted(listing_a.relocated), sorted(listing_b.relocated)
        code: list[tuple[Section, Section]] = []
        frames: list[tuple[Section, Section]] = []
        for index, (a, b) in enumerate(zip(sections_a, sections_b, strict=True)):
            if a.kind == _NOBITS or a.name in _SYMBOL_LAYOUT_SECTIONS or index in starts[0]:
                continue  # fatbin sections compared by _fatbins_resized
            if a.flags & _CODE_FLAGS:
                code.append((a, b))
                continue
            if a.name == ".eh_frame":
                frames.append((a, b))
                continue
            places_a = _section_places(data_a, a, layout_a)
            places_b = _section_places(data_b, b, layout_b)
            if places_a is not None or places_b is not None:
                if places_a != places_b:
                    return False
                continue
            if _masked(normal_a.data, a, relocated_a) != _masked(normal_b.data, b, relocated_b):
                return False
        for a, b in frames:
            if _frame_listing(path_a, a, data_a, layout_a) != _frame_listing(
                path_b, b, data_b, layout_b
            ):
                return False
        return all(
            _code_listing(path_a, a, listing_a.slots, layout_a)
            == _code_listing(path_b, b, listing_b.slots, layout_b)
            for a, b in code
        )
