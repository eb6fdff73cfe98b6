"""The private copy of a package's source and its digest: what is left out, and only that."""

from __future__ import annotations

import os
import shutil
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from wheelkiln.builder.source import copy_tree, empty_but, fetch_source, source_digest
from wheelkiln.errors import RecipeError, SourceError
from wheelkiln.recipe.load import load_recipe

SOURCE = {
    "pyproject.toml": "[project]\nname = 'pkg'\n",
    "src/pkg/__init__.py": "from pkg import build\n",
    "src/pkg/build/__init__.py": "STEPS = 3\n",  # a subpackage named build
    "src/pkg/dist/__init__.py": "SPREAD = 2\n",  # and one named dist
    "src/pkg/tools/_skbuild/notes.txt": "kept\n",
}
LEFTOVERS = {
    "build/lib/pkg/__init__.py": "stale\n",
    "dist/pkg-1.0.whl": "stale\n",
    "_skbuild/cmake.txt": "stale\n",
    ".eggs/x.txt": "stale\n",
    "src/pkg.egg-info/PKG-INFO": "stale\n",
    "src/pkg/__pycache__/x.pyc": "stale\n",
    ".git/HEAD": "ref: main\n",
}


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_only_top_level_build_outputs_are_left_out(tmp_path: Path) -> None:
    pristine = write(tmp_path / "pristine", {**SOURCE, **LEFTOVERS})
    script = pristine / "src/pkg/tools/_skbuild/notes.txt"
    script.chmod(0o755)
    os.utime(script, (1_000_000_000, 1_000_000_000))
    copy = tmp_path / "copy"
    digest = copy_tree(pristine, copy)
    assert files_under(copy) == sorted(SOURCE)
    assert digest == source_digest(copy) == source_digest(pristine)
    copied = (copy / "src/pkg/tools/_skbuild/notes.txt").stat()
    assert (copied.st_mode & 0o777, copied.st_mtime) == (0o755, 1_000_000_000)


def test_a_nested_build_package_counts_in_the_digest(tmp_path: Path) -> None:
    pristine = write(tmp_path / "pristine", {**SOURCE, **LEFTOVERS})
    before = source_digest(pristine)
    (pristine / "src/pkg/build/__init__.py").write_text("STEPS = 4\n")
    edited = source_digest(pristine)
    assert edited != before
    (pristine / "src/pkg/dist/more.py").write_text("")
    assert source_digest(pristine) != edited
    # build leftovers at the top, or anywhere for caches and metadata, do not count
    settled = source_digest(pristine)
    write(pristine, {name: "changed\n" for name in LEFTOVERS})
    write(pristine, {"build/new.o": "", "src/pkg/sub/__pycache__/y.pyc": ""})
    assert source_digest(pristine) == settled


def test_digest_names_symlinks_and_reads_only_regular_files(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside", {"big.txt": "outside\n"})
    pristine = write(tmp_path / "pristine", SOURCE)
    (pristine / "linked-dir").symlink_to(outside, target_is_directory=True)
    (pristine / "linked-file").symlink_to(outside / "big.txt")
    os.mkfifo(pristine / "pipe")  # reading it would block forever
    first = source_digest(pristine)
    copy = tmp_path / "copy"
    assert copy_tree(pristine, copy) == first  # the digest of what it wrote
    assert (copy / "linked-dir").is_symlink() and not (copy / "pipe").exists()
    assert source_digest(copy) == first
    (outside / "big.txt").write_text("changed\n")  # a linked file's content counts
    assert source_digest(pristine) != first
    changed = source_digest(pristine)
    (outside / "other.txt").write_text("")  # behind a directory link: not walked
    assert source_digest(pristine) == changed
    (pristine / "linked-dir").unlink()
    (pristine / "linked-dir").symlink_to(tmp_path, target_is_directory=True)
    assert source_digest(pristine) != changed  # where a link points counts


def test_subdir_turned_into_a_link_out_is_refused_at_fetch(tmp_path: Path) -> None:
    """The recipe is checked when loaded, and the source again when fetched."""
    project = tmp_path / "project"
    write(project, {"tree/pkg/setup.py": ""})
    outside = write(tmp_path / "outside", {"setup.py": ""})
    recipe = project / "recipes" / "pkg.toml"
    recipe.parent.mkdir()
    recipe.write_text('name = "pkg"\n[source]\npath = "../tree"\nsubdir = "pkg"\n')
    loaded = load_recipe(recipe)
    assert fetch_source(loaded, tmp_path / "store") == project / "tree" / "pkg"
    shutil.rmtree(project / "tree" / "pkg")
    (project / "tree" / "pkg").symlink_to(outside, target_is_directory=True)
    with pytest.raises(RecipeError) as caught:
        fetch_source(loaded, tmp_path / "store")
    assert caught.value.message == (
        f"{recipe}: key 'source.subdir': 'pkg' resolves outside the source tree "
        f"({project / 'tree'})."
    )


def test_the_recipe_names_what_is_left_out(tmp_path: Path) -> None:
    pristine = write(tmp_path / "pristine", {**SOURCE, **LEFTOVERS, "src/gen/out/a.c": ""})
    keep_all = tmp_path / "keep-all"
    # a package whose top-level build/ is source
    assert copy_tree(pristine, keep_all, exclude=()) == source_digest(pristine, ())
    assert "build/lib/pkg/__init__.py" in files_under(keep_all)
    assert "src/pkg/__pycache__/x.pyc" not in files_under(keep_all)  # always left out
    assert source_digest(keep_all, ()) == source_digest(pristine, ())
    assert source_digest(pristine, ()) != source_digest(pristine)
    named = tmp_path / "named"
    assert copy_tree(pristine, named, exclude=("**/out", "dist")) == source_digest(
        named, ("**/out", "dist")
    )
    assert "src/gen/out/a.c" not in files_under(named)
    assert "build/lib/pkg/__init__.py" in files_under(named)
    assert "dist/pkg-1.0.whl" not in files_under(named)


def test_source_exclude_in_a_recipe(tmp_path: Path) -> None:
    write(tmp_path / "project", {"tree/setup.py": ""})
    recipe = tmp_path / "project" / "recipes" / "pkg.toml"
    recipe.parent.mkdir()
    recipe.write_text('name = "pkg"\n[source]\npath = "../tree"\nexclude = ["out", "**/tmp"]\n')
    assert load_recipe(recipe).recipe.source.exclude == ("out", "**/tmp")
    recipe.write_text('name = "pkg"\n[source]\npath = "../tree"\n')
    assert load_recipe(recipe).recipe.source.exclude == ("build", "dist", "_skbuild", ".eggs")
    recipe.write_text('name = "pkg"\n[source]\npath = "../tree"\nexclude = ["../up"]\n')
    with pytest.raises(RecipeError) as caught:
        load_recipe(recipe)
    assert caught.value.message.startswith(
        f"{recipe}: key 'source.exclude[0]': must not contain '..'"
    )


def _tree(root: Path) -> dict[str, tuple[str, str | bytes, int, int]]:
    """Every entry under *root*, not following links: its kind, content or target, mode
    and mtime (a directory's own mtime moves as it is written into: left out)."""
    found: dict[str, tuple[str, str | bytes, int, int]] = {}
    for directory, subdirectories, files in os.walk(root):
        for name in (*subdirectories, *files):
            path = Path(directory, name)
            status = path.lstat()
            if path.is_symlink():
                found[path.relative_to(root).as_posix()] = ("link", str(path.readlink()), 0, 0)
            elif path.is_dir():
                found[path.relative_to(root).as_posix()] = ("dir", "", status.st_mode, 0)
            else:
                entry = ("file", path.read_bytes(), status.st_mode, status.st_mtime_ns)
                found[path.relative_to(root).as_posix()] = entry
    return found


def test_a_copy_over_an_earlier_one_is_the_source_and_writes_nothing_outside(
    tmp_path: Path,
) -> None:
    """A job run again copies its tree in place of the last one, which its build may have
    changed in any way: what is left is the source, as a fresh copy has it."""
    outside = write(tmp_path / "outside", {"secret.txt": "outside\n", "dir/x.txt": "x\n"})
    pristine = write(tmp_path / "pristine", {**SOURCE, "a/b/c.txt": "deep\n"})
    (pristine / "src/pkg/read-only.txt").write_text("ro\n")
    (pristine / "src/pkg/read-only.txt").chmod(0o444)
    (pristine / "link-to-init").symlink_to("src/pkg/__init__.py")
    os.utime(pristine / "pyproject.toml", (1_000_000_000, 1_000_000_000))
    fresh = tmp_path / "fresh"
    expected_digest = copy_tree(pristine, fresh)

    copy = tmp_path / "copy"
    copy_tree(pristine, copy)
    # What a build (or an attacker in one) could leave behind:
    write(copy, {"build/lib/x.so": "obj\n", "src/pkg/generated.c": "gen\n", "extra.txt": "x\n"})
    (copy / "pyproject.toml").write_text("[project]\nname = 'evil'\n")
    os.utime(copy / "pyproject.toml", (1_000_000_000, 1_000_000_000))  # same mtime, new bytes
    notes = copy / "src/pkg/tools/_skbuild/notes.txt"
    stamp = notes.stat().st_mtime_ns
    notes.write_text("KEPT\n")  # the same size, too
    os.utime(notes, ns=(stamp, stamp))
    shutil.rmtree(copy / "a/b")
    (copy / "a/b").write_text("a file where a directory was\n")
    (copy / "src/pkg/__init__.py").unlink()
    (copy / "src/pkg/__init__.py").symlink_to(outside / "secret.txt")  # a write would follow it
    shutil.rmtree(copy / "src/pkg/dist")
    (copy / "src/pkg/dist").symlink_to(outside / "dir", target_is_directory=True)
    (copy / "src/pkg/build/__init__.py").unlink()
    os.link(outside / "dir/x.txt", copy / "src/pkg/build/__init__.py")  # another name of it
    (copy / "link-to-init").unlink()
    (copy / "link-to-init").mkdir()
    (copy / "link-to-init" / "inside.txt").write_text("in a directory where a link was\n")

    assert copy_tree(pristine, copy) == expected_digest == source_digest(copy)
    assert _tree(copy) == _tree(fresh)
    assert _tree(outside) == {
        "dir": _tree(outside)["dir"],
        "secret.txt": ("file", b"outside\n", 0o100644, _tree(outside)["secret.txt"][3]),
        "dir/x.txt": ("file", b"x\n", 0o100644, _tree(outside)["dir/x.txt"][3]),
    }


def test_a_copy_over_a_link_to_a_directory_leaves_that_directory_alone(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside", {"keep.txt": "keep\n"})
    pristine = write(tmp_path / "pristine", SOURCE)
    copy = tmp_path / "copy"
    copy.symlink_to(outside, target_is_directory=True)
    assert copy_tree(pristine, copy) == source_digest(pristine)
    assert not copy.is_symlink() and files_under(copy) == sorted(SOURCE)
    assert files_under(outside) == ["keep.txt"]


def test_a_job_directory_is_emptied_but_for_its_source_copy(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside", {"keep.txt": "keep\n"})
    job = write(tmp_path / "job", {"src/a.py": "a\n", "build/x.o": "o\n", "build.log": "l\n"})
    (job / "dist").symlink_to(outside, target_is_directory=True)
    empty_but(job, job / "src")
    assert files_under(job) == ["src/a.py"] and not (job / "dist").exists()
    assert files_under(outside) == ["keep.txt"]
    (job / "src").rename(job / "elsewhere")
    (job / "src").symlink_to(outside, target_is_directory=True)  # the copy's place, a link
    empty_but(job, job / "src")
    assert list(job.iterdir()) == [] and files_under(outside) == ["keep.txt"]
    linked = tmp_path / "linked-job"
    linked.symlink_to(outside, target_is_directory=True)
    empty_but(linked, linked / "src")
    assert linked.is_dir() and not linked.is_symlink() and files_under(outside) == ["keep.txt"]


def _as_another_user(work: Callable[[], None]) -> None:
    """Run *work* as a user other than root, where permissions are checked: in a forked
    child that drops to ``nobody`` when the suite runs as root, else here."""
    if os.geteuid() != 0:
        work()
        return
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read)
        message = b""
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            work()
        except BaseException:
            message = traceback.format_exc().encode()
        os.write(write, message or b"ok")
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as reported:
        said = reported.read().decode()
    os.waitpid(child, 0)
    assert said == "ok", said


def test_a_read_only_source_gives_a_copy_its_build_can_write_and_remove() -> None:
    # A Nix store path, a Perforce workspace or an sdist packed with read-only modes:
    # directories 0555, files 0444. As root nothing of this shows; as anyone else the
    # copy kept those modes and the build could not write its outputs into it, nor the
    # next job empty or rewrite it.
    # pytest's directories are root's alone (0700) when root runs the suite; nobody must
    # reach this one.
    shared = Path(tempfile.mkdtemp(prefix="kiln-read-only-"))
    shared.chmod(0o777)
    source = write(shared / "src", {"setup.py": "x = 1\n", "pkg/a.c": "int a;\n",
                                    "pkg/tool.sh": "#!/bin/sh\n"})
    (source / "pkg" / "tool.sh").chmod(0o555)
    for path in (source / "setup.py", source / "pkg" / "a.c"):
        path.chmod(0o444)
    for directory in (source / "pkg", source):
        directory.chmod(0o555)
    job = shared / "job"

    def build_twice() -> None:
        tree = job / "tree"
        job.mkdir()
        assert copy_tree(source, tree) == source_digest(source)
        (tree / "build").mkdir()  # setuptools' outputs, Cython's C beside its .pyx
        (tree / "pkg" / "a.o").write_text("object")
        assert (tree / "pkg" / "tool.sh").stat().st_mode & 0o777 == 0o755  # still runs
        assert (tree / "setup.py").stat().st_mode & 0o777 == 0o644
        # What an earlier kiln left (the source's modes) and a build made read-only.
        for directory in (tree / "pkg", tree):
            directory.chmod(0o555)
        made = write(job / "gomod", {"x/y.go": "package y\n"})
        for directory in (made / "x", made):
            directory.chmod(0o555)
        empty_but(job, tree)
        assert sorted(p.name for p in job.iterdir()) == ["tree"]
        assert copy_tree(source, tree) == source_digest(source)
        assert files_under(tree) == ["pkg/a.c", "pkg/tool.sh", "setup.py"]

    try:
        _as_another_user(build_twice)
    finally:
        for directory in (source, source / "pkg"):
            directory.chmod(0o755)
        shutil.rmtree(shared)


def test_links_to_endless_files_are_digested_by_their_names(tmp_path: Path) -> None:
    """/proc/self/pagemap says it is a regular file of 0 bytes and reads on for the
    whole address space; /dev/zero never ends. The copy keeps both as links, and the
    digest reads neither past the size they give (a hang here is the regression)."""
    pristine = write(tmp_path / "pristine", SOURCE)
    (pristine / "pagemap.bin").symlink_to("/proc/self/pagemap")
    (pristine / "zero.bin").symlink_to("/dev/zero")
    (pristine / "inside.py").symlink_to("src/pkg/__init__.py")
    first = source_digest(pristine)
    copy = tmp_path / "copy"
    assert copy_tree(pristine, copy) == first == source_digest(copy)
    assert (copy / "pagemap.bin").readlink() == Path("/proc/self/pagemap")
    assert (copy / "zero.bin").readlink() == Path("/dev/zero")
    (pristine / "zero.bin").unlink()
    (pristine / "zero.bin").symlink_to("/dev/null")
    assert source_digest(pristine) != first  # where a link leads counts


def test_a_file_swapped_for_a_fifo_during_the_copy_is_refused_by_name_and_never_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy reads a file through one descriptor of the regular file it listed. Here
    `setup.py` was a regular file when the copy listed it (the listing's lstat is made to
    say so) and is a fifo when it is read: the copy does not block on it, and its error
    names the file."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    swapped = source / "setup.py"
    os.mkfifo(swapped)
    real_lstat = os.lstat

    def listed_as_regular(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        status = real_lstat(path, *args, **kwargs)
        if os.fspath(path) == os.fspath(swapped):
            return os.stat_result((0o100644, *tuple(status)[1:]))
        return status

    monkeypatch.setattr(os, "lstat", listed_as_regular)
    with pytest.raises(SourceError) as raised:
        copy_tree(source, tmp_path / "copy")
    message = str(raised.value)
    assert message.startswith(f"Copying the source {source} for the build failed: {swapped}: ")
    assert "not a regular file" in message
