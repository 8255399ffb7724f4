"""Webhooks cannot hurt the master or other users: a catastrophic TASK_LOG regex is run by RE2 while
the master answers others; URLs to loopback, private, link-local and metadata addresses are refused
when created and when delivered, unless an admin allows them, and the POST goes to the address
checked (no DNS rebinding); one owner's slow receiver delays no one else's deliveries; a failed
delivery says the same whichever way the receiver failed to answer (no port oracle); stored
strings and waiting deliveries have bounds.

The receivers are real HTTP servers on loopback; only the resolver's answers for one made-up name
are chosen by the test, as no DNS server of our own can stand in for the system's resolver."""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from det_airflow.master import schema, trial_logs, webhook_events, webhook_log_matcher, webhook_sender
from det_airflow.master.auth import hash_token
from det_airflow.master.lifecycle import now
from tests.unit.master.people_app import People
from tests.unit.master.test_webhooks import PAUSED, Receiver, create, free_port, receiver

__all__ = ["receiver"]  # the fixture, used here

TOKEN = "bobs-trial-token"


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    webhook_events.forget_cache()
    yield
    webhook_events.forget_cache()


@pytest.fixture(autouse=True)
def no_host_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default: no admin has allowed any host that is not public."""
    monkeypatch.delenv("AIRFLOW__DET__WEBHOOK_ALLOWED_HOSTS", raising=False)


def allow(monkeypatch: pytest.MonkeyPatch, hosts: str) -> None:
    """What an admin writes in airflow.cfg ``[det] webhook_allowed_hosts``."""
    monkeypatch.setenv("AIRFLOW__DET__WEBHOOK_ALLOWED_HOSTS", hosts)


def until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def deliveries(people: People, user: str, hook_id: int) -> list[dict[str, Any]]:
    answer = people.call(user, "GET", f"/webhooks/{hook_id}/deliveries")
    assert answer.status_code == 200, answer.text
    return list(answer.json()["deliveries"])


def name_in_config(people: People, experiment_id: int, webhook: str) -> None:
    """Make the experiment's config name ``webhook`` under integrations.webhooks."""
    with people.db.begin() as conn:
        config = dict(people.experiment(experiment_id).config)
        config["integrations"] = {"webhooks": {"webhook_name": [webhook]}}
        table = schema.experiments
        conn.execute(table.update().where(table.c.id == experiment_id).values(config=config))


def experiment_naming(people: People, owner: str, webhook: str) -> int:
    experiment_id = people.add_experiment(owner=owner)
    name_in_config(people, experiment_id, webhook)
    return experiment_id


def add_trial(people: People, experiment_id: int) -> int:
    with people.db.begin() as conn:
        return int(
            conn.execute(
                schema.trials.insert().values(
                    experiment_id=experiment_id,
                    request_id=1,
                    state="RUNNING",
                    hparams={},
                    trial_seed=1,
                    summary={},
                    run_id=1,
                    token_hash=hash_token(TOKEN),
                )
            ).inserted_primary_key[0]
        )


def pause(people: People, owner: str, experiment_id: int) -> None:
    assert people.call(owner, "POST", f"/experiments/{experiment_id}/pause").status_code == 200


# -- regexes --------------------------------------------------------------------------------------


def test_a_catastrophic_regex_is_run_by_re2_while_the_master_answers_others(
    people: People, receiver: Receiver, service_headers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    allow(monkeypatch, "127.0.0.1")
    regex = [{"triggerType": "TASK_LOG", "condition": {"regex": "(a+)+$"}}]
    made = create(people, "bob", name="bobs-logs", mode="SPECIFIC", url=receiver.url, triggers=regex)
    assert made.status_code == 200, made.text
    trial_id = add_trial(people, experiment_naming(people, "bob", "bobs-logs"))

    # Python's backtracking `re` needs minutes for each of the first three lines (the time doubles
    # with each `a`); RE2 microseconds. Only the last one matches.
    lines = ["a" * 29 + "!"] * 3 + ["aaaa"]
    started = time.monotonic()
    logged = people.client.post(
        f"/api/v1/internal/trials/{trial_id}/logs",
        json={"logs": [{"message": m} for m in lines]},
        headers=service_headers,
    )
    assert logged.status_code == 200, logged.text
    others = people.call("alice", "GET", "/webhooks")
    assert others.status_code == 200
    assert time.monotonic() - started < 30, "the master was held up by the regex"

    hook_id = made.json()["webhook"]["id"]
    (event,) = until(lambda: deliveries(people, "bob", hook_id), "the matching line's event")
    assert event["payload"]["event_data"]["log"] == "aaaa"
    assert event["payload"]["condition"] == {"regex": "(a+)+$"}


@pytest.mark.parametrize("regex", [r"(a)\1", r"error(?=:)", r"(?<!x)y"])
def test_a_regex_re2_cannot_run_in_linear_time_is_refused(people: People, regex: str) -> None:
    answer = create(
        people,
        "admin",
        url="http://93.184.216.34/hook",
        triggers=[{"triggerType": "TASK_LOG", "condition": {"regex": regex}}],
    )
    assert answer.status_code == 400
    detail = answer.json()["detail"]
    assert f"trigger 1: condition.regex {regex!r} does not compile with RE2" in detail


def test_a_metric_name_has_a_bound(people: People) -> None:
    def with_metric(name: str) -> Any:
        condition = {"metricName": name, "compareOp": ">", "value": 1}
        trigger = {"triggerType": "METRIC_THRESHOLD_EXCEEDED", "condition": condition}
        return create(people, "admin", name=f"m{len(name)}", url="http://93.184.216.34/", triggers=[trigger])

    huge = with_metric("x" * 1_000_000)
    assert huge.status_code == 400
    assert "trigger 1: condition.metricName names a metric in 1 to 256 characters" in huge.json()["detail"]
    assert with_metric("x" * 256).status_code == 200


# -- where a webhook may send ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://[::1]/hook",
        "http://2130706433/hook",
        "http://0x7f.1/hook",
        "http://0.0.0.0:8793/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[::ffff:169.254.169.254]/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
        "http://10.0.0.5/hook",
        "http://192.168.1.1/hook",
        "http://[fe80::1]/hook",
        "http://224.0.0.1/hook",
    ],
)
def test_addresses_that_are_not_public_are_refused_at_creation(people: People, url: str) -> None:
    answer = create(people, "alice", mode="SPECIFIC", url=url)
    assert answer.status_code == 400, answer.text
    detail = answer.json()["detail"]
    assert detail.startswith(f"webhook url {url!r}: ")
    assert "does not resolve to public addresses only" in detail
    assert "webhook_allowed_hosts" in detail
    assert people.call("admin", "GET", "/webhooks").json()["webhooks"] == []


def test_a_user_name_or_password_in_the_url_is_refused(people: People) -> None:
    url = "http://user:secret@93.184.216.34/hook"
    answer = create(people, "alice", mode="SPECIFIC", url=url)
    assert answer.status_code == 400
    assert answer.json()["detail"] == (
        f"webhook url {url!r}: a user name or password in the address is not allowed; "
        "receivers check the signature instead"
    )


def test_public_addresses_and_what_an_admin_allows_pass(
    people: People, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (
        create(people, "alice", name="public", mode="SPECIFIC", url="http://93.184.216.34/h").status_code
        == 200
    )
    allow(monkeypatch, "localhost, 10.0.0.0/8, 127.0.0.1, ::1")
    for name, url in (
        ("by-name", "http://localhost:9/h"),
        ("by-network", "http://10.1.2.3/h"),
        ("by-address", "http://127.0.0.1:9/h"),
    ):
        answer = create(people, "alice", name=name, mode="SPECIFIC", url=url)
        assert answer.status_code == 200, answer.text
    refused = create(people, "alice", name="other", mode="SPECIFIC", url="http://192.168.1.1/h")
    assert refused.status_code == 400


def test_a_webhook_stored_before_the_check_is_not_delivered_to_loopback(
    people: People, receiver: Receiver
) -> None:
    with people.db.begin() as conn:
        conn.execute(
            schema.webhooks.insert().values(
                name="old",
                url=receiver.url,
                webhook_type="DEFAULT",
                mode="WORKSPACE",
                triggers=PAUSED,
                signing_key="k" * 64,
                owner="bob",
                experiments_of=None,
                created_at=now(),
            )
        )
    pause(people, "alice", people.add_experiment(owner="alice"))
    assert webhook_sender.deliver_due(people.db) == 0
    assert receiver.posts == []
    (delivery,) = deliveries(people, "admin", 1)
    assert delivery["state"] == "PENDING"
    assert delivery["lastError"] == (
        "not sent: the address does not resolve to public addresses only, and airflow.cfg [det] "
        "webhook_allowed_hosts does not list it"
    )


class Resolver:
    """The system's resolver, except for one name, whose answers the test sets."""

    NAME = "hooks.rebinding.example"

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.answers: list[str] = []
        self.last = "127.0.0.1"
        real = socket.getaddrinfo

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if host != self.NAME:
                return real(host, port, *args, **kwargs)
            address = self.answers.pop(0) if self.answers else self.last
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port)))]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_the_post_goes_to_the_address_checked_not_where_the_name_points_a_moment_later(
    people: People, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolver = Resolver(monkeypatch)
    allow(monkeypatch, "127.0.0.2")
    for _ in range(20):  # one port on both loopback addresses
        good = Receiver.on("127.0.0.2")
        try:
            evil = Receiver.on("127.0.0.1", good.port)
            break
        except OSError:
            good.close()
    else:
        pytest.skip("no port free on both 127.0.0.1 and 127.0.0.2")
    try:
        url = f"http://{Resolver.NAME}:{good.port}/hook"
        refused = create(people, "admin", name="direct", url=url)  # the name points at 127.0.0.1
        assert refused.status_code == 400

        resolver.answers = ["127.0.0.2"]  # allowed, then 127.0.0.1 again
        made = create(people, "admin", name="rebinding", url=url)
        assert made.status_code == 200, made.text
        pause(people, "alice", people.add_experiment(owner="alice"))
        resolver.answers = ["127.0.0.2"]  # for the check at delivery; any later lookup: 127.0.0.1
        assert webhook_sender.deliver_due(people.db) == 1
        assert len(good.posts) == 1 and evil.posts == []
        assert good.posts[0][0]["Host"] == f"{Resolver.NAME}:{good.port}"
    finally:
        good.close()
        evil.close()


def self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A certificate for ``name`` that is its own authority, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    start = datetime.now(UTC) - timedelta(minutes=5)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def test_tls_is_checked_on_the_name_while_the_connection_goes_to_the_address(
    people: People, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    resolver = Resolver(monkeypatch)
    resolver.last = "127.0.0.2"
    allow(monkeypatch, "127.0.0.2")
    trusted, key = self_signed(tmp_path, Resolver.NAME)
    other, other_key = self_signed(tmp_path, "other.example")
    monkeypatch.setenv("SSL_CERT_FILE", str(trusted))  # the receivers' authority, as an admin sets it
    receivers = {}
    for label, (cert_path, key_path) in {"right": (trusted, key), "wrong": (other, other_key)}.items():
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert_path, key_path)
        receivers[label] = Receiver.on("127.0.0.2", tls=tls)
    try:
        for label, receiver in receivers.items():
            url = f"https://{Resolver.NAME}:{receiver.port}/hook"
            assert create(people, "admin", name=label, url=url).status_code == 200
        pause(people, "alice", people.add_experiment(owner="alice"))
        assert webhook_sender.deliver_due(people.db) == 1
    finally:
        for receiver in receivers.values():
            receiver.close()
    assert len(receivers["right"].posts) == 1 and receivers["wrong"].posts == []
    assert receivers["right"].posts[0][0]["Host"] == f"{Resolver.NAME}:{receivers['right'].port}"
    wrong = next(
        h for h in people.call("admin", "GET", "/webhooks").json()["webhooks"] if h["name"] == "wrong"
    )
    assert deliveries(people, "admin", wrong["id"])[0]["lastError"].startswith("no answer: ")


# -- one owner's receiver, and no port oracle -----------------------------------------------------


class HeldReceiver(Receiver):
    """A receiver that holds every POST open until it is released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held = 0
        super().__init__()

    def answer(self, handler: Any, body: bytes) -> None:
        self.held += 1
        self.release.wait(60)
        super().answer(handler, body)


def test_a_slow_receiver_of_bobs_delays_no_delivery_of_alices(
    people: People, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow(monkeypatch, "127.0.0.1")
    slow = HeldReceiver()
    try:
        assert create(people, "bob", name="bobs", mode="SPECIFIC", url=slow.url).status_code == 200
        assert create(people, "alice", name="alices", mode="SPECIFIC", url=receiver.url).status_code == 200
        for _ in range(4):  # bob's events come first
            pause(people, "bob", experiment_naming(people, "bob", "bobs"))
        pause(people, "alice", experiment_naming(people, "alice", "alices"))

        assert webhook_sender.deliver_in_background(people.db)  # what the housekeeping job does
        until(lambda: receiver.posts, "alice's event delivered", timeout=20)
        assert slow.held >= 1 and not slow.release.is_set()  # while bob's receiver holds his
        alices = people.call("alice", "GET", "/webhooks").json()["webhooks"][0]["id"]
        assert [d["state"] for d in deliveries(people, "alice", alices)] == ["DELIVERED"]
    finally:
        slow.release.set()
        until(
            lambda: not any(t.name == "det-webhook-sender" for t in threading.enumerate()),
            "the senders done",
            timeout=60,
        )
        slow.close()


class Listener:
    """A TCP port on loopback that answers no HTTP: ``behaviour`` is what it does with a connection."""

    def __init__(self, behaviour: str) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self.behaviour = behaviour
        self.open: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.behaviour == "banner":  # another protocol's greeting, then goodbye
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                conn.close()
            elif self.behaviour == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
            else:  # silent: holds the connection and says nothing
                self.open.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.open:
            conn.close()


def test_a_failed_delivery_says_the_same_whatever_the_port_did(
    people: People, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow(monkeypatch, "127.0.0.1")
    listeners = [Listener(b) for b in ("banner", "reset", "silent")]
    try:
        ports = {"closed": free_port(), **{x.behaviour: x.port for x in listeners}}
        for kind, port in ports.items():
            made = create(people, "admin", name=kind, url=f"http://127.0.0.1:{port}/hook")
            assert made.status_code == 200, made.text
        pause(people, "alice", people.add_experiment(owner="alice"))
        assert webhook_sender.deliver_due(people.db) == 0
    finally:
        for listener in listeners:
            listener.close()
    hooks = people.call("admin", "GET", "/webhooks").json()["webhooks"]
    errors = {h["name"]: deliveries(people, "admin", h["id"])[0]["lastError"] for h in hooks}
    assert set(errors) == set(ports)
    assert len(set(errors.values())) == 1, errors
    (error,) = set(errors.values())
    assert error.startswith("no answer: ")
    assert not any(str(port) in error for port in ports.values())


def test_one_owners_waiting_events_have_a_bound(people: People, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook_events, "MAX_PENDING_PER_OWNER", 2)
    made = create(people, "alice", mode="SPECIFIC", url="http://93.184.216.34:9/hook")
    assert made.status_code == 200
    for _ in range(3):
        pause(people, "alice", experiment_naming(people, "alice", "hook"))
    found = deliveries(people, "alice", made.json()["webhook"]["id"])
    assert [d["state"] for d in found] == ["PENDING", "PENDING", "GAVE_UP"]
    assert found[2]["lastError"] == "not sent: 2 events of alice's webhooks were already waiting to be sent"
    assert found[2]["payload"]["event_type"] == "EXPERIMENT_STATE_CHANGE"


def test_a_bad_allowed_host_fails_webhooks_naming_the_setting(
    people: People, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow(monkeypatch, "hooks.corp.example, not a host!")
    answer = create(people, "admin", url="http://93.184.216.34/hook")
    assert answer.status_code == 400
    assert answer.json()["detail"] == (
        "airflow.cfg [det] webhook_allowed_hosts: 'not a host!' is not a host name, an IP address "
        "or a network such as 10.1.2.0/24"
    )


def test_lines_are_matched_once_stored_and_not_when_their_insert_rolls_back(
    people: People, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow(monkeypatch, "127.0.0.1")
    regex = [{"triggerType": "TASK_LOG", "condition": {"regex": "CUDA out of memory"}}]
    made = create(people, "admin", url=receiver.url, mode="WORKSPACE", triggers=regex)
    hook_id = made.json()["webhook"]["id"]
    trial_id = add_trial(people, people.add_experiment(owner="alice"))

    with pytest.raises(RuntimeError), people.db.begin() as conn:
        trial_logs.append_logs(conn, trial_id, [{"message": "CUDA out of memory (rolled back)"}])
        raise RuntimeError("the request failed after the insert")
    assert webhook_log_matcher.wait_matched(timeout=30)
    assert deliveries(people, "admin", hook_id) == []

    with people.db.begin() as conn:
        trial_logs.append_logs(conn, trial_id, [{"message": "CUDA out of memory (stored)"}])
    assert webhook_log_matcher.wait_matched(timeout=30)
    (event,) = deliveries(people, "admin", hook_id)
    assert event["payload"]["event_data"]["log"] == "CUDA out of memory (stored)"
