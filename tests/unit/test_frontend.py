"""kiln's own frontend: config settings as pip passes them, and the mode switch."""

from __future__ import annotations

import pytest

from wheelkiln.builder.frontend import frontend_mode, hook_settings
from wheelkiln.errors import UsageError


def test_a_repeated_setting_reaches_the_backend_as_a_list_in_order() -> None:
    settings = [("build-dir", "/w/b"), ("compile-args", "-j2"), ("compile-args", "-k0")]
    assert hook_settings(settings) == {"build-dir": "/w/b", "compile-args": ["-j2", "-k0"]}
    assert hook_settings([]) == {}


def test_the_mode_is_the_hook_unless_the_process_is_asked_for() -> None:
    assert frontend_mode({}) == "hook"
    assert frontend_mode({"KILN_FRONTEND": " "}) == "hook"
    assert frontend_mode({"KILN_FRONTEND": "process"}) == "process"
    with pytest.raises(UsageError) as raised:
        frontend_mode({"KILN_FRONTEND": "pip"})
    assert str(raised.value) == "KILN_FRONTEND='pip' is neither 'hook' nor 'process'."
