"""What the adapters to the real ALFWorld and WebShop need, as stand-ins (tests/envs/adapter_stand_ins.py), so
the registry-wide checks (test_registry.py) cover them too. alprl/OpenEnv-v0 plays alprl's household served as an
OpenEnv environment (envs/adapters/openenv_server.py) there, so those checks hold across both directions."""

from __future__ import annotations

import gymnasium as gym
import pytest
from adapter_stand_ins import HouseholdGame, serve, webshop_app, write_alfworld_data


@pytest.fixture(scope="session")
def alfworld_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("alfworld")
    write_alfworld_data(root)
    return root


@pytest.fixture(scope="session")
def webshop_server():
    """(base URL, app) of AgentGym's WebShop API over generated shops, served by uvicorn on a loopback port."""
    app = webshop_app()
    with serve(app) as url:
        yield url, app


@pytest.fixture(scope="session")
def adapter_kwargs(alfworld_data, webshop_server):
    return {"alprl/ALFWorld-v0": {"data_path": str(alfworld_data), "start_game": HouseholdGame},
            "alprl/WebShopServer-v0": {"server_url": webshop_server[0]}}


@pytest.fixture(scope="session")
def openenv_household():
    """Base URL of alprl's household (3-step episodes) served by openenv-core's server on a loopback port."""
    pytest.importorskip("openenv", reason="openenv-core not installed (the openenv extra)")
    from envs.adapters.openenv_server import build_app

    with serve(build_app("household", {"max_steps": 3})) as url:
        yield url


@pytest.fixture
def make(adapter_kwargs, request):
    """`make(env_id)`: the registered env (unwrapped unless `unwrapped=False`), adapters on their stand-ins."""

    def build(env_id: str, unwrapped: bool = True) -> gym.Env:
        kwargs = adapter_kwargs.get(env_id, {})
        if env_id == "alprl/OpenEnv-v0":  # started only where a test asks for it (openenv-core loads for seconds)
            kwargs = {"base_url": request.getfixturevalue("openenv_household")}
        env = gym.make(env_id, **kwargs)
        return env.unwrapped if unwrapped else env

    return build
