"""A task's server, as its runner reports it to the master: only once its port is the task's own.

On a local or Docker runner a notebook's, TensorBoard's or shell's program (det_airflow.tasks) does
not tell the master where it listens: the master's proxy would send people's requests wherever the
task's owner named, another user's server or a service of the platform's. The program writes its
port and secret into ``.det/task-ready.json`` (:data:`det_airflow.tasks.READY_FILE`) of its work
folder; the runner, watching for that file, finds in ``/proc`` the sockets that listen on that port
at the task's address and reports the port to the master (det's service token) only when each of
them is held by one of the task's own processes (their sessions and descendants) and, where the
task runs as a uid of its own, belongs to that uid. Anything else is refused, and said in the
task's logs.

A reported port is checked again every second while the task runs: once its server stops listening
or the port is no longer held by the task's own processes (it closed it, and someone else's program
took the port), the runner withdraws the report and the proxy sends nobody there until the check
passes again.

Linux only (``/proc``), as the runners are; the runner needs to read the task's processes' file
descriptors: a root worker, or one whose trials run as its own user.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from det_airflow.errors import DetError
from det_airflow.tasks import READY_FILE
from det_airflow.trial_process import TRIAL_FILES_DIR, OnOutput

# How often the runner looks for the program's file, checks a refused report again, and checks that
# a reported port is still the task's own.
POLL_SECONDS = 0.25
RECHECK_SECONDS = 2.0
REPORTED_CHECK_SECONDS = 1.0
# The longest wait between two tries to tell a master that did not answer.
MAX_REPORT_DELAY_SECONDS = 30.0
_MAX_BYTES = 4096
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
_WILDCARDS = {"0.0.0.0", "::"}


@dataclass(frozen=True)
class OnTaskReady:
    """How a runner tells the master about a task's server."""

    #: (port, secret, address): the port is found to be the task's own.
    ready: Callable[[int, str, str], None]
    #: (port): what was reported no longer holds; the proxy must stop sending people there.
    gone: Callable[[int], None]


class NotTheTasksPort(DetError):
    """The port a task's program named is not held by the task's own process (or is not valid)."""


@dataclass(frozen=True)
class ReadyReport:
    """What the task's program wrote: where its server listens, and the proxy's secret."""

    port: int
    secret: str
    address: str


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket of ``/proc/<pid>/net/tcp{,6}``."""

    address: str
    port: int
    uid: int
    inode: int


def read_ready_file(workdir: Path) -> ReadyReport | None:
    """The program's report in ``workdir``, None while there is none yet.

    The trial owns its work folder: no link is followed (``.det`` or the file made a link to
    somewhere of the platform's), only a small regular file is read.

    Raises:
        NotTheTasksPort: The file is there but is no report.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        folder = os.open(workdir, flags | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    try:
        try:
            files = os.open(TRIAL_FILES_DIR, flags | os.O_DIRECTORY, dir_fd=folder)
        except FileNotFoundError:
            return None
        try:
            try:
                fd = os.open(READY_FILE, flags | os.O_NONBLOCK, dir_fd=files)
            except FileNotFoundError:
                return None
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise NotTheTasksPort(f"{READY_FILE} is not a regular file")
                data = f.read(_MAX_BYTES + 1)
        finally:
            os.close(files)
    except OSError as exc:  # ELOOP: a link where the folder or the file should be
        raise NotTheTasksPort(f"cannot read {READY_FILE}: {exc.strerror or exc}") from None
    finally:
        os.close(folder)
    return _parsed(data)


def _parsed(data: bytes) -> ReadyReport:
    try:
        value = json.loads(data) if len(data) <= _MAX_BYTES else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise NotTheTasksPort(f'{READY_FILE} is not {{"port", "secret", "address"}}')
    port, secret, address = value.get("port"), value.get("secret"), value.get("address")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise NotTheTasksPort(f"{READY_FILE}: port: expected 1-65535, got {port!r}")
    if not isinstance(secret, str) or not isinstance(address, str) or not address:
        raise NotTheTasksPort(f"{READY_FILE}: expected a secret and an address")
    return ReadyReport(port, secret, address)


# --- what /proc says ----------------------------------------------------------------------------


def listeners(pid: int) -> list[Listener]:
    """The listening TCP sockets of the network namespace process ``pid`` lives in."""
    found = []
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            address, _, port = fields[1].partition(":")
            found.append(Listener(_address(address, family), int(port, 16), int(fields[7]), int(fields[9])))
    return found


def _address(hex_address: str, family: int) -> str:
    """An address as /proc/net/tcp writes it: 32-bit words in the host's (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, words)


def _stat_fields(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a process; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after the command, which may hold anything
    return int(fields[1]), int(fields[3])


def _all_pids() -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def task_processes(leaders: Iterable[int]) -> set[int]:
    """The leaders, their descendants, and the processes of the sessions they lead."""
    leaders = set(leaders)
    parents: dict[int, tuple[int, int]] = {}
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields is not None:
            parents[pid] = fields
    sessions = {pid for pid in leaders if parents.get(pid, (0, 0))[1] == pid}
    found = {pid for pid in leaders if pid in parents}
    for pid, (_, sid) in parents.items():
        if sid in sessions:
            found.add(pid)
    for pid in parents:  # descendants: walk up from each process
        chain, current = [], pid
        while current in parents and current not in found and current not in chain and current > 1:
            chain.append(current)
            current = parents[current][0]
        if current in found:
            found.update(chain)
    return found


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """The inodes of the sockets the processes hold open."""
    inodes = set()
    for pid in pids:
        try:
            entries = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for entry in entries:
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{entry}")
                if target.startswith("socket:["):
                    inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def session_leaders_of(parent: int) -> set[int]:
    """The children of ``parent`` that lead a session of their own: a local trial's process, which
    starts in a new session."""
    leaders = set()
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields is not None and fields[0] == parent and fields[1] == pid:
            leaders.add(pid)
    return leaders


def check_own_port(report: ReadyReport, leaders: set[int], uid: int | None) -> None:
    """Refuse unless every socket listening at the report's address and port (or at the wildcard
    address on that port, which also receives its connections) is held by the task's processes
    and, with ``uid``, belongs to that uid.

    Raises:
        NotTheTasksPort: Why not.
    """
    where = f"{report.address}:{report.port}"
    if not leaders:
        raise NotTheTasksPort(f"the task's process is gone; nothing of it listens at {where}")
    addresses = _addresses_of(report.address)
    found = {s for pid in leaders for s in listeners(pid)}
    at = [s for s in found if s.port == report.port and (s.address in addresses or s.address in _WILDCARDS)]
    if not at:
        raise NotTheTasksPort(f"nothing listens at {where}")
    held = socket_inodes(task_processes(leaders))
    for sock in at:
        if sock.inode not in held:
            raise NotTheTasksPort(f"the server listening at {where} is not one of the task's own processes")
        if uid is not None and sock.uid != uid:
            raise NotTheTasksPort(
                f"the server listening at {where} belongs to uid {sock.uid}, not the task's"
            )


def _addresses_of(address: str) -> set[str]:
    """The IP addresses ``address`` (an address or a host name) stands for, IPv4 also as IPv6-mapped."""
    try:
        infos = socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)
    except OSError:
        return {address}
    found = {str(info[4][0]) for info in infos}
    return found | {f"::ffff:{a}" for a in found if ":" not in a}


# --- the watch ------------------------------------------------------------------------------------


class _Withdrawn(Exception):
    """A reported port that no longer holds, withdrawn from the master."""

    def __init__(self, report: ReadyReport, why: str) -> None:
        super().__init__(why)
        self.report = report


class ReadyWatch:
    """Watches a task's work folder for its program's report while the task runs; tells ``report``
    once its port is found to be its own, or says in the task's logs why not (each reason once).
    A master that does not answer is told again, with a growing pause; one that refuses, not."""

    def __init__(
        self,
        workdir: Path,
        *,
        uid: int | None,
        leaders: Callable[[], set[int]],
        report: OnTaskReady,
        on_output: OnOutput,
    ) -> None:
        self.workdir, self.uid, self.leaders = workdir, uid, leaders
        self.report, self.on_output = report, on_output
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="task-ready", daemon=True)

    def __enter__(self) -> ReadyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        checked: ReadyReport | None = None  # the report last checked, looked at again after a while
        reported: ReadyReport | None = None  # what the master was told, while it still holds
        check_at = 0.0
        said = ""
        while not self._stop.wait(POLL_SECONDS):
            try:
                found = read_ready_file(self.workdir)
                if reported is not None and found in (reported, None):  # told: does it still hold?
                    if time.monotonic() >= check_at:
                        check_at = time.monotonic() + REPORTED_CHECK_SECONDS
                        self._still_own(reported)
                    continue
                if reported is not None:  # the program wrote another report: the old one is void
                    self._withdraw(reported)
                    reported = None
                if found is None or (found == checked and time.monotonic() < check_at):
                    continue
                # A program may write its file an instant before its server listens: a refused
                # report is checked again (RECHECK_SECONDS), a changed one at once.
                checked, check_at = found, time.monotonic() + RECHECK_SECONDS
                check_own_port(found, self.leaders(), self.uid)
            except _Withdrawn as exc:
                reported, checked = None, exc.report
                check_at = time.monotonic() + RECHECK_SECONDS
                said = self._say(f"ERROR: the task's server is no longer reported to the master: {exc}", said)
                continue
            except NotTheTasksPort as exc:
                said = self._say(f"ERROR: the task's server is not reported to the master: {exc}", said)
                continue
            except Exception as exc:  # the watch never ends unsaid while the task runs
                said = self._say(f"ERROR: cannot check the task's server: {exc!r}", said)
                continue
            if not self._report(found):
                return  # the master refused it, or the task is ending
            reported, check_at, said = found, time.monotonic() + REPORTED_CHECK_SECONDS, ""

    def _still_own(self, reported: ReadyReport) -> None:
        """Withdraw ``reported`` unless its port is still the task's own.

        Raises:
            _Withdrawn: It was withdrawn, and why.
        """
        try:
            check_own_port(reported, self.leaders(), self.uid)
        except NotTheTasksPort as exc:
            self._withdraw(reported)
            raise _Withdrawn(reported, str(exc)) from None

    def _withdraw(self, reported: ReadyReport) -> None:
        try:
            self.report.gone(reported.port)
        except Exception as exc:  # noqa: BLE001 - said; the master's proxy then finds nothing there
            self.on_output(f"WARNING: could not withdraw the task's server from the master: {exc}", "stderr")

    def _report(self, found: ReadyReport) -> bool:
        """Tell the master: True once told, False when it refused (or the task ends): nothing more
        to watch. A master that does not answer is told again, with a growing pause."""
        delay = 1.0
        while True:
            try:
                self.report.ready(found.port, found.secret, found.address)
                return True
            except Exception as exc:
                status = getattr(exc, "status_code", None)
                if isinstance(exc, DetError) and status is not None and status < 500:
                    self.on_output(f"ERROR: the master refused the task's server: {exc}", "stderr")
                    return False
                self.on_output(
                    f"WARNING: could not tell the master where the task's server listens ({exc}); "
                    f"trying again in {delay:.0f} s",
                    "stderr",
                )
            if self._stop.wait(delay):
                return False
            delay = min(delay * 2, MAX_REPORT_DELAY_SECONDS)

    def _say(self, line: str, said: str) -> str:
        if line != said:
            self.on_output(line, "stderr")
        return line


def watch_ready(
    on_task_ready: OnTaskReady | None,
    workdir: Path,
    *,
    uid: int | None,
    leaders: Callable[[], set[int]],
    on_output: OnOutput,
) -> contextlib.AbstractContextManager[object]:
    """A :class:`ReadyWatch` while the task runs, for a task whose launch asks for one; else nothing."""
    if on_task_ready is None:
        return contextlib.nullcontext()
    return ReadyWatch(workdir, uid=uid, leaders=leaders, report=on_task_ready, on_output=on_output)
