"""Soft-RoCE lab: real rxe verbs devices in QEMU VMs (TCG, no KVM, no RDMA
hardware) that run the host's own binaries from a read-only 9p root.

  lab.sh prepare [--refresh]          fetch the Debian kernel, build the initramfs (cached)
  lab.sh up one|two|fabric [--forward GUESTPORT]...
                                      boot the VMs and wait until they are ready; fabric:
                                      VMs A-D, A and B on switch leaf1, C and D on leaf2
  lab.sh exec [OPTIONS] A|B -- CMD... run CMD in a VM; its output and exit status
  lab.sh spawn [OPTIONS] A|B -- CMD...
                                      start CMD in the background in a VM; prints its job name
      OPTIONS: --timeout SECS (exec: 300, spawn: none; 0 = none)  --cwd DIR (default: $PWD)
               --env NAME=VALUE  --name JOB (spawn)  --background (exec = spawn)
      exec exits with CMD's status, 124 on timeout, 125 when the lab fails.
  lab.sh jobs A|B                     list the jobs of a VM
  lab.sh wait [--timeout SECS] A|B JOB
                                      wait for a job, print its output, return its status
  lab.sh output [--stderr] A|B JOB    print a job's output so far
  lab.sh kill A|B JOB                 stop a job (SIGTERM, then SIGKILL); its output stays
  lab.sh port A|B GUESTPORT           host port forwarded to GUESTPORT of the VM
  lab.sh addr A|B                     the VM's RDMA address (10.99.0.x)
  lab.sh gid A|B                      rxe0's RoCE v2 GID index for that address
  lab.sh link A|B [up|down]           cut (down) or restore (up) a VM's cable to the lab
                                      link, as a pulled cable; no argument: print its state
  lab.sh nic A|B                      QEMU's side of the VM's lab NIC: netdev, virtqueue indices
  lab.sh capture A|B start FILE | stop
                                      record every frame the VM's lab NIC sends and receives
                                      (QEMU's filter-dump on netdev n0) into FILE, a pcap
  lab.sh trunk [up|down]              fabric: cut or restore the link between the switches
  lab.sh console A|B                  the VM's console log
  lab.sh reset                        end every job in every VM and forget them all (the
                                      lab as booted, for the next user of a shared lab)
  lab.sh status                       state of the lab (exit 0 up, 3 down)
  lab.sh down                         stop the VMs and remove the runtime state

See README.md beside this script.
"""

# The text above is the usage message (`lab.sh help`); README.md beside this script explains the
# lab. lab.sh is a wrapper that runs this file; every message still names the commands lab.sh.

from __future__ import annotations

# json and socket (QMP), ctypes, mmap and platform (the TSC), hashlib and tempfile (building the
# kernel and initramfs) are imported where they are used: a lab test runs lab.sh hundreds of
# times, mostly for a query that needs none of them, and together they cost 20 ms a start.
import fcntl
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def env(name: str, default: str) -> str:
    """The value of ${NAME:-DEFAULT}: an empty variable counts as unset, as in the shell."""
    return os.environ.get(name) or default


LAB_DIR = Path(__file__).resolve().parent
CACHE_DIR = env("IBPROBE_LAB_CACHE",
                env("XDG_CACHE_HOME", os.environ.get("HOME", "") + "/.cache") + "/ibprobe-lab")
# Kept as strings, as given: they appear in messages, in QEMU's arguments and in the check that
# a pid is this lab's QEMU.
STATE_DIR = env("IBPROBE_LAB_STATE", env("TMPDIR", "/tmp") + "/ibprobe-lab")
RUN_DIR = STATE_DIR + "/run"
LOG_DIR = STATE_DIR + "/logs"

VM_MEM_MB = env("IBPROBE_LAB_MEM", "1024")
# Four VMs share the host; the exporter and the tools need far less.
FABRIC_VM_MEM_MB = env("IBPROBE_LAB_MEM", "512")
FABRIC_HOSTS = ("A", "B", "C", "D")
# Without ERMS and FSRM the guest's kernel and glibc copy with rep movsq or vector moves instead of
# rep movsb, which TCG runs a byte at a time: ib_write_bw with 64 KiB messages moves 30 MB/s
# between two VMs instead of 18.
VM_CPU = env("IBPROBE_LAB_CPU", "max,-erms,-fsrm")
BOOT_TIMEOUT = env("IBPROBE_LAB_BOOT_TIMEOUT", "150")
EXEC_TIMEOUT_DEFAULT = 300
PICKUP_TIMEOUT = 30  # seconds for the VM agent to start a job
EXEC_GRACE = 15  # seconds past a job timeout before the VM counts as hung
# How often the job commands look for the agent's files (pid, rc): a job of its own takes about
# 0.25 s, and a pause of 20 ms costs no process.
POLL_SECONDS = 0.02
PORT_BASE = env("IBPROBE_LAB_PORT_BASE", "17470")

LAB_MODULES = ("rdma_rxe", "ib_umad", "ib_uverbs", "rdma_ucm", "9pnet_virtio", "9p", "virtio_pci",
               "virtio_net", "virtio_console", "veth", "dummy", "crc32_generic", "sch_netem")
LAB_HOST_PACKAGES = ("qemu-system-x86", "busybox-static", "kmod", "cpio", "iproute2")
LAB_GUEST_TOOL_PACKAGES = ("rdma-core", "ibverbs-providers", "ibverbs-utils", "perftest", "ethtool")

# Exit statuses of exec/wait besides the command's own.
RC_TIMEOUT = 124
RC_LAB_FAILURE = 125
RC_STATUS_DOWN = 3

HOST_INDEX = {"A": 1, "B": 2, "C": 3, "D": 4}

# An output of a job: the caller's stdout or stderr, or a buffer when the lab reads it itself.
Sink = Callable[[bytes], None]

# ---------------------------------------------------------------------------
# helpers


class LabExit(Exception):
    """Ends the command with STATUS (its message already printed); main() turns it into the
    exit status, so that a step of `up` can catch it and take the lab down first."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def say(message: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"lab: {message}\n")
    sys.stderr.flush()


def die(message: str) -> LabExit:
    """Prints the error; the caller raises what it returns (`raise die(...)`), which keeps the
    control flow visible to the reader and to type checkers."""
    say(f"error: {message}")
    return LabExit(1)


def usage(status: int = 2) -> LabExit:
    sys.stderr.write(__doc__ or "")
    return LabExit(status)


def out(text: str) -> None:
    """One line (or more) of the command's own output on stdout."""
    sys.stdout.write(text)


def copy_out(fd: int, data: bytes) -> None:
    """Copies a job's output or a file to stdout (fd 1) or stderr (fd 2). A reader that went away
    ends the copy but not the command: `exec ... | head -1` still ends its job and returns its
    status."""
    (sys.stdout if fd == 1 else sys.stderr).flush()
    try:
        while data:
            data = data[os.write(fd, data):]
    except BrokenPipeError:
        pass


def to_stdout(data: bytes) -> None:
    copy_out(1, data)


def to_stderr(data: bytes) -> None:
    copy_out(2, data)


def discard(_data: bytes) -> None:
    pass


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def elapsed_s(start_ms: int) -> str:
    ms = now_ms() - start_ms
    return f"{ms // 1000}.{ms % 1000 // 100}"


def read_text(path: str | Path) -> str | None:
    """The file's content without its trailing newlines, as $(<FILE); None when unreadable."""
    try:
        return Path(path).read_text(errors="surrogateescape").rstrip("\n")
    except OSError:
        return None


def read_word(path: str | Path) -> str | None:
    """The first line of the file without surrounding blanks, as `read -r VAR <FILE`."""
    text = read_text(path)
    return None if text is None else text.split("\n", 1)[0].strip(" \t")


def non_empty(path: str | Path) -> bool:
    """[[ -s FILE ]]: the agent writes pid and rc with one write each, so a non-empty file is a
    complete one."""
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False


def touch(path: str | Path) -> None:
    """`: >FILE`"""
    with open(path, "wb"):
        pass


def tail_lines(data: bytes, count: int) -> bytes:
    """The last COUNT lines of DATA, as `tail -n COUNT`."""
    lines = data.split(b"\n")
    ends_with_newline = lines[-1] == b""
    if ends_with_newline:
        lines.pop()
    kept = lines[-count:] if count > 0 else []
    text = b"\n".join(kept)
    return text + b"\n" if ends_with_newline and kept else text


# The characters bash's printf %q escapes with a backslash (bstab in bash's lib/sh/shquote.c).
_BASH_BACKSLASHED = frozenset(" \t\n!\"$&'()*,;<>?[\\]^`{|}")
_BASH_ANSI_C_ESCAPES = {"\x1b": "\\E", "\a": "\\a", "\v": "\\v", "\b": "\\b", "\f": "\\f",
                        "\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\", "'": "\\'"}


def bash_quote(word: str) -> str:
    """WORD quoted as bash's printf %q quotes it: a job file is a bash script that the guest
    agent sources, and `jobs` and the timeout message show a job's command as it is written
    there (qemu.cmdline, too, reads as a shell command)."""
    if word == "":
        return "''"
    if not word.isprintable():
        quoted = []
        for char in word:
            if char in _BASH_ANSI_C_ESCAPES:
                quoted.append(_BASH_ANSI_C_ESCAPES[char])
            elif char.isprintable():
                quoted.append(char)
            else:
                quoted.extend(f"\\{byte:03o}" for byte in os.fsencode(char))
        return "$'" + "".join(quoted) + "'"
    quoted = []
    for i, char in enumerate(word):
        if (char in _BASH_BACKSLASHED or (char == "#" and i == 0)
                or (char == "~" and (i == 0 or word[i - 1] in ":="))):
            quoted.append("\\")
        quoted.append(char)
    return "".join(quoted)


def caller_dir() -> str:
    """The caller's directory as the shell's $PWD has it: the logical path (symlinks kept) when
    it still names the current directory, and the imported value when the directory is gone (a
    job then falls back to / in the VM)."""
    pwd = os.environ.get("PWD", "")
    if pwd.startswith("/"):
        try:
            if os.path.samestat(os.stat(pwd), os.stat(".")):
                return pwd
        except OSError:
            pass
    try:
        return os.getcwd()
    except OSError:
        return pwd


def pid_alive(pid: int) -> bool:
    """A daemonized qemu is not our child: once it exits it may linger as a zombie until init
    reaps it, which counts as gone."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return not stat_line.rsplit(") ", 1)[-1].startswith("Z")


def pid_if_ours(pidfile: str, marker: str) -> int | None:
    """The pid in PIDFILE if that process's command line holds MARKER: a recycled pid is not
    this lab's process."""
    pid = read_word(pidfile)
    if pid is None or not re.fullmatch(r"[0-9]+", pid):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return None
    return int(pid) if os.fsencode(marker) in cmdline else None


def terminate(pid: int) -> bool:
    """SIGTERM, and SIGKILL when the process is still there 5 s later; whether it is gone
    within 2 s of that."""
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return True
    for _ in range(50):
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    for _ in range(20):
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


# ---------------------------------------------------------------------------
# the lab's VMs and their state


def fabric_lab() -> bool:
    return read_text(f"{RUN_DIR}/mode") == "fabric"


def validate_host(host: str) -> None:
    if host in ("A", "B") or (host in ("C", "D") and fabric_lab()):
        return
    raise die(f"unknown VM '{host}' (expected A or B)")


def vm_dir(host: str) -> str:
    return f"{RUN_DIR}/{host}"


def xchg_dir(host: str) -> str:
    return f"{RUN_DIR}/{host}/xchg"


def jobs_dir(host: str) -> str:
    return f"{RUN_DIR}/{host}/xchg/jobs"


def console_log(host: str) -> str:
    return f"{LOG_DIR}/{host}.console.log"


def vm_pid(host: str) -> int | None:
    """The pid of the VM's qemu if it is running."""
    return pid_if_ours(f"{vm_dir(host)}/qemu.pid", f"{RUN_DIR}/{host}/")


def vm_running(host: str) -> bool:
    return vm_pid(host) is not None


def lab_hosts() -> list[str] | None:
    """The hosts of the running (or last started) lab."""
    return {"one": ["A"], "two": ["A", "B"],
            "fabric": list(FABRIC_HOSTS)}.get(read_word(f"{RUN_DIR}/mode") or "")


def console_tail(host: str, lines: int = 25) -> None:
    log = console_log(host)
    try:
        data = Path(log).read_bytes()
    except OSError:
        data = b""
    if not data:
        to_stderr(f"(console log {log} is empty)\n".encode())
        return
    to_stderr(f"---- last {lines} lines of {log} ----\n".encode())
    to_stderr(tail_lines(data, lines).replace(b"\r", b""))
    to_stderr(b"----\n")


def require_vm(host: str) -> None:
    validate_host(host)
    if vm_running(host):
        return
    if os.path.exists(f"{vm_dir(host)}/qemu.pid"):
        say(f"error: VM {host} has stopped")
        console_tail(host, 10)
    else:
        say(f"error: VM {host} is not running (lab.sh up first; state {STATE_DIR})")
    raise LabExit(RC_LAB_FAILURE)


def job_listing(dir_path: str) -> list[str]:
    """The job directories of a VM, as the glob JOBS/*/ lists them (hidden ones left out)."""
    try:
        return sorted(entry.name for entry in os.scandir(dir_path)
                      if not entry.name.startswith(".") and entry.is_dir())
    except OSError:
        return []


def job_command(job: str) -> str:
    """The command of a job as job.sh's last line has it, without its leading `exec `."""
    try:
        lines = Path(f"{job}/job.sh").read_bytes().split(b"\n")
    except OSError:
        return ""
    if lines and lines[-1] == b"":
        lines.pop()
    return os.fsdecode(lines[-1][5:]) if lines else ""


# ---------------------------------------------------------------------------
# prepare: the kernel and the initramfs, cached


def lab_install_deps() -> None:
    missing = []
    for package in LAB_HOST_PACKAGES + LAB_GUEST_TOOL_PACKAGES:
        query = subprocess.run(["dpkg-query", "-W", "-f=${Status}\n", package],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               check=False)
        if "install ok installed" not in query.stdout:
            missing.append(package)
    if not missing:
        return
    names = " ".join(missing)
    if os.geteuid() != 0:
        raise die(f"missing packages: {names} (run as root, or: apt-get install {names})")
    say(f"installing {names}")
    install = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    apt_env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if subprocess.run(install, env=apt_env, stdout=sys.stderr, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], stdout=sys.stderr, check=False)
        if subprocess.run(install, env=apt_env, stdout=sys.stderr, check=False).returncode != 0:
            raise die(f"apt-get install {names} failed")


def resolve_kernel_abi() -> str | None:
    """The ABI (e.g. 6.1.0-57-amd64) of Debian's current generic kernel."""
    if os.environ.get("IBPROBE_LAB_KERNEL_ABI"):
        return os.environ["IBPROBE_LAB_KERNEL_ABI"]
    depends = subprocess.run(["apt-cache", "depends", "linux-image-amd64"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             check=False).stdout
    for line in depends.splitlines():
        match = re.fullmatch(r" *Depends: linux-image-([0-9][^ ]*-amd64)(-unsigned)?", line)
        if match:
            return match.group(1)
    return None


def apt_download(package: str, dest_dir: str) -> bool:
    options = []
    # apt drops to the _apt user for downloads; a root-owned cache dir is not
    # writable for it.
    if os.geteuid() == 0:
        options = ["-o", "APT::Sandbox::User=root"]
    return subprocess.run(["apt-get", *options, "download", package], cwd=dest_dir,
                          stdout=sys.stderr, check=False).returncode == 0


def first_match(directory: Path, pattern: str) -> Path | None:
    matches = sorted(directory.glob(pattern))
    return matches[0] if matches else None


def download_kernel_deb(abi: str) -> Path:
    package = f"linux-image-{abi}-unsigned"
    deb_dir = Path(CACHE_DIR, "debs")
    deb_dir.mkdir(parents=True, exist_ok=True)
    deb = first_match(deb_dir, f"{package}_*_amd64.deb")
    if deb is None:
        say(f"downloading {package}")
        if not apt_download(package, str(deb_dir)):
            if os.geteuid() != 0:
                raise die(f"apt-get download {package} failed")
            say("apt-get download failed; refreshing the package lists")
            if subprocess.run(["apt-get", "update"], stdout=sys.stderr, check=False).returncode:
                raise die("apt-get update failed")
            if not apt_download(package, str(deb_dir)):
                raise die(f"apt-get download {package} failed")
        deb = first_match(deb_dir, f"{package}_*_amd64.deb")
        if deb is None:
            raise die(f"{package}: no .deb after download")
    return deb


def busybox_binary() -> str:
    busybox = shutil.which("busybox")
    if busybox is None:
        raise die("busybox not found (apt-get install busybox-static)")
    ldd = subprocess.run(["ldd", busybox], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         check=False)
    if ldd.returncode == 0:
        raise die(f"{busybox} is dynamically linked; the initramfs needs busybox-static")
    return busybox


def sha256_file(path: str | Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def initramfs_key(abi: str) -> str:
    """Everything the initramfs is built from; a change rebuilds it. The text hashed is fixed
    (the ABI, the module list, then the sha256 of guest-init.sh and of busybox, a line each):
    the stamps of the kernels already cached were made from it."""
    import hashlib

    text = (f"abi={abi}\nmodules={' '.join(LAB_MODULES)}\n"
            f"{sha256_file(LAB_DIR / 'guest-init.sh')}\n{sha256_file(busybox_binary())}\n")
    return hashlib.sha256(text.encode()).hexdigest()


def module_root(extracted: Path, abi: str) -> Path:
    """modprobe wants ROOT/lib/modules/VER; newer packages ship usr/lib/modules."""
    modules = extracted / "lib/modules" / abi
    if not modules.is_dir() and (extracted / "usr/lib/modules" / abi).is_dir():
        (extracted / "lib").mkdir(parents=True, exist_ok=True)
        os.symlink("../usr/lib/modules", extracted / "lib/modules")
    if not modules.is_dir():
        raise die(f"kernel package has no modules for {abi}")
    return extracted


def copy_module(source: str, dest_dir: Path) -> str:
    """Copies SOURCE.ko[.xz|.zst|.gz] uncompressed into DEST_DIR; returns its name there."""
    name = os.path.basename(source)
    decompressors = {".xz": ["xz", "-dc"], ".zst": ["zstd", "-qdc"], ".gz": ["gzip", "-dc"]}
    if source.endswith(".ko"):
        shutil.copyfile(source, dest_dir / name)
        return name
    for suffix, command in decompressors.items():
        if source.endswith(".ko" + suffix):
            name = name[: -len(suffix)]
            with open(dest_dir / name, "wb") as dest:
                subprocess.run([*command, source], stdout=dest, check=True)
            return name
    raise die(f"unexpected module file {source}")


def build_initramfs(abi: str, deb: Path, out_dir: Path) -> None:
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="build.", dir=CACHE_DIR))
    try:
        package = work / "pkg"
        say(f"extracting {deb.name}")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(package)], check=True)
        root = module_root(package, abi)
        subprocess.run(["depmod", "-b", str(root), abi], check=True)

        initrd = work / "initrd"
        for sub in ("bin", "etc/lab", "lib/modules", "proc", "sys", "dev", "newroot"):
            (initrd / sub).mkdir(parents=True, exist_ok=True)
        seen: set[str] = set()
        module_lines = []
        for module in LAB_MODULES:
            deps = subprocess.run(
                ["modprobe", "-d", str(root), "-S", abi, "--show-depends", module],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
            if deps.returncode != 0:
                raise die(f"kernel {abi} lacks module {module}: {deps.stdout.rstrip(chr(10))}")
            for line in deps.stdout.rstrip("\n").split("\n"):
                line = line.strip()
                if line.startswith("builtin "):
                    continue
                if not line.startswith("insmod "):
                    raise die(f"unexpected modprobe output for {module}: {line}")
                ko, _, params = line[len("insmod "):].partition(" ")
                if ko in seen:
                    continue
                seen.add(ko)
                module_lines.append(f"{copy_module(ko, initrd / 'lib/modules')} {params}\n")
        (initrd / "etc/lab/modules").write_text("".join(module_lines))
        shutil.copy(busybox_binary(), initrd / "bin/busybox")
        shutil.copyfile(LAB_DIR / "guest-init.sh", initrd / "init")
        os.chmod(initrd / "init", 0o755)

        vmlinuz = package / "boot" / f"vmlinuz-{abi}"
        if not vmlinuz.exists():
            raise die(f"kernel package has no vmlinuz-{abi}")
        new = Path(f"{out_dir}.new")
        new.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(vmlinuz, new / "vmlinuz")
        # The archive lists its paths sorted bytewise (as LC_ALL=C sort -z sorts them).
        listing = subprocess.run(["find", ".", "-print0"], cwd=initrd, stdout=subprocess.PIPE,
                                 check=True).stdout
        paths = sorted(p for p in listing.split(b"\0") if p)
        with open(new / "initramfs.cpio", "wb") as archive:
            subprocess.run(["cpio", "--null", "-o", "-H", "newc", "--quiet"], cwd=initrd,
                           input=b"".join(p + b"\0" for p in paths), stdout=archive, check=True)
        shutil.copyfile(initrd / "etc/lab/modules", new / "modules.txt")
        shutil.rmtree(out_dir, ignore_errors=True)
        os.rename(new, out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def version_key(text: str) -> list:
    """A sort key that orders embedded numbers by value, as `sort -V` does for these names."""
    return [(0, int(part)) if part.isdigit() else (1, part)
            for part in re.split(r"(\d+)", text) if part]


def cached_kernel_abi() -> str | None:
    """The newest kernel already in the cache (offline fallback)."""
    debs = sorted(Path(CACHE_DIR, "debs").glob("linux-image-*-amd64-unsigned_*_amd64.deb"),
                  key=lambda p: version_key(str(p)))
    if not debs:
        return None
    name = debs[-1].name[len("linux-image-"):]
    return name.split("-unsigned_", 1)[0]


def choose_kernel_abi() -> str:
    abi = resolve_kernel_abi()
    if abi:
        return abi
    if os.geteuid() == 0:
        say("no package lists for linux-image-amd64; running apt-get update")
        subprocess.run(["apt-get", "update"], stdout=sys.stderr, check=False)
        abi = resolve_kernel_abi()
        if abi:
            return abi
    abi = cached_kernel_abi()
    if abi:
        say(f"warning: linux-image-amd64 unknown to apt; using the cached kernel {abi}")
        return abi
    raise die("cannot resolve the kernel ABI (set IBPROBE_LAB_KERNEL_ABI, e.g. 6.1.0-57-amd64)")


def lock_cache() -> int:
    """Takes the cache's lock (one prepare at a time); returns its descriptor, which holds it
    until closed (at exit, or by `up` once the kernel is ready)."""
    fd = os.open(f"{CACHE_DIR}/.lock", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    deadline = time.monotonic() + 600
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise die(f"another prepare holds {CACHE_DIR}/.lock") from None
            time.sleep(0.1)


def prepare(refresh: bool) -> int:
    """Makes sure the cache has a kernel and an initramfs built from the current inputs;
    returns the cache lock's descriptor."""
    os.makedirs(CACHE_DIR, exist_ok=True)
    lock_fd = lock_cache()
    # Leftovers of an interrupted build.
    for leftover in [*Path(CACHE_DIR).glob("build.*"), *Path(CACHE_DIR).glob("kernels/*.new")]:
        shutil.rmtree(leftover, ignore_errors=True)

    abi = ""
    current = Path(CACHE_DIR, "current")
    wanted_abi = os.environ.get("IBPROBE_LAB_KERNEL_ABI", "")
    # Fast path: the kernel in use stays until --refresh or an explicit ABI.
    if not refresh and os.access(current / "abi", os.R_OK):
        abi = read_word(current / "abi") or ""
        if wanted_abi and wanted_abi != abi:
            abi = ""
    if abi and read_text(current / "stamp") == initramfs_key(abi):
        return lock_fd

    start = now_ms()
    lab_install_deps()
    abi = abi or choose_kernel_abi()
    kernel_dir = Path(CACHE_DIR, "kernels", abi)
    deb = download_kernel_deb(abi)
    kernel_dir.parent.mkdir(parents=True, exist_ok=True)
    build_initramfs(abi, deb, kernel_dir)
    (kernel_dir / "abi").write_text(abi + "\n")
    (kernel_dir / "stamp").write_text(initramfs_key(abi) + "\n")
    new_link = Path(f"{current}.new")
    if new_link.is_symlink() or new_link.exists():
        new_link.unlink()
    os.symlink(f"kernels/{abi}", new_link)
    os.replace(new_link, current)
    modules = (kernel_dir / "modules.txt").read_text().count("\n")
    say(f"prepared kernel {abi} ({modules} modules) in {elapsed_s(start)} s: {kernel_dir}")
    return lock_fd


def cmd_prepare(args: list[str]) -> int:
    refresh = False
    for arg in args:
        if arg != "--refresh":
            raise usage()
        refresh = True
    prepare(refresh)
    return 0


# ---------------------------------------------------------------------------
# up / down / status


def listening_ports() -> set[int]:
    """The TCP ports something listens on in this network namespace (what `ss -tln` lists)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def new_socket_dir() -> str:
    """The directory of the lab's unix sockets (the lab link, each VM's QMP monitor); sun_path
    holds 107 bytes, so a deep state dir gets a short directory of its own (removed by down)."""
    if len(RUN_DIR) <= 90:
        return RUN_DIR
    import tempfile

    directory = tempfile.mkdtemp(prefix="ibprobe-lab.", dir=env("TMPDIR", "/tmp"))
    Path(RUN_DIR, "sockdir").write_text(directory + "\n")
    return directory


def socket_dir() -> str:
    return read_text(f"{RUN_DIR}/sockdir") or RUN_DIR


def remove_socket_dir() -> None:
    directory = read_text(f"{RUN_DIR}/sockdir")
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


class PortPicker:
    """Free TCP ports on 127.0.0.1, each handed out once per `up`."""

    def __init__(self) -> None:
        self.taken: set[int] = set()

    def pick(self, preferred: str = "") -> int:
        if preferred:
            if not re.fullmatch(r"[0-9]+", preferred):
                raise die(f"bad port '{preferred}'")
            port = int(preferred)
            if port in listening_ports():
                raise die(f"port {preferred} is in use")
        else:
            base = int(PORT_BASE)
            in_use = listening_ports()
            port = next((p for p in range(base, base + 2000)
                         if p not in self.taken and p not in in_use), None)
            if port is None:
                raise die(f"no free port in {base}..{base + 1999}")
        self.taken.add(port)
        return port


def switch_of(host: str) -> str:
    return "leaf1" if host in ("A", "B") else "leaf2"


def qemu_command(host: str, mode: str, sock_dir: str, forwards: list[tuple[str, int]],
                 smp: str, mem: str, tsc_khz: str) -> list[str]:
    """QEMU's command line for HOST; FORWARDS are (guest port, host port) pairs."""
    index = HOST_INDEX[host]
    kernel_dir = f"{CACHE_DIR}/current"
    vdir = vm_dir(host)
    addr = f"10.99.0.{index}/24"
    link_mac = f"52:54:00:99:00:0{index}"
    mgmt_mac = f"52:54:00:98:00:0{index}"
    # loglevel=6: kernel notices and worse reach the console log (a few dozen
    # lines; the emulated UART is slow, full info level costs seconds).
    # TSC as clocksource: under TCG the kernel would fall back to HPET, where every
    # clock_gettime() is a trapped MMIO read costing microseconds, which distorts latency probes.
    # tsc=reliable turns off the watchdog that would catch a wrongly calibrated TSC, so the
    # frequency is given, not calibrated: a VM booting on a busy host once took the PIT's
    # reading (407 MHz against the HPET's 2594 MHz) and its clock ran six times too fast.
    append = "console=ttyS0 panic=-1 loglevel=6 clocksource=tsc tsc=reliable"
    if tsc_khz:
        append += f" tsc_early_khz={tsc_khz}"
    append += f" lab.host={host} lab.mode={mode}"
    append += f" lab.addr={addr} lab.mgmt_mac={mgmt_mac}"
    user = "user,id=u0,restrict=on,net=10.0.2.0/24,ipv6=off"
    for guest_port, host_port in forwards:
        user += f",hostfwd=tcp:127.0.0.1:{host_port}-:{guest_port}"

    args = [
        "qemu-system-x86_64",
        "-name", f"ibprobe-lab-{host}",
        "-machine", "pc", "-accel", "tcg,thread=multi", "-cpu", VM_CPU, "-smp", smp, "-m", mem,
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-serial", f"file:{console_log(host)}",
        "-kernel", f"{kernel_dir}/vmlinuz", "-initrd", f"{kernel_dir}/initramfs.cpio",
        "-virtfs", "local,path=/,mount_tag=hostroot,readonly=on,security_model=passthrough,"
                   "multidevs=remap",
        "-virtfs", "local,path=/usr,mount_tag=hostusr,readonly=on,security_model=passthrough,"
                   "multidevs=remap",
        "-virtfs", f"local,path={vdir}/xchg,mount_tag=xchg,security_model=none,multidevs=remap",
        "-device", "virtio-serial-pci,id=vser", "-chardev", f"pipe,id=wake,path={vdir}/wake",
        "-device", "virtserialport,bus=vser.0,chardev=wake,name=ibprobe-lab.wake",
        "-qmp", f"unix:{sock_dir}/qmp-{host}.sock,server=on,wait=off",
        "-daemonize", "-pidfile", f"{vdir}/qemu.pid",
    ]
    if mode == "two":
        # A unix stream socket between the two qemus: lossless (flow control,
        # where a UDP socket drops under load) and without the Nagle and
        # delayed-ACK stalls of a TCP socket, either of which makes rxe
        # retransmit.
        server = "off" if host == "B" else "on"
        append += f" lab.link_mac={link_mac}"
        args += ["-netdev", f"stream,id=n0,server={server},addr.type=unix,"
                            f"addr.path={sock_dir}/link.sock",
                 "-device", f"virtio-net-pci,id=labnic,netdev=n0,mac={link_mac},romfile="]
    elif mode == "fabric":
        # The same stream framing to a port of the lab switch (lab-switch.pl), which listens
        # before any VM starts. The guest sets its lab NIC up as in two-host mode.
        append = append.replace("lab.mode=fabric", "lab.mode=two", 1)
        append += f" lab.link_mac={link_mac}"
        args += ["-netdev", f"stream,id=n0,server=off,addr.type=unix,"
                            f"addr.path={sock_dir}/port-{host}.sock",
                 "-device", f"virtio-net-pci,id=labnic,netdev=n0,mac={link_mac},romfile="]
    args += ["-netdev", user, "-device", f"virtio-net-pci,netdev=u0,mac={mgmt_mac},romfile=",
             "-append", append]
    return args


def start_vm(host: str, qemu_args: list[str]) -> bool:
    vdir = vm_dir(host)
    os.makedirs(f"{vdir}/xchg/jobs", exist_ok=True)
    os.mkfifo(f"{vdir}/wake.in")
    os.mkfifo(f"{vdir}/wake.out")
    shutil.copyfile(LAB_DIR / "guest-agent.sh", f"{vdir}/xchg/agent.sh")
    touch(console_log(host))
    Path(vdir, "qemu.cmdline").write_text(
        "".join(bash_quote(arg) + " " for arg in qemu_args), errors="surrogateescape")
    with open(f"{vdir}/qemu.stderr", "wb") as qemu_stderr:
        try:
            started = subprocess.run(qemu_args, stderr=qemu_stderr, check=False).returncode == 0
        except OSError as error:  # no qemu-system-x86_64
            qemu_stderr.write(f"{qemu_args[0]}: {error.strerror}\n".encode())
            started = False
    if not started:
        say(f"error: qemu for VM {host} did not start:")
        to_stderr(Path(vdir, "qemu.stderr").read_bytes())
    return started


def wait_until_ready(deadline_ms: int, hosts: list[str]) -> bool:
    while True:
        pending = []
        for host in hosts:
            xchg = xchg_dir(host)
            if os.path.exists(f"{xchg}/ready"):
                continue
            if os.path.exists(f"{xchg}/failed"):
                say(f"error: VM {host} failed to boot: {read_text(f'{xchg}/failed')}")
                console_tail(host)
                return False
            if not vm_running(host):
                say(f"error: VM {host} exited during boot")
                console_tail(host)
                return False
            pending.append(host)
        if not pending:
            return True
        if now_ms() > deadline_ms:
            say(f"error: VM {' '.join(pending)} not ready within {BOOT_TIMEOUT} s "
                "(IBPROBE_LAB_BOOT_TIMEOUT)")
            for host in pending:
                console_tail(host)
            return False
        time.sleep(0.2)


def host_tsc_khz() -> str:
    """The host's TSC frequency in kHz, which a TCG guest's TSC runs at (QEMU reads the host's
    counter for the guest's RDTSC); empty when it cannot be measured (not x86-64)."""
    import ctypes
    import mmap
    import platform

    if platform.machine() != "x86_64":
        return ""
    try:
        # rdtsc; shl rdx, 32; or rax, rdx; ret
        code = bytes([0x0F, 0x31, 0x48, 0xC1, 0xE2, 0x20, 0x48, 0x09, 0xD0, 0xC3])
        page = mmap.mmap(-1, mmap.PAGESIZE,
                         prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(code)
        rdtsc = ctypes.CFUNCTYPE(ctypes.c_uint64)(
            ctypes.addressof(ctypes.c_char.from_buffer(page)))
        rates = []
        for _ in range(5):
            t0, c0 = time.monotonic_ns(), rdtsc()
            time.sleep(0.1)
            c1, t1 = rdtsc(), time.monotonic_ns()
            rates.append((c1 - c0) * 1e6 / (t1 - t0))
        return str(round(sorted(rates)[2]))
    except (OSError, ValueError, TypeError):
        return ""


def guest_uptime(host: str) -> str | None:
    """The first field of the VM's /proc/uptime, None when the VM does not answer."""
    output = bytearray()
    if run_job(host, ["cat", "/proc/uptime"], timeout="30", stdout=output.extend) != 0:
        return None
    return output.decode(errors="replace").split(" ", 1)[0]


def awk_number(text: str) -> float:
    """TEXT as awk reads a number: its numeric prefix, 0 without one."""
    match = re.match(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text)
    return float(match.group(0)) if match else 0.0


def check_clocks(hosts: list[str]) -> bool:
    """Every VM's clock runs at the host's rate: a guest whose clock runs fast times everything
    out early (pings, probes) and sends at a multiple of its configured rates. Guest uptime
    against host time over 4 s. Each uptime read happens somewhere between the host's timestamps
    before and after its exec, which on a loaded host can be a second apart, so the rate is known
    only within bounds: the VM is refused when even the bound nearest to 1 is more than 20 % off."""
    before0, after0, guest0 = {}, {}, {}
    for host in hosts:
        before0[host] = now_ms()
        uptime = guest_uptime(host)
        if uptime is None:
            return False
        after0[host] = now_ms()
        guest0[host] = uptime
    time.sleep(4)
    for host in hosts:
        before = now_ms()
        uptime = guest_uptime(host)
        if uptime is None:
            return False
        longest = now_ms() - before0[host]
        shortest = before - after0[host]
        guest_ms = (awk_number(uptime) - awk_number(guest0[host])) * 1000
        low, high = guest_ms / longest, guest_ms / shortest
        Path(RUN_DIR, f"clock-{host}").write_text(f"{low:.2f}-{high:.2f}\n")
        if not (high >= 0.8 and low <= 1.25):
            say(f"error: VM {host}'s clock runs at {low:.2f}-{high:.2f} times the host's "
                "(TSC calibration, see its console)")
            console_tail(host, 10)
            return False
    return True


def ping_from_a(host: str) -> bool:
    """A reaches HOST: one echo answered of up to three, each waited for 10 s. With a single echo,
    a boot on a host loaded by four other VMs once failed with both VMs ready and nothing in their
    consoles; a link that answers none of three is down, and one that needed more than one echo
    says so in the lab's output."""
    argv = ["busybox", "ping", "-c", "1", "-W", "10", f"10.99.0.{HOST_INDEX[host]}"]
    for attempt in range(1, 4):
        if run_job("A", argv, timeout="30", stdout=discard) == 0:
            if attempt > 1:
                say(f"VM A reached {host} at echo {attempt} of 3")
            return True
    return False


def check_link() -> bool:
    """Two-host mode: A reaches B over the lab link."""
    if ping_from_a("B"):
        return True
    say("error: VM A cannot reach VM B (10.99.0.2) over the lab link")
    console_tail("A", 10)
    console_tail("B", 10)
    return False


def check_fabric() -> bool:
    """Fabric mode: A reaches every other VM, through its switch and the trunk."""
    for host in ("B", "C", "D"):
        if not ping_from_a(host):
            say(f"error: VM A cannot reach VM {host} (10.99.0.{HOST_INDEX[host]}) "
                "over the lab fabric")
            console_tail("A", 10)
            console_tail(host, 10)
            return False
    return True


def switch_pid() -> int | None:
    """The pid of the lab switch if it is running."""
    return pid_if_ours(f"{RUN_DIR}/switch.pid", f"{RUN_DIR}/trunk")


def start_switch(sock_dir: str) -> bool:
    ports = [f"{host}:{switch_of(host)}" for host in FABRIC_HOSTS]
    with open(f"{LOG_DIR}/switch.log", "wb") as log:
        switch = subprocess.Popen(
            ["perl", str(LAB_DIR / "lab-switch.pl"), f"{RUN_DIR}/trunk", sock_dir, *ports],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            start_new_session=True)
    Path(RUN_DIR, "switch.pid").write_text(f"{switch.pid}\n")
    # It listens on every port before it writes its state.
    for _ in range(100):
        if os.access(f"{RUN_DIR}/trunk", os.R_OK) and switch_pid() is not None:
            return True
        if switch.poll() is not None:
            break
        time.sleep(0.1)
    say(f"error: the lab switch did not start: {read_text(f'{LOG_DIR}/switch.log') or ''}")
    return False


def stop_switch() -> None:
    pid = switch_pid()
    if pid is not None:
        terminate(pid)


def stop_vm(host: str) -> bool:
    pid = vm_pid(host)
    if pid is None:
        return True
    if terminate(pid):
        return True
    say(f"warning: qemu pid {pid} of VM {host} did not exit")
    return False


def down() -> int:
    rc = 0
    for host in FABRIC_HOSTS:
        if vm_running(host):
            if not stop_vm(host):
                rc = 1
            say(f"VM {host} stopped")
    stop_switch()
    if rc == 0:
        remove_socket_dir()
        shutil.rmtree(RUN_DIR, ignore_errors=True)
    return rc


def down_quietly() -> None:
    """`down` after a failed `up`, its messages left out: the failure has been reported."""
    saved = os.dup(2), os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        down()
    finally:
        os.dup2(saved[0], 2)
        os.dup2(saved[1], 1)
        for fd in (*saved, devnull):
            os.close(fd)


def cmd_up(args: list[str]) -> int:
    mode = args[0] if args else ""
    if mode not in ("one", "two", "fabric"):
        raise usage()
    guest_ports: list[str] = []
    rest = args[1:]
    while rest:
        if rest[0] != "--forward":
            raise usage()
        if len(rest) < 2 or not re.fullmatch(r"[0-9]+", rest[1]):
            raise die("--forward needs a guest TCP port")
        guest_ports.append(rest[1])
        rest = rest[2:]

    # qemu option values cannot carry commas.
    if "," in STATE_DIR or "," in CACHE_DIR:
        raise die("state and cache paths must not contain ','")
    if any(vm_running(host) for host in FABRIC_HOSTS):
        raise die(f"the lab is already up ({STATE_DIR}); run lab.sh down first")
    # Release the cache lock before the boot: another lab's prepare would wait for it. (Its
    # descriptor is not inherited: held by the daemonized VMs, it would block every other lab's
    # prepare until this one is down.)
    os.close(prepare(refresh=False))
    # Leftovers of a lab whose VMs died without `down`.
    remove_socket_dir()
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    os.makedirs(RUN_DIR, exist_ok=True)
    os.makedirs(LOG_DIR, exist_ok=True)
    Path(RUN_DIR, "mode").write_text(mode + "\n")
    # Measured on a 2-core host: one VM runs server and client of a loopback
    # test and wants both cores; two VMs with 2 vCPUs each oversubscribe the
    # host and boot slower, without better perftest figures.
    smp = env("IBPROBE_LAB_SMP", "2" if mode == "one" else "1")
    mem = FABRIC_VM_MEM_MB if mode == "fabric" else VM_MEM_MB
    hosts = {"one": ["A"], "two": ["A", "B"], "fabric": list(FABRIC_HOSTS)}[mode]

    sock_dir = new_socket_dir()
    if mode == "fabric" and not start_switch(sock_dir):
        down_quietly()
        return 1
    ports = PortPicker()
    forwards: dict[str, list[tuple[str, int]]] = {host: [] for host in hosts}
    with open(f"{RUN_DIR}/ports", "w") as ports_file:
        for host in hosts:
            for guest_port in guest_ports:
                fixed = os.environ.get(f"IBPROBE_LAB_HOSTFWD_{host}_{guest_port}", "")
                host_port = ports.pick(fixed)
                ports_file.write(f"{host} {guest_port} {host_port}\n")
                ports_file.flush()
                forwards[host].append((guest_port, host_port))

    start = now_ms()
    mode_name = "fabric" if mode == "fabric" else f"{mode}-host"
    tsc_khz = host_tsc_khz()
    if not tsc_khz:
        say("warning: cannot measure the host's TSC frequency; the VMs calibrate it")
    say(f"booting VM {' '.join(hosts)} ({mode_name} mode, {smp} vCPU, {mem} MiB, TCG)")
    for host in hosts:
        qemu_args = qemu_command(host, mode, sock_dir, forwards[host], smp, mem, tsc_khz)
        if not start_vm(host, qemu_args):
            down_quietly()
            return 1
    try:
        booted = (wait_until_ready(start + int(BOOT_TIMEOUT) * 1000, hosts)
                  and check_clocks(hosts)
                  and (mode != "two" or check_link())
                  and (mode != "fabric" or check_fabric()))
    except LabExit:  # a check's job failed; its message is out
        booted = False
    if not booted:
        down_quietly()
        return 1
    say(f"lab up in {elapsed_s(start)} s")
    return status()


def status() -> int:
    hosts = lab_hosts()
    if hosts is None or not os.path.isdir(RUN_DIR):
        out(f"lab: down (state {STATE_DIR})\n")
        return RC_STATUS_DOWN
    if fabric_lab():
        trunk = read_text(f"{RUN_DIR}/trunk")
        trunk = "gone" if trunk is None else trunk
        out(f"lab: fabric mode (A B on leaf1, C D on leaf2, trunk {trunk}), state {STATE_DIR}\n")
    else:
        out(f"lab: {read_text(f'{RUN_DIR}/mode')}-host mode, state {STATE_DIR}\n")
    forwards = [line.split() for line in (read_text(f"{RUN_DIR}/ports") or "").split("\n")]
    up = 0
    for host in hosts:
        state, pid_text, ready = "down", "", ""
        pid = vm_pid(host)
        if pid is not None:
            state, pid_text = "booting", f" (qemu pid {pid})"
            try:
                ready = Path(xchg_dir(host), "ready").read_text().replace("\n", " ")
                state = "up"
                up += 1
            except OSError:
                pass
        out(f"  VM {host}: {state}{pid_text} {ready}\n")
        for fields in forwards:
            if len(fields) >= 3 and fields[0] == host:
                out(f"    tcp 127.0.0.1:{fields[2]} -> VM {host} :{fields[1]}\n")
    return 0 if up == len(hosts) else RC_STATUS_DOWN


def cmd_down(_args: list[str]) -> int:
    return down()


def cmd_status(_args: list[str]) -> int:
    return status()


# ---------------------------------------------------------------------------
# jobs: files in the VM's exchange share that guest-agent.sh serves (its header lists them)


class JobOptions:
    """What exec and spawn take before the VM's name."""

    def __init__(self) -> None:
        self.timeout = str(EXEC_TIMEOUT_DEFAULT)  # as given: the agent reads it from the file
        self.background = False
        self.name = ""
        self.cwd = caller_dir()
        self.cwd_strict = False
        self.env: list[str] = []
        self.host = ""
        self.command: list[str] = []


def parse_job_options(args: list[str]) -> JobOptions:
    options = JobOptions()
    timeout_set = False
    rest = list(args)
    while rest:
        option, value = rest[0], rest[1] if len(rest) > 1 else ""
        if option == "--timeout":
            if not re.fullmatch(r"[0-9]+", value):
                raise die("--timeout needs whole seconds (0 = none)")
            options.timeout, timeout_set = value, True
        elif option in ("--background", "-b"):
            options.background = True
            rest = rest[1:]
            continue
        elif option == "--name":
            if not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*", value):
                raise die("--name needs [A-Za-z0-9_.-]+")
            options.name = value
        elif option == "--cwd":
            if not value:
                raise die("--cwd needs a directory")
            options.cwd, options.cwd_strict = value, True
        elif option == "--env":
            if not re.match(r"[A-Za-z_].*=", value, re.DOTALL):
                raise die("--env needs NAME=VALUE")
            options.env.append(value)
        elif option in ("A", "B", "C", "D"):
            break
        else:
            raise die(f"unknown option '{option}' (expected A or B, then -- CMD...)")
        rest = rest[2:]
    options.host = rest[0] if rest else ""
    validate_host(options.host)
    rest = rest[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise die("no command given (lab.sh exec A -- CMD...)")
    options.command = rest
    if options.background and not timeout_set:
        options.timeout = "0"
    return options


def new_job_name(prefix: str) -> str:
    return f"{prefix}-{time.time_ns()}-{os.getpid()}"


def write_job(host: str, name: str, options: JobOptions) -> None:
    """Hands the job to the VM: job.sh and timeout in a directory that appears under its name
    at once (renamed into place). The job runs in the caller's directory; one that the VM lacks
    (a host path created after the VM mounted the host root, say) is an error when asked for
    with --cwd, otherwise the job runs in /."""
    q = bash_quote
    command, cwd = options.command, options.cwd
    script = [
        "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        f"export HOME=/root LANG=C.UTF-8 TERM=dumb TMPDIR=/run/tmp LAB_HOST={host}",
        *(f"export {q(assignment)}" for assignment in options.env),
    ]
    if options.cwd_strict:
        script += [f"if ! cd -- {q(cwd)} 2>/dev/null; then",
                   f"    echo {q(f'lab: directory {cwd} does not exist in VM {host}')} >&2",
                   f"    exit {RC_LAB_FAILURE}",
                   "fi"]
    else:
        script.append(f"cd -- {q(cwd)} 2>/dev/null || cd /")
    script += [f"if ! command -v -- {q(command[0])} >/dev/null; then",
               f"    echo {q(f'lab: {command[0]}: command not found in VM {host}')} >&2",
               "    exit 127",
               "fi",
               "exec" + "".join(" " + q(word) for word in command)]
    jobs = jobs_dir(host)
    tmp = f"{jobs}/.new-{name}"
    os.makedirs(tmp, exist_ok=True)
    Path(tmp, "job.sh").write_text("".join(line + "\n" for line in script),
                                   errors="surrogateescape")
    Path(tmp, "timeout").write_text(options.timeout + "\n")
    os.rename(tmp, f"{jobs}/{name}")
    wake_agent(host)


def wake_agent(host: str) -> None:
    """Tells the VM's agent to look at its jobs (see guest-agent.sh). The FIFO is opened
    read-write, so this never blocks, even when qemu is gone."""
    fifo = f"{vm_dir(host)}/wake.in"
    try:
        if not stat.S_ISFIFO(os.stat(fifo).st_mode):
            return
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, b".")
    except BlockingIOError:  # wake-ups already queued that the agent has not read
        pass
    finally:
        os.close(fd)


def wait_for_file(path: str, host: str, deadline_ms: int, vm_check_every: int,
                  on_poll: Callable[[int], None] | None = None) -> str:
    """Polls until PATH is not empty: "done"; "stopped" when VM HOST no longer runs (checked every
    VM_CHECK_EVERY polls); "timeout" once DEADLINE_MS passed (0: never). ON_POLL gets each poll's
    number."""
    polls = 0
    while not non_empty(path):
        polls += 1
        if on_poll:
            on_poll(polls)
        if polls % vm_check_every == 0 and not vm_running(host):
            return "stopped"
        if deadline_ms > 0 and now_ms() > deadline_ms:
            return "timeout"
        time.sleep(POLL_SECONDS)
    return "done"


def wait_job_pickup(host: str, name: str) -> bool:
    job = f"{jobs_dir(host)}/{name}"
    waited = wait_for_file(f"{job}/pid", host, now_ms() + PICKUP_TIMEOUT * 1000, 25)
    if waited == "done":
        return True
    if waited == "stopped":
        say(f"error: VM {host} stopped")
    else:
        say(f"error: the agent in VM {host} did not pick up job {name} within {PICKUP_TIMEOUT} s")
    console_tail(host, 10)
    return False


class JobOutput:
    """Copies what a job wrote since the last call to the caller's stdout and stderr."""

    def __init__(self, job: str, stdout: Sink, stderr: Sink) -> None:
        self.job = job
        self.sinks = {"stdout": stdout, "stderr": stderr}
        self.offsets = {"stdout": 0, "stderr": 0}

    def copy_new(self) -> None:
        for stream, sink in self.sinks.items():
            path = f"{self.job}/{stream}"
            try:
                size = os.stat(path).st_size
                if size <= self.offsets[stream]:
                    continue
                with open(path, "rb") as source:
                    source.seek(self.offsets[stream])
                    data = source.read(size - self.offsets[stream])
            except OSError:
                continue
            sink(data)
            self.offsets[stream] = size


def job_timed_out(job: str) -> bool:
    return os.path.exists(f"{job}/timedout")


def job_status(job: str) -> int:
    return int(read_word(f"{job}/rc") or "0")


def follow_job(host: str, name: str, limit: int, stdout: Sink, stderr: Sink) -> int:
    """Streams a job's output until it ends; returns its exit status."""
    job = f"{jobs_dir(host)}/{name}"
    output = JobOutput(job, stdout, stderr)
    deadline = now_ms() + (limit + EXEC_GRACE) * 1000 if limit > 0 else 0
    # The end is looked for every 20 ms, the output streamed every 200 ms and the VM checked
    # every second.
    waited = wait_for_file(f"{job}/rc", host, deadline, 50,
                           lambda polls: output.copy_new() if polls % 10 == 0 else None)
    if waited != "done":
        if waited == "stopped":
            say(f"error: VM {host} stopped while running job {name}")
        else:
            say(f"error: job {name} in VM {host} did not end within {limit + EXEC_GRACE} s; "
                "the VM is not responding")
        console_tail(host, 10)
        return RC_LAB_FAILURE
    output.copy_new()
    rc = job_status(job)
    if job_timed_out(job):
        say(f"error: timeout: '{job_command(job)}' in VM {host} ran longer than {limit} s; stopped")
        return RC_TIMEOUT
    return rc


def cancel_job(host: str, job: str) -> None:
    """Stops a job the caller no longer follows; the sweep of a later exec removes it once it
    has ended."""
    if not os.path.isdir(job):
        return
    touch(f"{job}/cancel")
    touch(f"{job}/abandoned")
    wake_agent(host)


@contextmanager
def cancel_on_signal(host: str, job: str) -> Iterator[None]:
    """A SIGINT or SIGTERM to the caller stops the followed job in the VM as well."""

    def handler(signum: int, _frame: object) -> None:
        cancel_job(host, job)
        raise LabExit(130 if signum == signal.SIGINT else 143)

    # A signal ignored from the start (SIGINT for a shell's background command) stays ignored.
    previous = {signum: signal.signal(signum, handler)
                for signum in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(signum) != signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)


def sweep_abandoned_jobs(host: str) -> None:
    """Removes foreground jobs whose caller went away, once they have ended."""
    jobs = jobs_dir(host)
    for name in job_listing(jobs):
        job = f"{jobs}/{name}"
        if os.path.exists(f"{job}/abandoned") and non_empty(f"{job}/rc"):
            shutil.rmtree(job, ignore_errors=True)


def submit_job(options: JobOptions) -> str:
    """Writes the job for its VM; returns its name."""
    host = options.host
    require_vm(host)
    sweep_abandoned_jobs(host)
    name = options.name
    job = f"{jobs_dir(host)}/{name}"
    if not name:
        name = new_job_name("bg" if options.background else "x")
    elif os.path.exists(job):  # a name used before: free once that job has ended
        if not non_empty(f"{job}/rc"):
            raise die(f"job {name} is still running in VM {host}")
        shutil.rmtree(job, ignore_errors=True)
    write_job(host, name, options)
    return name


def follow_new_job(options: JobOptions, stdout: Sink = to_stdout, stderr: Sink = to_stderr) -> int:
    """Runs a foreground job to its end; its exit status, 124 on its timeout, 125 when the lab
    failed (the job is then left to be stopped by the agent)."""
    name = submit_job(options)
    job = f"{jobs_dir(options.host)}/{name}"
    with cancel_on_signal(options.host, job):
        if not wait_job_pickup(options.host, name):
            cancel_job(options.host, job)
            raise LabExit(RC_LAB_FAILURE)
        rc = follow_job(options.host, name, int(options.timeout), stdout, stderr)
        if rc == RC_LAB_FAILURE:
            cancel_job(options.host, job)
        else:
            shutil.rmtree(job, ignore_errors=True)
    return rc


def run_job(host: str, command: list[str], timeout: str, stdout: Sink = to_stdout) -> int:
    """A command the lab itself runs in a VM (exec with its defaults but TIMEOUT)."""
    options = JobOptions()
    options.host, options.command, options.timeout = host, command, timeout
    return follow_new_job(options, stdout=stdout)


def cmd_exec(args: list[str]) -> int:
    options = parse_job_options(args)
    if not options.background:
        return follow_new_job(options)
    name = submit_job(options)
    if not wait_job_pickup(options.host, name):
        raise LabExit(RC_LAB_FAILURE)
    out(name + "\n")
    return 0


def cmd_spawn(args: list[str]) -> int:
    return cmd_exec(["--background", *args])


def job_dir_of(args: list[str]) -> str:
    host = args[0] if args else ""
    validate_host(host)
    if len(args) < 2 or not args[1]:
        raise usage()
    job = f"{jobs_dir(host)}/{args[1]}"
    if not os.path.isdir(job):
        raise die(f"no job {args[1]} in VM {host}")
    return job


def cmd_jobs(args: list[str]) -> int:
    host = args[0] if args else ""
    validate_host(host)
    jobs = jobs_dir(host)
    for name in job_listing(jobs):
        job = f"{jobs}/{name}"
        if non_empty(f"{job}/rc"):
            state = f"exited {read_text(f'{job}/rc')}"
        elif non_empty(f"{job}/pid"):
            state = f"running pid {read_text(f'{job}/pid')}"
        else:
            state = "queued"
        out(f"{name}\t{state}\t{job_command(job)}\n")
    return 0


def cmd_output(args: list[str]) -> int:
    stream = "stdout"
    if args and args[0] == "--stderr":
        stream, args = "stderr", args[1:]
    job = job_dir_of(args)
    try:
        to_stdout(Path(job, stream).read_bytes())
    except FileNotFoundError:
        pass
    return 0


def cmd_wait(args: list[str]) -> int:
    limit = EXEC_TIMEOUT_DEFAULT
    if args and args[0] == "--timeout":
        if len(args) < 2 or not re.fullmatch(r"[0-9]+", args[1]):
            raise die("--timeout needs whole seconds")
        limit, args = int(args[1]), args[2:]
    job = job_dir_of(args)
    host, name = args[0], args[1]
    require_vm(host)
    # Waiting is bounded here; the job itself keeps running if it outlives us.
    waited = wait_for_file(f"{job}/rc", host, now_ms() + limit * 1000, 50)
    if waited == "stopped":
        say(f"error: VM {host} stopped")
        return RC_LAB_FAILURE
    if waited == "timeout":
        say(f"error: timeout: job {name} in VM {host} still running after {limit} s")
        return RC_TIMEOUT
    JobOutput(job, to_stdout, to_stderr).copy_new()
    rc = job_status(job)
    if job_timed_out(job):
        say(f"error: timeout: job {name} in VM {host} was stopped by its own timeout")
        return RC_TIMEOUT
    return rc


def wait_for_ends(jobs: list[str]) -> list[str]:
    """Waits up to 10 s for JOBS to end; returns those still running."""
    left = jobs
    for _ in range(500):
        left = [job for job in left if not non_empty(f"{job}/rc")]
        if not left:
            break
        time.sleep(POLL_SECONDS)
    return left


def cmd_kill(args: list[str]) -> int:
    job = job_dir_of(args)
    host, name = args[0], args[1]
    if not non_empty(f"{job}/rc") and vm_running(host):
        touch(f"{job}/cancel")
        wake_agent(host)
        # The agent sends SIGTERM, then SIGKILL after 3 s.
        if wait_for_ends([job]):
            say(f"warning: job {name} in VM {host} did not confirm its end")
    return 0


def cmd_reset(_args: list[str]) -> int:
    """Ends every job of every VM at once (SIGTERM, SIGKILL 3 s later, as kill), names each one
    that was still running, and forgets them all: a lab shared by several tests hands the next
    one VMs with nothing left running and no job names taken."""
    hosts = lab_hosts()
    if hosts is None:
        raise die(f"no lab is up ({STATE_DIR})")
    running: list[tuple[str, str]] = []
    for host in hosts:
        require_vm(host)
        for name in job_listing(jobs_dir(host)):
            job = f"{jobs_dir(host)}/{name}"
            if not non_empty(f"{job}/rc"):
                running.append((host, name))
                touch(f"{job}/cancel")
        wake_agent(host)
    wait_for_ends([f"{jobs_dir(host)}/{name}" for host, name in running])
    rc = 0
    for host, name in running:
        if non_empty(f"{jobs_dir(host)}/{name}/rc"):
            say(f"job {name} in VM {host} was still running: stopped")
        else:
            say(f"error: job {name} in VM {host} did not end within 10 s")
            rc = 1
    if rc != 0:
        return rc
    for host in hosts:
        for entry in Path(jobs_dir(host)).iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()
    return 0


# ---------------------------------------------------------------------------
# queries


def cmd_port(args: list[str]) -> int:
    host = args[0] if args else ""
    validate_host(host)
    guest_port = args[1] if len(args) > 1 else ""
    if not re.fullmatch(r"[0-9]+", guest_port):
        raise usage()
    for line in (read_text(f"{RUN_DIR}/ports") or "").split("\n"):
        fields = line.split(maxsplit=2)
        if len(fields) == 3 and fields[0] == host and fields[1] == guest_port:
            out(fields[2] + "\n")
            return 0
    raise die(f"no forward for VM {host} port {guest_port} (lab.sh up ... --forward {guest_port})")


def cmd_addr(args: list[str]) -> int:
    host = args[0] if args else ""
    validate_host(host)
    out(f"10.99.0.{HOST_INDEX[host]}\n")
    return 0


# Prints the index of rxe0's RoCE v2 GID $1, run in the VM by `gid`.
GID_INDEX_SCRIPT = """
port=/sys/class/infiniband/rxe0/ports/1
for gid in "$port"/gids/*; do
    i=${gid##*/}
    [[ $(<"$gid") == "$1" ]] || continue
    [[ $(<"$port/gid_attrs/types/$i") == "RoCE v2" ]] 2>/dev/null || continue
    echo "$i"
    exit 0
done
echo "lab: no RoCE v2 GID $1 on rxe0" >&2
exit 1"""


def cmd_gid(args: list[str]) -> int:
    """Index of rxe0's RoCE v2 GID that carries the VM's IPv4 lab address (::ffff:10.99.0.x),
    the one perftest and probes need (-x IDX)."""
    host = args[0] if args else ""
    validate_host(host)
    gid = f"0000:0000:0000:0000:0000:ffff:0a63:{HOST_INDEX[host]:04x}"
    return run_job(host, ["bash", "-c", GID_INDEX_SCRIPT, "_", gid], timeout="60")


class QmpError(Exception):
    pass


def qmp(host: str, command: dict) -> tuple[bool, str]:
    """One QMP command to a VM's QEMU: whether QEMU returned (rather than an error), and its
    reply as it sent it. Every read is bounded: 10 s for the whole exchange."""
    import json
    import socket

    path = f"{socket_dir()}/qmp-{host}.sock"
    try:
        is_socket = stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        raise die(f"VM {host} has no QMP socket ({path})")
    deadline = time.monotonic() + 10
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            try:
                conn.connect(path)
            except OSError as error:
                raise QmpError(f"cannot connect to {path}: {error.strerror}") from None
            received = b""

            def reply() -> tuple[dict, str]:
                """The next line that is neither the greeting nor an event."""
                nonlocal received
                while True:
                    while b"\n" not in received:
                        conn.settimeout(max(deadline - time.monotonic(), 0.001))
                        chunk = conn.recv(65536)
                        if not chunk:
                            raise QmpError(f"QMP at {path} closed the connection")
                        received += chunk
                    line, received = received.split(b"\n", 1)
                    message = json.loads(line)
                    if "event" not in message and "QMP" not in message:
                        return message, line.decode().rstrip("\r")

            conn.sendall(b'{"execute":"qmp_capabilities"}\n')
            if "return" not in reply()[0]:
                raise QmpError("QMP refused capabilities negotiation")
            conn.sendall(json.dumps(command, separators=(",", ":")).encode() + b"\n")
            answer, text = reply()
            return "return" in answer, text
    except socket.timeout:
        error_text = f"no answer from QMP at {path} within 10 s"
    except (QmpError, OSError, ValueError) as error:
        error_text = str(error)
    sys.stderr.write(error_text + "\n")
    return False, ""


def cmd_link(args: list[str]) -> int:
    """Carrier loss on a VM's lab NIC, as a pulled cable: QEMU drops every frame the VM sends or
    would receive there, the VM's eth0 loses carrier (rxe0 goes DOWN), and the other VM sees
    only silence. The VM's own interface stays configured, unlike `ip link set eth0 down`
    inside it."""
    host = args[0] if args else ""
    want = args[1] if len(args) > 1 else ""
    validate_host(host)
    if lab_hosts() != ["A", "B"] and not fabric_lab():
        raise die("link needs the two-host lab")
    require_vm(host)
    state_file = f"{vm_dir(host)}/link"
    if not want:
        state = read_text(state_file) if os.access(state_file, os.R_OK) else None
        out((state if state is not None else "up") + "\n")
        return 0
    if want not in ("up", "down"):
        raise usage()
    ok, reply = qmp(host, {"execute": "set_link", "arguments": {"name": "n0", "up": want == "up"}})
    if not ok:
        raise die(f"set_link on VM {host} failed: {reply}")
    Path(state_file).write_text(want + "\n")
    say(f"VM {host} lab link {want}")
    return 0


CAPTURE_ID = "lab-capture"


def cmd_capture(args: list[str]) -> int:
    """A capture on the host side of a VM's lab NIC: QEMU's filter-dump object on netdev n0
    writes every frame in both directions (the VM's own and the other VMs' to it) to a pcap
    file, as tcpdump on the VM's cable would. `stop` deletes the object, which closes the file.
    One capture per VM at a time."""
    host = args[0] if args else ""
    action = args[1] if len(args) > 1 else ""
    validate_host(host)
    require_vm(host)
    if action == "start" and len(args) == 3:
        path = os.path.abspath(args[2])
        command = {"execute": "object-add",
                   "arguments": {"qom-type": "filter-dump", "id": CAPTURE_ID, "netdev": "n0",
                                 "file": path}}
    elif action == "stop" and len(args) == 2:
        path = ""
        command = {"execute": "object-del", "arguments": {"id": CAPTURE_ID}}
    else:
        raise usage()
    ok, reply = qmp(host, command)
    if not ok:
        raise die(f"capture {action} on VM {host} failed: {reply}")
    say(f"VM {host} lab NIC capture " + (f"into {path}" if path else "stopped"))
    return 0


def cmd_nic(args: list[str]) -> int:
    """What QEMU and the guest hold of a VM's lab NIC: the netdev as the monitor shows it, then
    for each virtqueue one line of indices and one of what they mean. QEMU's own (last-avail-idx:
    buffers it has taken; used-idx: buffers it has given back; signalled-used: the used index of
    its last interrupt; inuse: taken and not given back, e.g. a frame the netdev could not send)
    and the rings' in guest memory (avail-idx: buffers the guest has offered; used-event: the used
    index the guest asked to be interrupted at; avail-event: the avail index QEMU asked to be
    kicked at). A stalled transmit ring is thereby either frames the guest offered that QEMU has
    not taken, an interrupt QEMU owes the guest, or a guest that asked for none."""
    import json

    host = args[0] if args else ""
    validate_host(host)
    require_vm(host)
    ok, reply = qmp(host, {"execute": "human-monitor-command",
                           "arguments": {"command-line": "info network"}})
    if not ok:
        return 1
    lines = str(json.loads(reply)["return"]).replace("\r", "").split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    out("".join(line + "\n" for line in lines))

    def guest_u16(address: int) -> int | None:
        ok, reply = qmp(host, {"execute": "human-monitor-command",
                               "arguments": {"command-line": f"xp /1hx {address}"}})
        found = re.search(r": 0x([0-9a-f]+)", str(json.loads(reply).get("return", ""))) if ok else None
        return int(found.group(1), 16) if found else None

    for queue, role in ((0, "receive"), (1, "transmit")):
        ok, reply = qmp(host, {"execute": "x-query-virtio-queue-status",
                               "arguments": {"path": "/machine/peripheral/labnic/virtio-backend",
                                             "queue": queue}})
        if not ok:
            out(f"virtqueue {queue} ({role}): {reply.strip()}\n")
            return 1
        status = json.loads(reply)["return"]
        size, avail, used = status["vring-num"], status["vring-avail"], status["vring-used"]
        # The split ring's layout (virtio 1.x, 2.6): avail = flags, idx, ring[size], used_event;
        # used = flags, idx, ring[size] of 8 bytes, avail_event.
        guest = {"avail-idx": guest_u16(avail + 2), "used-event": guest_u16(avail + 4 + 2 * size),
                 "avail-event": guest_u16(used + 4 + 8 * size)}
        fields = {key: status[key] for key in ("last-avail-idx", "used-idx", "signalled-used",
                                               "inuse")}
        fields.update(guest)
        out(f"virtqueue {queue} ({role}): "
            + " ".join(f"{key}={'?' if value is None else value}" for key, value in fields.items())
            + f"\n  {nic_queue_meaning(role, status, guest)}\n")
    return 0


def nic_queue_meaning(role: str, status: dict, guest: dict) -> str:
    """What a virtqueue's indices say, in one sentence."""
    if None in guest.values():
        return "guest memory unreadable"
    offered = (guest["avail-idx"] - status["last-avail-idx"]) % 65536
    used, signalled, event = status["used-idx"], status["signalled-used"], guest["used-event"]
    # virtio's vring_need_event: an interrupt is due once used has passed event since the last.
    owed = (used - event - 1) % 65536 < (used - signalled) % 65536
    if role == "receive":
        state = (f"{offered} receive buffers free" if offered
                 else "no receive buffer free: the guest has not refilled the ring")
    elif offered:
        state = f"{offered} frames offered that QEMU has not taken"
    else:
        state = "every frame offered taken"
    if status["inuse"]:
        state += f"; {status['inuse']} taken and not given back (the netdev holds them)"
    if owed:
        state += f"; an interrupt owed to the guest (used {used} passed its event {event})"
    return state


def cmd_trunk(args: list[str]) -> int:
    """The link between the fabric's two switches: down, frames between leaf1 and leaf2 are
    dropped, as on a cut uplink; hosts on one switch still reach each other."""
    want = args[0] if args else ""
    if not fabric_lab():
        raise die("trunk needs the fabric lab (lab.sh up fabric)")
    pid = switch_pid()
    if pid is None:
        raise die("the lab switch is not running")
    if not want:
        to_stdout(Path(RUN_DIR, "trunk").read_bytes())
        return 0
    if want not in ("up", "down"):
        raise usage()
    try:
        os.kill(pid, signal.SIGUSR1 if want == "down" else signal.SIGUSR2)
    except OSError:
        raise die(f"cannot signal the lab switch (pid {pid})") from None
    for _ in range(100):
        if read_text(f"{RUN_DIR}/trunk") == want:
            say(f"trunk leaf1-leaf2 {want}")
            return 0
        time.sleep(0.05)
    raise die(f"the lab switch did not set the trunk {want}")


def cmd_console(args: list[str]) -> int:
    host = args[0] if args else ""
    validate_host(host)
    log = console_log(host)
    if not os.access(log, os.R_OK):
        raise die(f"no console log for VM {host}")
    to_stdout(Path(log).read_bytes().replace(b"\r", b""))
    return 0


# ---------------------------------------------------------------------------

COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "prepare": cmd_prepare,
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "reset": cmd_reset,
    "exec": cmd_exec,
    "spawn": cmd_spawn,
    "jobs": cmd_jobs,
    "wait": cmd_wait,
    "output": cmd_output,
    "kill": cmd_kill,
    "port": cmd_port,
    "addr": cmd_addr,
    "gid": cmd_gid,
    "link": cmd_link,
    "nic": cmd_nic,
    "capture": cmd_capture,
    "trunk": cmd_trunk,
    "console": cmd_console,
}


def main(argv: list[str]) -> int:
    """Runs one command. The options are parsed by hand: argparse would accept abbreviated
    options and options after the VM's name, and answer mistakes with messages and exit
    statuses of its own, where the callers rely on these (exit 2 with the usage, exit 1 with
    the reason)."""
    name, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if name in ("-h", "--help", "help"):
            raise usage(0)
        command = COMMANDS.get(name)
        if command is None:
            raise usage()
        return command(args)
    except LabExit as end:
        return end.status
    except KeyboardInterrupt:  # Ctrl-C, after the cleanups on the way (a half-built initramfs)
        return 128 + signal.SIGINT
    except subprocess.CalledProcessError as failed:  # the tool has said why
        return failed.returncode
    except BrokenPipeError:
        # The reader of our output went away: end as a shell's echo would, by SIGPIPE's status,
        # without Python's complaint about the unflushed stdout.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
