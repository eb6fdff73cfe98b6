"""What a build log says: compiler diagnostics and unresolved symbols (pure, stdlib only).

The shard gate reads a whole build log with these patterns; the seat wrapper reads one
failed link's stderr with them to decide whether it is the expected shard failure
(unresolved symbols only). The wrapper starts once per TU, so it imports this module
only for a failed link: ``re`` costs milliseconds it must not spend on every compile.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Compiler diagnostics: an error that a compiler reports about a source file or about
# its own invocation. Linker summaries ("collect2: error: ld returned 1 exit status",
# "clang: error: linker command failed") and unresolved symbols are *not* diagnostics.
DIAGNOSTIC_PATTERNS: tuple[re.Pattern[str], ...] = (
    # gcc/clang: "src/a.cpp:12:5: error: ...", "a.c:3: error: ...", "fatal error: ..."
    # (the path may follow a CI timestamp or indentation, so it starts at any blank)
    re.compile(
        r"(?<![^\s'\"])(?:[A-Za-z]:)?[^\s:('\"][^:\n]*:\d+(?::\d+)?:\s*(?:fatal\s+)?error:",
        re.M,
    ),
    # nvcc/EDG and MSVC: "k.cu(12): error: ...", "a.cpp(12,5): error C2065: ...",
    # "k.cu(1): catastrophic error: cannot open source file"
    re.compile(
        r"^[ \t]*\S[^\n]*?\(\d+(?:,\d+)?\)\s*:\s*(?:fatal\s+|catastrophic\s+)?error\b", re.M
    ),
    # any "fatal error:" (gcc "cc1plus: fatal error: x.h: No such file", gold)
    re.compile(r"\bfatal error:"),
    # compiler drivers about their own invocation: "g++: error: unrecognized
    # command-line option", "cc1plus: error: ...", "clang: error: no such file"
    re.compile(
        r"^[ \t]*(?:\S*/)?(?:cc1\w*|gcc|g\+\+|c\+\+|cc|clang|clang\+\+|clang-cl"
        r"|[\w.]+-(?:gcc|g\+\+)|gcc-[\d.]+|g\+\+-[\d.]+)(?:-[\d.]+)?(?:\.exe)?:\s+error:"
        r"(?!\s*linker command failed)",
        re.M,
    ),
    # CUDA tools: "nvcc fatal   : Unsupported gpu architecture", "ptxas error   : ..."
    re.compile(r"^[ \t]*(?:nvcc|ptxas|cicc|cudafe\+\+|fatbinary)\s+(?:fatal|error)\s*:", re.M),
    # MSVC compiler front end without a line: "cl : Command line error D8021"
    re.compile(r"\bCommand line error D\d{4}\b"),
)

UNRESOLVED_PATTERNS: tuple[re.Pattern[str], ...] = (
    # lld when a shared library it links against needs the symbol
    re.compile(r"undefined reference to (?P<symbol>[^\s`']\S*) \[--no-allow-shlib-undefined\]"),
    # GNU ld (`sym'), gold ('sym'), and both on a shared library (`lib.so: undefined ...`)
    re.compile(r"undefined reference to\b(?: [`'](?P<symbol>[^`'\n]+)')?"),
    # GNU ld and gold when the missing symbol has hidden or protected visibility
    # (pybind11's and meson extension modules' -fvisibility=hidden): a -shared link
    # then fails even without -z defs. ld: "hidden symbol `X' isn't defined";
    # gold: "protected symbol 'X' is not defined locally"
    re.compile(
        r"\b(?:hidden|protected|internal) symbol [`'](?P<symbol>[^`']+)' (?:isn't|is not) defined"
    ),
    # GNU ld when the code takes the address of such a symbol (a dispatch table of
    # hidden kernels): "relocation R_X86_64_PC32 against undefined hidden symbol `X'
    # can not be used when making a shared object" (also "... a PIE object")
    re.compile(
        r"\brelocation \S+ against undefined (?:hidden |protected |internal )?symbol "
        r"[`'](?P<symbol>[^`']+)' can not be used when making"
    ),
    # lld, mold: "ld.lld: error: undefined hidden symbol: X", "mold: error: undefined symbol: X"
    re.compile(r"\berror: undefined (?:hidden |protected )?symbol: (?P<symbol>[^\n]*\S)"),
    re.compile(r"\berror LNK(?:2019|2001)\b"),  # MSVC
    re.compile(r"^[ \t]*Undefined symbols for architecture\b", re.M),  # macOS ld
    # nvcc -dlink
    re.compile(
        r"^[ \t]*nvlink error\s*: Undefined reference to\b(?: '(?P<symbol>[^'\n]+)')?", re.M
    ),
)
"""Lines that say a link failed on unresolved symbols (the expected shard failure)."""

# Lines that accompany unresolved-symbol errors and say nothing else: ld's context and
# summary lines, macOS and lld "referenced from/by" blocks, MSVC's totals, warnings.
_UNRESOLVED_CONTEXT = re.compile(
    r"|".join(
        (
            r":\s*in function [`'\"]",  # /usr/bin/ld: a.o: in function `f':
            r"^[ \t]*collect2(?:\.exe)?: error: ld returned \d+ exit status\s*$",
            r"\berror: linker command failed with exit code \d+",
            r"\bmore undefined references to\b",
            r"\bfinal link failed: [Bb]ad value\s*$",  # follows the hidden-symbol error
            r"^[ \t]*\"[^\"]+\", referenced from:\s*$",  # macOS
            r"^[ \t]+\S.* in \S+[ \t]*$",  # macOS: "      _main in a.o"
            r"\bsymbol\(s\) not found for architecture\b",
            r"^[ \t]*>>> ",  # lld: ">>> referenced by a.c"
            r"\berror: too many errors emitted\b",
            r"\bfatal error LNK1120: \d+ unresolved externals?\b",
            r"^[ \t]*Creating library \S+ and object \S+",
            r"\bwarning\b",
            r"^[ \t]*(?:/\S*/)?(?:ld|ld\.\w+|\S+-ld)(?:\.exe)?: note:",
        )
    ),
    re.M,
)


_UNLOCATED_PATTERNS = frozenset({3, 5})  # indexes of patterns that name no source file


def diagnostic_lines(build_log: str) -> list[tuple[str, bool]]:
    """(line, names a source location) for every diagnostic line, in log order, once."""
    found: dict[int, tuple[str, bool]] = {}
    for index, pattern in enumerate(DIAGNOSTIC_PATTERNS):
        for match in pattern.finditer(build_log):
            start = build_log.rfind("\n", 0, match.start()) + 1
            if start in found:
                continue
            end = build_log.find("\n", match.start())
            line = build_log[start : end if end >= 0 else len(build_log)].strip()
            if not any(unresolved.search(line) for unresolved in UNRESOLVED_PATTERNS):
                found[start] = (line, index not in _UNLOCATED_PATTERNS)
    return [found[start] for start in sorted(found)]


def find_diagnostics(build_log: str, limit: int = 5) -> list[str]:
    """The first *limit* compiler-diagnostic lines of *build_log*, in log order."""
    return [line for line, _ in diagnostic_lines(build_log)][:limit]


def has_unresolved_symbols(build_log: str) -> bool:
    """True when *build_log* has a line saying a link failed on an unresolved symbol."""
    return any(pattern.search(build_log) for pattern in UNRESOLVED_PATTERNS)


# gold reports a code reference to an undefined symbol twice: "undefined reference to
# 'k::f(int)'" (demangled) and "requires dynamic R_X86_64_PC32 reloc against '_ZN1k1fEi'
# which may overflow at runtime; recompile with -fPIC" (mangled). The second line is a
# consequence of the first only when it names a symbol the link reports unresolved; the
# same line about a symbol that exists (a non-PIC object in a shared library) is a real
# failure.
_UNRESOLVED_CONSEQUENCE = re.compile(
    r"\brequires dynamic \S+ reloc against '(?P<symbol>[^']+)' which may overflow at runtime"
)
_MANGLED_NAME_PART = re.compile(r"(\d+)")


def _mangled_names(symbol: str) -> list[str]:
    """The identifiers in an Itanium-mangled name (``_ZN1k10kernel_avxEi`` → k, kernel_avx)."""
    if not symbol.startswith("_Z"):
        return []
    names: list[str] = []
    position = 2
    while position < len(symbol):
        match = _MANGLED_NAME_PART.match(symbol, position)
        if match is None:
            position += 1
            continue
        length = int(match.group(1))
        names.append(symbol[match.end() : match.end() + length])
        position = match.end() + length
    return [name for name in names if name]


def _names_unresolved(symbol: str, unresolved: Sequence[str]) -> bool:
    if symbol in unresolved:
        return True
    names = _mangled_names(symbol)
    return bool(names) and any(
        all(name in demangled for name in names) for demangled in unresolved
    )


def _line_symbols(line: str) -> tuple[bool, list[str]]:
    """(is an unresolved-symbol line, the symbols it names)."""
    matched = False
    symbols: list[str] = []
    for pattern in UNRESOLVED_PATTERNS:
        match = pattern.search(line)
        if match is None:
            continue
        matched = True
        symbol = match.groupdict().get("symbol")
        if symbol:
            symbols.append(symbol)
            break
    return matched, symbols


def unresolved_symbols(linker_output: str) -> list[str]:
    """The symbols *linker_output* reports unresolved, each once, in order of mention."""
    found: dict[str, None] = {}
    for line in linker_output.splitlines():
        for symbol in _line_symbols(line)[1]:
            found.setdefault(symbol)
    return list(found)


def is_unresolved_only(linker_stderr: str) -> bool:
    """True when a failed link's stderr reports unresolved symbols and nothing else.

    Every non-blank line must be an unresolved-symbol line (:data:`UNRESOLVED_PATTERNS`:
    GNU ld, gold, lld, mold, MSVC, macOS ld, nvlink), one of the lines that come with
    them (``in function`` context, ``collect2: error: ld returned 1 exit status``,
    ``final link failed: bad value``, lld's ``>>> referenced by`` blocks, macOS
    ``referenced from`` blocks, MSVC ``LNK1120`` totals, warnings), or gold's dynamic
    relocation complaint about a symbol the same output reports unresolved. Anything
    else (a relocation against a defined symbol, a missing library, a duplicate
    symbol) is a real failure.
    """
    unresolved = unresolved_symbols(linker_stderr)
    found = False
    for line in linker_stderr.splitlines():
        if not line.strip():
            continue
        if _line_symbols(line)[0]:
            found = True
            continue
        if _UNRESOLVED_CONTEXT.search(line):
            continue
        consequence = _UNRESOLVED_CONSEQUENCE.search(line)
        if consequence is None or not _names_unresolved(consequence.group("symbol"), unresolved):
            return False
    return found
