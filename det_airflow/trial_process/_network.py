"""What a trial may connect to on its own host: the master, other trials, nothing of the platform's.

A local or Docker trial (host network) runs as its owner's uid on the worker. Without a wall it
could open any service of the host: the Celery broker, the metadata database, a log server, an
admin's own tools. Their passwords are out of its reach, but a service without one (or one whose
port is all an exploit needs) is not. So a worker that is root keeps the trial uids off every
address of the host itself with a firewall rule set of its own (iptables' ``owner`` match on the
uids of ``[det] trial_uid_range``, in a chain named :data:`CHAIN`, IPv4 and IPv6), except:

- the master's port, which a trial must reach (it still needs its trial token there);
- the kernel's ephemeral port range: what a server bound to port 0 is given, so the trial's own
  servers (torch.distributed's rendezvous, gloo, a notebook's kernels) and other trials' reach
  each other. The platform's services listen outside it (``localairflow.service_port``);
- DNS (port 53: a host's local resolver);
- the ports the admin lists in ``[det] trial_allowed_local_ports``.

Connections to other machines are left alone: the platform's remote services are protected by
their credentials, which no trial can read. Everything here is idempotent: each trial start checks
the rules and adds what is missing, so a rule set another process made, or one from before a
restart of the worker, is kept as it is. The check is one listing of the rules per tool.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from det_airflow.errors import DetError
from det_airflow.settings import Settings

#: The chain of the trial rules, in the ``filter`` table of iptables and ip6tables.
CHAIN = "DET-TRIALS"
#: The kernel's ephemeral port range, and Linux's default when it cannot be read.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
DNS_PORT = 53
_TOOLS = ("iptables", "ip6tables")
_TIMEOUT_S = 30


class TrialNetworkError(DetError):
    """The worker cannot keep trials off its host's services (no iptables, no permission)."""


def ephemeral_range(range_file: Path | None = None) -> tuple[int, int]:
    """The kernel's ephemeral port range (what binding port 0 hands out)."""
    try:
        low, high = (int(x) for x in (range_file or EPHEMERAL_RANGE_FILE).read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return low, high


def allowed_ports(
    master_ports: Iterable[int], extra: Iterable[tuple[int, int]] = (), *, range_file: Path | None = None
) -> list[tuple[int, int]]:
    """Port ranges of the host's own addresses that trial uids may connect to, in a stable order."""
    ranges = {(p, p) for p in master_ports} | {ephemeral_range(range_file), (DNS_PORT, DNS_PORT)}
    return sorted(ranges | set(extra))


def chain_rules(ports: Sequence[tuple[int, int]]) -> list[list[str]]:
    """The rules of :data:`CHAIN`, in order, as iptables arguments after ``-A CHAIN``."""
    rules = [["-m", "addrtype", "!", "--dst-type", "LOCAL", "-j", "RETURN"]]
    for protocol in ("tcp", "udp"):
        for first, last in ports:
            span = str(first) if first == last else f"{first}:{last}"
            rules.append(["-p", protocol, "--dport", span, "-j", "RETURN"])
    rules.append(["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"])
    rules.append(["-j", "REJECT"])
    return rules


def jump_rule(uids: tuple[int, int]) -> list[str]:
    """The rule of the OUTPUT chain that sends the trial uids' packets through :data:`CHAIN`."""
    first, last = uids
    owner = str(first) if first == last else f"{first}-{last}"
    return ["-m", "owner", "--uid-owner", owner, "-j", CHAIN]


def ensure_trial_firewall(uid_ranges: Iterable[tuple[int, int]], ports: Sequence[tuple[int, int]]) -> None:
    """Make sure packets of ``uid_ranges`` to this host's own addresses pass only to ``ports``, for
    IPv4 and IPv6. Rules already there are kept; the REJECT rules stay last.

    Raises TrialNetworkError when iptables is missing or refuses (no CAP_NET_ADMIN)."""
    ranges = sorted(set(uid_ranges))
    for tool in _TOOLS:
        path = shutil.which(tool) or next(
            (str(p) for p in (Path("/usr/sbin") / tool, Path("/sbin") / tool) if p.exists()), None
        )
        if path is None:
            raise TrialNetworkError(
                f"{tool} not found: trials run as their owners' uids are kept off this host's own "
                "services by a firewall rule (apt-get install iptables), or set "
                "[det] trial_firewall = false to run them without (docs/trial-isolation.md)"
            )
        _ensure(path, ranges, ports)


# Held while the rules are checked and added: trials starting at once (Celery's worker processes)
# would otherwise both find the chain missing and the second `-N` fail its trial. In /run, where
# only root writes, so that no trial can hold it.
_LOCK_FILE = Path("/run/det-airflow-trial-firewall.lock")


def _ensure(tool: str, uid_ranges: list[tuple[int, int]], ports: Sequence[tuple[int, int]]) -> None:
    import fcntl

    with open(_LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _ensure_locked(tool, uid_ranges, ports)


def _ensure_locked(tool: str, uid_ranges: list[tuple[int, int]], ports: Sequence[tuple[int, int]]) -> None:
    # One listing of the filter table answers for every rule at once: a trial start costs one
    # iptables run per tool, not one check per rule (each of which reads the whole rule set).
    listed = _listing(tool)
    if f"-N {CHAIN}" not in listed and not _has(tool, ["-L", CHAIN, "-n"]):
        _run(tool, ["-N", CHAIN])
    rules = chain_rules(ports)
    accepts, rejects = rules[:-2], rules[-2:]
    # Each accept is inserted at the top: the rejects (and earlier accepts) stay below.
    for rule in accepts:
        if not _present(tool, listed, CHAIN, rule):
            _run(tool, ["-I", CHAIN, "1", *rule])
    for rule in rejects:
        if not _present(tool, listed, CHAIN, rule):
            _run(tool, ["-A", CHAIN, *rule])
    for uids in uid_ranges:
        jump = jump_rule(uids)
        if not _present(tool, listed, "OUTPUT", jump):
            _run(tool, ["-I", "OUTPUT", "1", *jump])


def _listing(tool: str) -> set[str]:
    """The filter table's rules as ``iptables -S`` prints them, one line each."""
    try:
        result = subprocess.run(
            [tool, "-w", "-S"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TrialNetworkError(f"{Path(tool).name} did not answer: {exc}") from None
    if result.returncode != 0:
        return set()  # every rule is then checked on its own; an error says which one fails
    return {line.strip() for line in result.stdout.splitlines()}


def _listed_form(tool: str, chain: str, rule: Sequence[str]) -> str:
    """``rule`` of ``chain`` as ``iptables -S`` prints it: the match module a ``--dport`` implies
    named, and a plain REJECT's default answer spelled out."""
    words = list(rule)
    if "--dport" in words and "-p" in words and "-m" not in words:
        after_protocol = words.index("-p") + 2
        words[after_protocol:after_protocol] = ["-m", words[after_protocol - 1]]
    if words[-2:] == ["-j", "REJECT"]:
        default = "icmp6-port-unreachable" if Path(tool).name.startswith("ip6") else "icmp-port-unreachable"
        words += ["--reject-with", default]
    return " ".join(["-A", chain, *words])


def _present(tool: str, listed: set[str], chain: str, rule: Sequence[str]) -> bool:
    """Whether ``rule`` is in ``chain``: found in the listing, or else asked of iptables itself
    (an iptables that prints a rule otherwise still gets no second copy)."""
    return _listed_form(tool, chain, rule) in listed or _has(tool, ["-C", chain, *rule])


def _has(tool: str, args: list[str]) -> bool:
    try:
        result = subprocess.run(
            [tool, "-w", *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TrialNetworkError(f"{Path(tool).name} did not answer: {exc}") from None
    return result.returncode == 0


def _run(tool: str, args: list[str]) -> None:
    try:
        result = subprocess.run(
            [tool, "-w", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TrialNetworkError(f"{Path(tool).name} did not answer: {exc}") from None
    if result.returncode != 0:
        why = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise TrialNetworkError(
            f"{Path(tool).name} {' '.join(args)}: {why}; trials run as their owners' uids are kept off "
            "this host's own services by this rule (the worker needs CAP_NET_ADMIN), or set "
            "[det] trial_firewall = false to run them without (docs/trial-isolation.md)"
        )


def keep_off_host_services(settings: Settings, uid: int, master_url: str) -> None:
    """What a root worker does before a trial of ``uid`` starts (a local process, or a container on
    the host's network): its uids reach the master's port and no other service of this host
    (``[det] trial_firewall``, on by default). Without a master URL no port is opened for one."""
    if not settings.trial_firewall:
        return
    uids = {settings.trial_uid_range, (uid, uid)}
    ensure_trial_firewall(uids, allowed_ports(master_ports(master_url), settings.trial_allowed_local_ports))


def master_ports(master_url: str) -> list[int]:
    """The port a trial reaches its master on: ``[port]``, or ``[]`` for an empty URL or one
    without a host (nothing to reach, so not port 80 by default)."""
    from urllib.parse import urlsplit

    parts = urlsplit(master_url)
    if not parts.hostname:
        return []
    try:
        port = parts.port
    except ValueError:
        return []
    return [port or (443 if parts.scheme == "https" else 80)]
