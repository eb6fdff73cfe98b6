"""split_words splits as shlex.split does (POSIX, no comments): words and errors."""

from __future__ import annotations

import random
import shlex

import pytest

from wheelkiln.shell_words import split_words

CASES = [
    "",
    "   ",
    "g++ -c a.cpp -o a.o",
    '/usr/bin/g++ -DVERSION_INFO=\\"57\\" -I/x/include -o a.o -c /x/a.cpp',  # CMake's
    "cc '-DNAME=a b' \"-DQ=\\\"x\\\"\" -c 'it''s'.c",
    "a '' b \"\" c",  # empty words
    'x"a\\$b\\\\c"y',  # a kept backslash before $, a taken one before \\
    "a\\ b\tc\nd\re",  # an escaped space; tab, LF and CR separate words
    "a # not a comment",
    "tail\\\nnext",  # backslash-newline outside quotes: the newline is kept
]


@pytest.mark.parametrize("line", CASES)
def test_the_words_are_shlex_s(line: str) -> None:
    assert split_words(line) == shlex.split(line)


@pytest.mark.parametrize("line", ["open 'quote", 'open "quote', "ends with \\", 'a "b\\"'])
def test_what_shlex_refuses_is_refused_with_shlex_s_error(line: str) -> None:
    with pytest.raises(ValueError) as expected:
        shlex.split(line)
    with pytest.raises(ValueError) as caught:
        split_words(line)
    assert str(caught.value) == str(expected.value)


def test_random_lines_split_as_shlex_splits_them() -> None:
    pieces = ["a", "b", " ", "\t", "\n", "\r", "\x0b", "\xa0", "'", '"', "\\", "#", "$", "x y"]
    rng = random.Random(15)
    for _ in range(5_000):
        line = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        try:
            expected: object = shlex.split(line)
        except ValueError as exc:
            expected = ("refused", str(exc))
        try:
            got: object = split_words(line)
        except ValueError as exc:
            got = ("refused", str(exc))
        assert got == expected, repr(line)
