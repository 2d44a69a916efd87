"""A script's run in its own copy of the machine: every write lands in the run's scratch folder,
every process it starts ends with the run.

The measurement child enters new mount and pid namespaces (unshare(2)), forks the process that
runs the script (pid 1 of its namespace), and there lays an overlay over each file system the
script could write: the machine's files are the lower layer, read as they are; the upper layer is
a folder in the run's scratch, where every write goes, from Python or C, from the script or any
process it starts, through any path. The script reads its own writes back; the real files never
change. When pid 1 ends, the kernel ends every other process of its namespace, a helper started
in a new session too; and pid 1 dies with the process that forked it (PR_SET_PDEATHSIG), which
dies with advisor, so `kill -9` of advisor ends them all. The namespaces and their mounts go
with their last process. Devices (GPUs), the network and the user's identity stay as they are.

Hooks inside the interpreter time the steps and apply the plan; they never protect files.
Linux only. A user without root enters a user namespace first, where the kernel refuses to
overlay a file system holding mounts inherited from the machine (/ always holds some): there
the copy is built folder by folder (`walked`). `unavailable()`, which builds the whole copy
once, says why not before anything runs.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from pathlib import Path
from typing import Callable, Optional

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER = 0x00020000, 0x20000000, 0x10000000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
# file systems that hold no user files: the kernel's own views, bound into the copy as they are
VIRTUAL = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "mqueue", "debugfs", "tracefs",
                     "securityfs", "pstore", "bpf", "configfs", "fusectl", "hugetlbfs", "binfmt_misc", "autofs",
                     "rpc_pipefs", "nsfs", "efivarfs", "selinuxfs"})
KERNEL_TREES = ("/proc", "/sys", "/dev")  # bound (or mounted anew) whole
FOLDER = "sandbox"  # inside the run's scratch: the layers and the copy's root

_libc = None
_unavailable: Optional[str] = None
_probed = False


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def call(name: str, *args) -> None:
    if getattr(libc(), name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def mount(source: Optional[str], target: str, fstype: Optional[str], flags: int, data: Optional[str] = None) -> None:
    encode = lambda value: value.encode() if value is not None else None  # noqa: E731
    call("mount", encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))


def unavailable() -> Optional[str]:
    """Why a script cannot run in a copy of the machine here, in words; None where it can.
    Probed once, in a child that does what a run does: new namespaces, then the whole copy
    (an overlay of an empty folder can pass where the copy of / cannot: without root, the
    kernel refuses to overlay a file system that holds mounts inherited from the machine)."""
    global _unavailable, _probed
    if _probed:
        return _unavailable
    _probed = True
    if not sys.platform.startswith("linux"):
        _unavailable = f"mount and pid namespaces are Linux's, and this is {sys.platform}"
        return _unavailable
    import tempfile

    with tempfile.TemporaryDirectory(prefix="advisor-sandbox-probe-") as folder:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the probe: namespaces, then the copy a run builds (gone with this process)
            os.close(read)
            try:
                enter_namespaces()
                if os.fork() == 0:  # the copy is built by pid 1 of the new namespace, as a run's is
                    try:
                        build_root(Path(folder))
                        message = b""
                    except OSError as exc:
                        message = (exc.strerror or str(exc)).encode()[:500]
                    os.write(write, message)
                    os._exit(0)
                os.wait()
            except OSError as exc:
                os.write(write, (exc.strerror or str(exc)).encode()[:500])
            os._exit(0)
        os.close(write)
        message = os.read(read, 1000).decode()
        os.close(read)
        os.waitpid(pid, 0)
    _unavailable = message or None
    return _unavailable


def enter_namespaces() -> None:
    """New mount and pid namespaces for this process (the pid one for its children); without
    root, inside a new user namespace that maps the user to themself."""
    flags = CLONE_NEWNS | CLONE_NEWPID
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        flags |= CLONE_NEWUSER
    call("unshare", ctypes.c_int(flags))
    if uid != 0:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the machine's namespace


def overlay(lower: str, upper: Path, work: Path, target: str) -> None:
    try:
        mount("overlay", target, "overlay", 0, f"lowerdir={lower},upperdir={upper},workdir={work}")
    except OSError as exc:
        raise OSError(exc.errno, f"an overlay of {lower} cannot be mounted ({exc.strerror})") from None


def mounts() -> list[tuple[str, str, bool]]:
    """This namespace's mounts, parents first: (mount point, file system type, read-only)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        point = fields[4].encode().decode("unicode_escape")  # "\040" for a space
        options = fields[5].split(",")
        found.append((point, fields[separator + 1], "ro" in options))
    return found


def enter(scratch: str, kept: Optional[Callable[[], dict[str, str]]] = None) -> None:
    """Moves this measurement child into its copy of the machine. Returns in the process that
    runs the script (pid 1 of the new namespace, its root the copy, its folder the same); the
    process that forked it waits for it and exits with its status, never returning. The
    copy's layers live in `scratch/sandbox`; `scratch` itself stays the real folder (the run's
    result, log and progress files are written there). `kept`: as `build_root`'s."""
    enter_namespaces()
    become_pid_one()
    move_into_copy(scratch, kept)


def become_pid_one() -> None:
    """Forks pid 1 of the namespaces just entered and returns in it; this process stays outside,
    waits for it and exits with its status, never returning. An interpreter started ahead of a
    script's run does this before its imports: unshare(2) refuses a user namespace (which a user
    without root enters) to a process of several threads, and importing torch starts threads."""
    from advisor.harness.lifetime import die_with_parent

    pid = os.fork()
    if pid != 0:  # stays outside the copy, waits for the run
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
    die_with_parent()  # pid 1: its end ends every process of the namespace


def move_into_copy(scratch: str, kept: Optional[Callable[[], dict[str, str]]] = None) -> None:
    """Builds the run's copy of the machine (its layers in `scratch`) and makes it this process's
    root, in the same folder as before. `kept`: as `build_root`'s, asked here, in the namespaces
    entered (working the paths out may import torch, whose threads would make unshare(2) refuse
    a user namespace)."""
    here = os.getcwd()
    root = build_root(Path(scratch), kept() if kept else None)
    os.chroot(root)
    os.chdir(here)


def build_root(scratch: Path, kept: Optional[dict[str, str]] = None) -> str:
    """The copy: an overlay of every writable file system (its upper layer under `scratch`), the
    read-only ones and the kernel's views bound as they are, /proc anew for the pid namespace,
    /dev/shm a tmpfs of its own, and `scratch` bound back in as the real folder. `kept`: paths
    whose writes the session's runs keep for each other (torch.compile's cache), each in a
    folder of advisor's (`kept_across_runs`)."""
    layers = scratch / FOLDER
    root = layers / "root"
    root.mkdir(parents=True)
    planned = mounts()
    points = [point for point, _, _ in planned]
    for point, fstype, read_only in planned:
        if point.startswith(str(layers)) or within(point, KERNEL_TREES) or fstype in VIRTUAL:
            continue
        target = str(root) + ("" if point == "/" else point)
        if not os.path.isdir(target):
            continue  # a file bind-mounted over a file, or a point under a folder not copied
        if read_only:
            mount(point, target, None, MS_BIND | MS_REC)
        elif os.geteuid() == 0 or not mounts_under(point, points):
            layered(point, target, layers)
        else:  # in a user namespace the kernel will not overlay a mount that has others on it
            walked(point, target, layers, points)
    for tree in ("/dev", "/sys"):
        mount(tree, str(root) + tree, None, MS_BIND | MS_REC)
    mount("proc", str(root) + "/proc", "proc", 0)
    if os.path.isdir(str(root) + "/dev/shm"):
        mount("tmpfs", str(root) + "/dev/shm", "tmpfs", 0, "mode=1777")
    mount(str(scratch), str(root) + str(scratch), None, MS_BIND)
    for path, folder in (kept or {}).items():
        kept_across_runs(str(root), path, Path(folder))
    return str(root)


def kept_across_runs(root: str, path: str, folder: Path) -> None:
    """`path`, in the copy at `root`, written through to `folder`: over the machine's files there
    (read beneath, never changed) an overlay whose upper layer lies in `folder`; where the machine
    has no such folder, `folder`'s layer itself. One run at a time holds it (a lock this process
    keeps until it ends: two overlays over one upper layer see each other's writes undefined);
    another run of the session at that moment, or one where it cannot be mounted, keeps its
    writes there in its own copy, as everywhere else."""
    upper, work = folder / "upper", folder / "work"
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    if not held_alone(folder / "lock"):
        return
    try:
        if os.path.isdir(path):
            overlay(path, upper, work, root + path)
        else:
            os.makedirs(root + path, exist_ok=True)
            mount(str(upper), root + path, None, MS_BIND)
    except OSError:
        pass


_held: list[int] = []  # the locks this process holds for as long as it lives


def held_alone(lock: Path) -> bool:
    """Whether this process now holds `lock` (flock(2), not waited for), until it ends."""
    import fcntl

    handle = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(handle)
        return False
    _held.append(handle)
    return True


def layered(lower: str, target: str, layers: Path) -> None:
    """`lower` seen copy-on-write at `target`: an overlay whose upper layer (numbered, with the
    path it covers beside it, for `writes`) lies in the run's layers."""
    index = sum(1 for _ in (layers / "upper").glob("*.point")) if (layers / "upper").is_dir() else 0
    upper, work = layers / "upper" / str(index), layers / "work" / str(index)
    upper.mkdir(parents=True)
    work.mkdir(parents=True)
    overlay(lower, upper, work, target)
    (layers / "upper" / f"{index}.point").write_text(lower)


def mounts_under(folder: str, points: list[str]) -> bool:
    """Whether another mount lies below `folder`."""
    prefix = folder.rstrip("/") + "/"
    return any(point != folder and point.startswith(prefix) for point in points)


def walked(folder: str, target: str, layers: Path, points: list[str]) -> None:
    """`folder`, which holds other mounts, copied entry by entry at `target` (a user namespace
    cannot overlay it whole): each folder with no mount under it an overlay of its own, each
    folder that holds one walked in turn, the mount points themselves left as empty folders for
    the mounts' own turn, links made again, files copied (their writes land in the copy)."""
    import shutil

    try:
        entries = list(os.scandir(folder))
    except OSError:
        return  # a folder this user cannot read: left empty, as the user would find it
    for entry in entries:
        path, inside = entry.path, os.path.join(target, entry.name)
        try:
            if entry.is_symlink():
                os.symlink(os.readlink(path), inside)
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(inside, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) | stat.S_IRWXU)
                if path in points or within(path, KERNEL_TREES):
                    continue  # the mount's own turn (or the kernel's views) fills it
                if mounts_under(path, points):
                    walked(path, inside, layers, points)
                else:
                    layered(path, inside, layers)
            elif entry.is_file(follow_symlinks=False):
                shutil.copy2(path, inside)
        except OSError:
            continue  # unreadable to this user: absent in the copy, as good as unreadable


def within(path: str, trees: tuple[str, ...]) -> bool:
    return any(path == tree or path.startswith(tree + "/") for tree in trees)


def writes(scratch: str) -> list[dict]:
    """What the run wrote, from the upper layers: each file written or created (with its size),
    each path deleted, each folder replaced whole; real paths, sorted."""
    upper = Path(scratch) / FOLDER / "upper"
    found = []
    if not upper.is_dir():
        return found
    for layer in sorted(p for p in upper.iterdir() if p.is_dir()):
        point = (upper / f"{layer.name}.point").read_text()
        for folder, names, files in os.walk(layer):
            for name in [*names, *files]:
                path = Path(folder) / name
                real = os.path.join(point, os.path.relpath(path, layer))
                info = path.lstat()
                if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:  # overlayfs's whiteout: deleted below
                    found.append({"path": real, "change": "deleted"})
                elif stat.S_ISDIR(info.st_mode) and opaque(path):
                    found.append({"path": real, "change": "replaced"})
                elif not stat.S_ISDIR(info.st_mode):
                    found.append({"path": real, "change": "written", "bytes": info.st_size})
    return sorted(found, key=lambda entry: entry["path"])


def opaque(folder: Path) -> bool:
    """Whether overlayfs marked a folder as replaced whole (removed, then made again)."""
    for name in ("trusted.overlay.opaque", "user.overlay.opaque"):
        try:
            if os.getxattr(folder, name) == b"y":
                return True
        except OSError:
            continue
    return False


def describe(entry: dict) -> str:
    """One write, as the report lists it."""
    if entry["change"] == "written":
        return f"{entry['path']} ({entry['bytes']:,} bytes)"
    return f"{entry['path']} ({entry['change']})"
