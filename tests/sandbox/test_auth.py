"""API key and per-client in-flight cap (`sandbox.service.auth`) against real servers on loopback ports."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time

import httpx
import pytest
from conftest import fresh_uid_base

from sandbox.client import AsyncSandboxClient, SandboxAuthError, SandboxClient, make_runner
from sandbox.client.retry import RetryPolicy
from sandbox.deploy.local_server import start_server
from sandbox.service.auth import key_index, parse_keys, presented_key
from sandbox.settings import Settings, SettingsError

KEY, OTHER_KEY = "right-key-0123", "second-key-4567"
BEARER, OTHER = {"Authorization": f"Bearer {KEY}"}, {"Authorization": f"Bearer {OTHER_KEY}"}
SLOW = {"code": "import time; time.sleep(1.5); print('slow')", "language": "python", "run_timeout": 5}
ROUTES = [("GET", "/v1/info"), ("GET", "/healthz"), ("GET", "/metrics"), ("POST", "/run_code"),
          ("POST", "/execute"), ("POST", "/sessions"), ("POST", "/sessions/abc/execute"),
          ("DELETE", "/sessions/abc")]


def test_header_parsing_and_key_matching():
    basic = base64.b64encode(f"alprl:{KEY}".encode()).decode()
    assert presented_key(f"Bearer {KEY}") == KEY and presented_key(f"bearer  {KEY} ") == KEY
    assert presented_key(f"Basic {basic}") == KEY  # what a URL's user info becomes
    for junk in ("", KEY, "Basic !!!", "Basic " + base64.b64encode(b"\xff:x").decode(), "Digest abc"):
        assert presented_key(junk) == ""
    keys = parse_keys(f" {KEY} ,, {OTHER_KEY} ")
    assert keys == (KEY, OTHER_KEY) and parse_keys("") == ()
    assert (key_index(KEY, keys), key_index(OTHER_KEY, keys), key_index("", keys), key_index(KEY[:-1], keys)) \
        == (0, 1, None, None)


def test_settings_hide_the_key_and_check_the_cap():
    s = Settings.from_env({"SANDBOX_API_KEY": KEY, "SANDBOX_MAX_INFLIGHT_PER_CLIENT": "3"})
    assert (s.api_key, s.max_inflight_per_client) == (KEY, 3) and KEY not in repr(s)
    assert Settings.from_env({}).max_inflight_per_client == 64 and Settings.from_env({}).api_key == ""
    with pytest.raises(SettingsError, match="SANDBOX_MAX_INFLIGHT_PER_CLIENT=-1"):
        Settings.from_env({"SANDBOX_MAX_INFLIGHT_PER_CLIENT": "-1"})


@pytest.fixture(scope="module")
def keyed():
    """Two keys (two callers), each allowed one run in flight; two workers, so one caller leaves one free."""
    with start_server(workers=2, max_sessions=1, uid_base=fresh_uid_base(), preload_heavy="", retry_after_s=1,
                      api_key=f"{KEY},{OTHER_KEY}", max_inflight_per_client=1) as srv:
        yield srv.url


def counter(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", headers=BEARER).text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def runs(url: str) -> int:
    return httpx.get(f"{url}/v1/info", headers=BEARER).json()["runs"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY},
                                     {"Authorization": f"Bearer {KEY}x"}], ids=["none", "wrong", "no-scheme", "longer"])
def test_every_route_but_ping_needs_the_key(keyed, headers):
    with httpx.Client(base_url=keyed, headers=headers, timeout=10) as http:
        for method, path in ROUTES:
            resp = http.request(method, path, json={"code": "print(1)", "language": "python"})
            assert resp.status_code == 401, (method, path, resp.text)
            assert resp.headers["www-authenticate"].startswith("Bearer")
            assert "Bearer" in resp.json()["detail"]
        assert http.get("/v1/ping").json() == "pong"


def test_a_refused_request_runs_nothing(keyed, tmp_path):
    target = tmp_path / "made-by-the-run"
    tmp_path.chmod(0o777)  # so a run under a slot uid could write here, were it run
    code = f"open({str(target)!r}, 'w').write('ran')"
    before = runs(keyed)
    resp = httpx.post(f"{keyed}/run_code", json={"code": code, "language": "python"})
    assert resp.status_code == 401
    assert not target.exists() and runs(keyed) == before
    assert httpx.post(f"{keyed}/run_code", json={"code": code, "language": "python"}, headers=BEARER).status_code == 200
    assert runs(keyed) == before + 1  # the control: with the key the same request does run


def test_info_says_auth_is_on_and_never_shows_the_key(keyed):
    resp = httpx.get(f"{keyed}/v1/info", headers=BEARER)
    assert resp.json()["auth"] is True and resp.json()["max_inflight_per_client"] == 1
    health = httpx.get(f"{keyed}/healthz", headers=BEARER).text + httpx.get(f"{keyed}/metrics", headers=BEARER).text
    assert KEY not in resp.text + health and OTHER_KEY not in resp.text + health


def test_alprl_clients_send_the_key_from_the_environment(keyed, monkeypatch):
    monkeypatch.setenv("SANDBOX_API_KEY", KEY)
    runner = make_runner(keyed)
    assert runner.run("print(6 * 7)").stdout == "42\n"
    with runner.session() as sess:
        assert sess.run("x = 2").ok and sess.run("print(x + 1)").stdout == "3\n"
    runner.close()

    async def scenario():
        client = AsyncSandboxClient(keyed)
        result = await client.run("print('async')")
        await client.aclose()
        return result

    assert asyncio.run(scenario()).stdout == "async\n"


@pytest.mark.parametrize("env_key, says", [(None, "none was sent"), ("wrong", "rejected the API key")])
def test_missing_or_wrong_key_raises_once_naming_url_and_fix(keyed, monkeypatch, env_key, says):
    if env_key is None:
        monkeypatch.delenv("SANDBOX_API_KEY", raising=False)
    else:
        monkeypatch.setenv("SANDBOX_API_KEY", env_key)
    client = SandboxClient(keyed, retry=RetryPolicy(attempts=5, base_s=0.01))
    refused = counter(keyed, "sandbox_unauthorized_total")
    with pytest.raises(SandboxAuthError) as info:
        client.run("print(1)")
    assert keyed in str(info.value) and says in str(info.value) and "SANDBOX_API_KEY" in str(info.value)
    assert counter(keyed, "sandbox_unauthorized_total") == refused + 1  # one request: no retry loop
    assert client.ping()  # /v1/ping stays open: reachability checks still work
    client.close()


def test_sandbox_fusion_and_verl_carry_the_key_in_the_url(keyed):
    sandbox_fusion = pytest.importorskip("sandbox_fusion", reason="pip install sandbox-fusion (dev extra)")
    with_key = keyed.replace("http://", f"http://alprl:{KEY}@")  # requests sends it as Basic auth
    req = sandbox_fusion.RunCodeRequest(code="print('sf')", language="python")
    assert sandbox_fusion.run_code(req, endpoint=with_key).run_result.stdout == "sf\n"
    with pytest.raises(Exception):  # noqa: B017 - the official client raises its own error types
        sandbox_fusion.run_code(req, endpoint=keyed, max_attempts=1)
    async_res = asyncio.run(sandbox_fusion.run_code_async(req, endpoint=with_key))  # aiohttp: Basic from the URL
    assert async_res.run_result.stdout == "sf\n"
    # verl's reward path: requests.post(url ending in /run_code, data=json, JSON headers), no auth of its own
    requests = pytest.importorskip("requests")
    body = {"compile_timeout": 10, "run_timeout": 3, "code": "print(input())", "stdin": "7", "memory_limit_MB": 1024,
            "language": "python", "files": {}, "fetch_files": []}
    resp = requests.post(f"{with_key}/run_code", data=json.dumps(body), timeout=20,
                         headers={"Content-Type": "application/json", "Accept": "application/json"})
    assert resp.status_code == 200 and resp.json()["run_result"]["stdout"] == "7\n"


def _hold_a_slot(url: str, headers: dict, out: list) -> threading.Thread:
    """Start a slow run in a thread and return once the server counts it in flight."""
    thread = threading.Thread(target=lambda: out.append(httpx.post(f"{url}/run_code", json=SLOW, headers=headers,
                                                                   timeout=30)))
    thread.start()
    deadline = time.monotonic() + 10
    while httpx.get(f"{url}/v1/info", headers=BEARER).json()["in_flight"] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    return thread


def test_one_client_over_its_cap_gets_429_while_another_is_served(keyed):
    held: list[httpx.Response] = []
    thread = _hold_a_slot(keyed, BEARER, held)
    over = httpx.post(f"{keyed}/run_code", json=SLOW, headers=BEARER, timeout=30)
    assert over.status_code == 429 and over.headers["retry-after"] == "1"
    assert "SANDBOX_MAX_INFLIGHT_PER_CLIENT" in over.json()["detail"]
    start = time.monotonic()
    other = httpx.post(f"{keyed}/run_code", json={"code": "print('other')", "language": "python"}, headers=OTHER,
                       timeout=30)
    assert other.json()["run_result"]["stdout"] == "other\n"
    assert time.monotonic() - start < 1.2  # served on the free worker, not after the slow run
    assert thread.is_alive()  # the held run was still going: the caps are separate
    thread.join()
    assert held[0].json()["run_result"]["stdout"] == "slow\n"


def test_alprl_client_retries_429_until_its_slot_frees(keyed, monkeypatch):
    monkeypatch.setenv("SANDBOX_API_KEY", KEY)
    held: list[httpx.Response] = []
    limited = counter(keyed, "sandbox_client_limited_total")
    thread = _hold_a_slot(keyed, BEARER, held)
    client = SandboxClient(keyed, retry=RetryPolicy(attempts=10, base_s=0.05, max_s=0.5))
    assert client.run("print('after')").stdout == "after\n"
    assert counter(keyed, "sandbox_client_limited_total") > limited  # it was refused at least once first
    thread.join()
    client.close()


@pytest.fixture(scope="module")
def open_server():
    """No key; one run in flight per client address."""
    with start_server(workers=2, max_sessions=0, uid_base=fresh_uid_base(), preload_heavy="", retry_after_s=1,
                      api_key="", max_inflight_per_client=1) as srv:
        yield srv.url


def test_without_a_key_the_cap_is_per_address(open_server):
    assert httpx.get(f"{open_server}/v1/info").json()["auth"] is False
    held: list[httpx.Response] = []
    thread = _hold_a_slot(open_server, {}, held)
    assert httpx.post(f"{open_server}/run_code", json=SLOW, timeout=30).status_code == 429
    # Another loopback address is another client (Linux routes all of 127/8 to lo).
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(transport=transport, timeout=30) as other:
        resp = other.post(f"{open_server}/run_code", json={"code": "print(2)", "language": "python"})
        assert resp.status_code == 200 and resp.json()["run_result"]["stdout"] == "2\n"
    thread.join()
    assert held[0].status_code == 200
