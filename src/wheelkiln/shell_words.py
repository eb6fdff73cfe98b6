"""Splitting a command line into words as :func:`shlex.split` does (POSIX mode, no
comments), in one regular-expression pass (stdlib only, a leaf).

``shlex`` reads a character at a time in Python: splitting the 169 compile commands of
awkward-cpp's ``compile_commands.json`` (CMake writes one string per compile, each with
a quoted ``-DVERSION_INFO=\\"57\\"``) took 0.17 s, and every job reads that file for its
trace, a shard job once more for its gate. The rules are shlex's, not a shell's:

* words are separated by runs of space, tab, CR or LF;
* outside quotes a backslash takes the next character literally;
* inside single quotes every character is literal;
* inside double quotes a backslash takes a following ``"`` or ``\\`` literally and is
  kept before any other character;
* quoted and unquoted parts next to each other are one word; ``''`` is an empty word.

A line that shlex refuses (an open quote, a backslash at the end) is handed to shlex, so
the error is its own.
"""

from __future__ import annotations

import re
import shlex

_PART = r"""[^ \t\r\n'"\\]+|\\.|'[^']*'|"(?:[^"\\]|\\.)*\""""
_TOKENS = re.compile(rf"[ \t\r\n]+|(?:{_PART})+", re.DOTALL)
_PARTS = re.compile(_PART, re.DOTALL)
_IN_DOUBLE_QUOTES = re.compile(r"\\(.)", re.DOTALL)


def _unquote_double(match: re.Match[str]) -> str:
    return match[1] if match[1] in '"\\' else match[0]


def _word(token: str) -> str:
    pieces = []
    for part in _PARTS.findall(token):
        if part[0] == "\\":
            pieces.append(part[1])
        elif part[0] == "'":
            pieces.append(part[1:-1])
        elif part[0] == '"':
            pieces.append(_IN_DOUBLE_QUOTES.sub(_unquote_double, part[1:-1]))
        else:
            pieces.append(part)
    return "".join(pieces)


def split_words(line: str) -> list[str]:
    """``shlex.split(line)``: the same words, or the same ValueError."""
    words: list[str] = []
    position = 0
    for match in _TOKENS.finditer(line):
        if match.start() != position:
            break  # something only shlex can name (an unclosed quote)
        position = match.end()
        if line[match.start()] not in " \t\r\n":
            words.append(_word(match[0]))
    if position != len(line):
        return shlex.split(line)
    return words
