"""Trials run as their owners' uids are kept off the host's own services: the rule set that does it,
and, as root with iptables, what a process of a trial uid can and cannot connect to."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_airflow.trial_process import _network
from det_airflow.trial_process._network import (
    CHAIN,
    DNS_PORT,
    TrialNetworkError,
    allowed_ports,
    chain_rules,
    ensure_trial_firewall,
    ephemeral_range,
    jump_rule,
)

# A uid of the default trial range that no test's trial uses for anything else.
TRIAL_UID = 65519


def test_the_master_the_ephemeral_range_dns_and_the_admins_ports_are_allowed(tmp_path: Path) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("40000\t50000\n")
    assert ephemeral_range(range_file) == (40000, 50000)
    assert allowed_ports([8080], [(9000, 9010)], range_file=range_file) == [
        (DNS_PORT, DNS_PORT),
        (8080, 8080),
        (9000, 9010),
        (40000, 50000),
    ]


def test_the_master_port_comes_from_its_url_and_no_url_opens_none() -> None:
    assert _network.master_ports("http://127.0.0.1:8080") == [8080]
    assert _network.master_ports("https://det.example.com") == [443]
    assert _network.master_ports("http://det.example.com/") == [80]
    assert _network.master_ports("") == []
    assert _network.master_ports("/just/a/path") == []
    assert _network.master_ports("http://127.0.0.1:99999") == []


def test_an_unreadable_range_is_linuxs_default(tmp_path: Path) -> None:
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)


def test_other_machines_pass_and_the_hosts_own_addresses_are_refused_last() -> None:
    rules = chain_rules([(8080, 8080), (32768, 60999)])
    assert rules[0] == ["-m", "addrtype", "!", "--dst-type", "LOCAL", "-j", "RETURN"]
    assert ["-p", "tcp", "--dport", "8080", "-j", "RETURN"] in rules
    assert ["-p", "udp", "--dport", "32768:60999", "-j", "RETURN"] in rules
    assert rules[-2:] == [["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"], ["-j", "REJECT"]]
    assert jump_rule((61184, 65519)) == ["-m", "owner", "--uid-owner", "61184-65519", "-j", CHAIN]
    assert jump_rule((70000, 70000)) == ["-m", "owner", "--uid-owner", "70000", "-j", CHAIN]


def test_without_iptables_the_error_names_the_package_and_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "which", lambda _tool: None)
    monkeypatch.setattr(_network, "Path", lambda *_a: Path("/nonexistent"))
    with pytest.raises(TrialNetworkError, match="apt-get install iptables.*trial_firewall = false"):
        ensure_trial_firewall([(61184, 65519)], [(8080, 8080)])


def _connect_as(uid: int, port: int) -> str:
    """Connect to 127.0.0.1:``port`` from a child process of ``uid``: 'connected' or the error."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: becomes the trial uid, connects, reports, exits
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                answer = "connected"
        except OSError as exc:
            answer = type(exc).__name__
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return answer


@pytest.fixture
def listeners() -> Iterator[dict[str, int]]:
    """Servers on loopback: a platform service outside the ephemeral range, a 'master' and a
    trial's own server on an ephemeral port (port 0)."""
    low, high = ephemeral_range()
    made = {}
    sockets = []
    for name in ("service", "master"):
        for port in range(20000, low):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            s.listen()
            sockets.append(s)
            made[name] = port
            break
    trial = socket.socket()
    trial.bind(("127.0.0.1", 0))
    trial.listen()
    sockets.append(trial)
    made["trial"] = trial.getsockname()[1]
    assert low <= made["trial"] <= high
    yield made
    for s in sockets:
        s.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="installs firewall rules and switches uids: root only")
def test_a_trial_uid_reaches_the_master_and_trials_but_no_service_of_the_host(
    listeners: dict[str, int],
) -> None:
    before = _connect_as(TRIAL_UID, listeners["service"])
    ensure_trial_firewall([(61184, 65519)], allowed_ports([listeners["master"]]))
    ensure_trial_firewall([(61184, 65519)], allowed_ports([listeners["master"]]))  # idempotent
    assert _connect_as(TRIAL_UID, listeners["service"]) == "ConnectionRefusedError", before
    assert _connect_as(TRIAL_UID, listeners["master"]) == "connected"
    assert _connect_as(TRIAL_UID, listeners["trial"]) == "connected"
    assert _connect_as(0, listeners["service"]) == "connected"  # the platform itself is not walled


@pytest.mark.skipif(os.geteuid() != 0, reason="installs firewall rules: root only")
def test_a_second_trial_start_reads_the_rules_once_per_tool_and_adds_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each trial start checks the rules; once they are in place that is one listing per tool (not
    one iptables run per rule), and no rule is ever added twice."""
    port = 19999  # outside the ephemeral range; no other test opens it for trials
    ensure_trial_firewall([(61184, 65519)], allowed_ports([port]))
    calls: list[list[str]] = []
    run = _network.subprocess.run

    def counted(argv: list[str], **kwargs: object) -> object:
        calls.append(argv)
        return run(argv, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(_network.subprocess, "run", counted)
    ensure_trial_firewall([(61184, 65519)], allowed_ports([port]))
    assert [(Path(argv[0]).name, argv[1:]) for argv in calls] == [
        ("iptables", ["-w", "-S"]),
        ("ip6tables", ["-w", "-S"]),
    ]
    monkeypatch.undo()
    for tool in ("iptables", "ip6tables"):
        listing = subprocess.run([tool, "-w", "-S", CHAIN], capture_output=True, text=True, check=True)
        assert sorted(line for line in listing.stdout.splitlines() if f"--dport {port} " in line) == [
            f"-A {CHAIN} -p tcp -m tcp --dport {port} -j RETURN",
            f"-A {CHAIN} -p udp -m udp --dport {port} -j RETURN",
        ], tool
