"""Installing a test's stand-in program as a package upgrade does: a new file."""

from __future__ import annotations

from pathlib import Path


def install_script(path: Path, text: str) -> None:
    """*path* as a new executable file holding *text*: a new inode even where the text is
    the same, as pip and uv write a script they install, so keys that hold a program's
    file identity (inode, size, mtime) see a reinstall."""
    path.unlink(missing_ok=True)
    path.write_text(text)
    path.chmod(0o755)
