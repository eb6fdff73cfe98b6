"""Publishing to a docs branch (``gh-pages``) without touching the branch you are on.

Everything happens in a git worktree of the docs branch made for the occasion under
``$KILN_HOME/publish/`` and removed afterwards: the current branch, its index and its
work tree are never read from or written to (a worktree shares only the object store
and refs). A docs branch that does not exist yet is made as an orphan from the empty
tree with plumbing (``commit-tree``), since ``git worktree add --orphan`` needs git 2.42;
one that exists only on the remote is started from it. The docs branch being the one
checked out is refused: publishing would then write into your work tree.

A publish that changes nothing (the same run again) commits nothing. Without ``push``
the commit stays local, and with it the remote is checked before anything is done.

The branch's content is checked out as it is, symbolic links included: every path kiln
writes or reads there goes through :meth:`DocsWorktree.inside`, which refuses a path
with a link (or a file where a directory belongs) in it, since ``data/bench`` linked to
``/tmp/x`` would otherwise take the writes out of the worktree.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from wheelkiln import run
from wheelkiln.errors import UsageError
from wheelkiln.paths import kiln_home

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
FALLBACK_IDENTITY = ("-c", "user.name=kiln", "-c", "user.email=kiln@localhost")
MAX_READ_BYTES = 64 * 2**20


def git(repo: Path, *args: str, check: bool = True) -> str:
    done = run.run(["git", "-C", str(repo), *args], check=False, what=f"git {args[0]}")
    if check and done.returncode != 0:
        raise UsageError(f"git {' '.join(args)} failed in {repo}: {done.output.strip()}",
                         hint="Check the repository (git status) and try again.")
    return done.output.strip() if done.returncode == 0 else ""


def repository_root(start: Path) -> Path:
    done = run.run(["git", "-C", str(start), "rev-parse", "--show-toplevel"], check=False)
    if done.returncode != 0:
        raise UsageError(f"{start} is not inside a git repository.",
                         hint="Run kiln publish in the repository the docs branch belongs to, "
                         "or give --repo.")
    return Path(done.output.strip().splitlines()[-1])


def _check_branch_name(repo: Path, branch: str) -> None:
    if run.run(["git", "-C", str(repo), "check-ref-format", "--branch", branch],
               check=False).returncode != 0:
        raise UsageError(f"--branch {branch!r} is not a valid branch name.")


def _identity(repo: Path) -> tuple[str, ...]:
    """Commit as the repository's user; as ``kiln`` only where none is configured."""
    if git(repo, "config", "user.email", check=False):
        return ()
    return FALLBACK_IDENTITY


@dataclass(frozen=True)
class DocsWorktree:
    repo: Path
    branch: str
    path: Path
    created_branch: bool

    def commit(self, message: str) -> str | None:
        """Commit everything in the worktree; None when nothing changed."""
        git(self.path, "add", "-A")
        if run.run(["git", "-C", str(self.path), "diff", "--cached", "--quiet"],
                   check=False).returncode == 0:
            return None
        git(self.path, *_identity(self.repo), "commit", "-q", "-m", message)
        return git(self.path, "rev-parse", "HEAD")

    def push(self, remote: str = "origin") -> None:
        require_remote(self.repo, remote)
        git(self.path, "push", remote, f"{self.branch}:{self.branch}")

    def _refuse(self, shown: str, problem: str, hint: str) -> UsageError:
        return UsageError(f"{self.branch}:{shown} {problem}.", hint=hint)

    def inside(self, relative: str) -> Path:
        """``relative`` (``/``-separated) in the worktree, once no part of it that exists on
        the branch is a symbolic link and every part but the last is a directory."""
        path = self.path
        parts = PurePosixPath(relative).parts
        for index, part in enumerate(parts):
            path = path / part
            shown = "/".join(parts[: index + 1])
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:
                break  # made by the publish, a directory at a time
            if stat.S_ISLNK(mode):
                raise self._refuse(
                    shown, f"is a symbolic link (to {path.readlink()}); kiln writes and "
                    "reads only inside the docs branch, never through a link",
                    f"Remove the link from {self.branch} (git rm {shown} in a checkout of "
                    "it), then publish again.")
            if index < len(parts) - 1 and not stat.S_ISDIR(mode):
                raise self._refuse(shown, "is a file where kiln needs a directory",
                                   f"Remove or rename it on {self.branch}, then publish again.")
        return self.path / relative

    def write_text(self, relative: str, text: str) -> None:
        """Write a file of the branch (its directories are made), never through a link."""
        path = self.inside(relative)
        if path.is_dir():
            raise self._refuse(relative, "is a directory where kiln writes a file",
                               f"Remove or rename it on {self.branch}, then publish again.")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def read_text(self, relative: str) -> str:
        """A regular file of the branch, never read through a link nor from a fifo."""
        path = self.inside(relative)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise self._refuse(relative, "does not exist",
                               "Publish that run again, or remove its folder from the "
                               "branch.") from None
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise self._refuse(relative, "is not a regular file",
                                   f"Remove it from {self.branch}, then publish again.")
            data = handle.read(MAX_READ_BYTES + 1)
        if len(data) > MAX_READ_BYTES:
            raise self._refuse(relative, f"is larger than {MAX_READ_BYTES // 2**20} MiB",
                               f"Remove it from {self.branch}, then publish again.")
        return data.decode("utf-8", errors="replace")


def require_remote(repo: Path, remote: str = "origin") -> None:
    """Refuse ``--push`` before any work when there is nowhere to push to."""
    if remote not in git(repo, "remote", check=False).split():
        raise UsageError(f"--push: the repository {repo} has no remote {remote!r}.",
                         hint="Add the remote, or publish without --push (a local commit).")


def _current_branch(repo: Path) -> str:
    return git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)


def _ensure_branch(repo: Path, branch: str) -> bool:
    """The docs branch exists locally after this; True when it was made now."""
    if git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False):
        return False
    remote = git(repo, "rev-parse", "--verify", "--quiet", f"refs/remotes/origin/{branch}",
                 check=False)
    if remote:
        git(repo, "branch", "--no-track", branch, remote)
        return True
    root = git(repo, *_identity(repo), "commit-tree", EMPTY_TREE, "-m",
               f"Start {branch}: published data (kiln bench publish, kiln fleet publish)")
    git(repo, "branch", branch, root)
    return True


@contextlib.contextmanager
def docs_worktree(repo: Path, branch: str) -> Iterator[DocsWorktree]:
    """A worktree of ``branch`` for the length of the block, then removed."""
    _check_branch_name(repo, branch)
    if _current_branch(repo) == branch:
        raise UsageError(
            f"{branch} is the branch checked out in {repo}: publishing would write into "
            "your work tree.",
            hint="Switch to your working branch first; kiln publishes through a worktree of "
            "its own.",
        )
    created = _ensure_branch(repo, branch)
    where = kiln_home() / "publish" / f"{branch.replace('/', '-')}-{secrets.token_hex(4)}"
    where.parent.mkdir(parents=True, exist_ok=True)
    done = run.run(["git", "-C", str(repo), "worktree", "add", "-q", str(where), branch],
                   check=False)
    if done.returncode != 0:
        raise UsageError(
            f"Cannot check out {branch} in a worktree: {done.output.strip()}",
            hint=f"If another worktree has {branch} checked out, remove it (git worktree list).",
        )
    try:
        yield DocsWorktree(repo, branch, where, created)
    finally:
        git(repo, "worktree", "remove", "--force", str(where), check=False)
        shutil.rmtree(where, ignore_errors=True)
        git(repo, "worktree", "prune", check=False)


def replace_tree(source: Path, target: Path) -> None:
    """Make ``target`` a copy of ``source`` (files only, no links followed)."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, symlinks=False)


def site_url(repo: Path, given: str | None) -> str:
    """Where the docs branch is served, without a trailing slash: ``given``, else GitHub
    Pages' address for an ``origin`` on GitHub, else ``""`` (links from the site root).

    Links between published pages are absolute (this prefix and the full path): the
    data lives on the docs branch and never in the docs source, so a relative link
    would be a broken internal link to a strict docs build (``mkdocs --strict``).
    """
    if given is not None:
        return check_base_url(given).rstrip("/")
    url = git(repo, "remote", "get-url", "origin", check=False)
    for prefix in ("git@github.com:", "https://github.com/", "ssh://git@github.com/"):
        if url.startswith(prefix):
            owner, _, name = url[len(prefix):].removesuffix(".git").partition("/")
            if owner and name and "/" not in name:
                if name.lower() == f"{owner.lower()}.github.io":
                    return f"https://{name}"
                return f"https://{owner}.github.io/{name}"
    return ""


def check_base_url(given: str) -> str:
    """``--base-url`` goes into every link between published pages: only an http(s)
    address or a path from the site root (``/proj``) is a link a reader can follow
    safely (``javascript:`` would run, ``//host`` would leave the site)."""
    try:
        parts = urlsplit(given)
    except ValueError:  # an unclosed [ in the host
        parts = urlsplit("invalid:")
    web = parts.scheme in ("http", "https") and bool(parts.netloc)
    path = not parts.scheme and not parts.netloc and (given == "" or (
        given.startswith("/") and not given.startswith("//")))
    if not (web or path) or any(ch.isspace() or not ch.isprintable() for ch in given):
        raise UsageError(
            f"--base-url {given!r} is not an http(s) address or a path from the site root.",
            hint="Give where the docs branch is served, e.g. https://OWNER.github.io/REPO "
            "or /REPO.")
    return given
