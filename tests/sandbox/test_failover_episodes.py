"""Two real sandbox servers behind one `env.sandbox_url` list; one is SIGKILLed while TIR episodes run against both:
the client's balancing and retries finish every episode, none scored on a sandbox error."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import httpx
from conftest import fresh_uid_base

import envs  # noqa: F401  (registers alprl/TIRMath-v0)
from envs.tir.tasks import generate_task
from sandbox.deploy.local_server import start_server

EPISODES = 24
KILL_AFTER = 6  # episodes finished before server A dies; the others are in flight or not started


def runs_of(url: str) -> int:
    return httpx.get(f"{url}/v1/info", timeout=5).json()["runs"]


def episode(urls: str, index: int) -> dict:
    """One TIR episode: a code turn (a quarter second of work, so runs are in flight when the server dies), then
    the answer the tool printed."""
    env = gym.make("alprl/TIRMath-v0", sandbox_url=urls, run_timeout_s=5.0).unwrapped
    task = generate_task("test", index)
    try:
        env.reset(seed=index, options={"task_id": task.task_id})
        obs, _, _, _, info = env.step(f"```python\nimport time\ntime.sleep(0.25)\nprint({task.answer})\n```\n")
        printed = obs.strip().removeprefix("Code execution result:").strip()
        _, reward, done, _, final = env.step(f"The answer is \\boxed{{{printed}}}.")
        return {"reward": reward, "done": done, "statuses": info["tool_statuses"],
                "sandbox_error": info["sandbox_error"] or final["sandbox_error"]}
    finally:
        env.close()


def test_killing_one_of_two_servers_mid_rollout_loses_no_episode():
    with start_server(workers=2, max_sessions=2, uid_base=fresh_uid_base(), preload_heavy="") as a, \
            start_server(workers=2, max_sessions=2, uid_base=fresh_uid_base(), preload_heavy="") as b:
        urls = f"{a.url},{b.url}"
        before_b = runs_of(b.url)
        finished = threading.Semaphore(0)
        killed = threading.Event()

        def killer() -> None:
            for _ in range(KILL_AFTER):
                finished.acquire()
            os.killpg(a.proc.pid, signal.SIGKILL)  # the server and its zygotes, no graceful shutdown
            killed.set()

        def run(i: int) -> dict:
            try:
                return episode(urls, i)
            finally:
                finished.release()

        threading.Thread(target=killer, daemon=True).start()
        with ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(run, range(EPISODES)))
        assert killed.is_set() and a.proc.wait(timeout=10) == -signal.SIGKILL
        assert [r["statuses"] for r in results] == [["Success"]] * EPISODES
        assert all(r["reward"] == 1.0 and r["done"] and not r["sandbox_error"] for r in results)
        assert runs_of(b.url) - before_b > EPISODES // 2  # B took over A's share after the kill
