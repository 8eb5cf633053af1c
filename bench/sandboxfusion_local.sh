#!/usr/bin/env bash
# A real SandboxFusion server on this machine without Docker or conda, as docs/sandbox.md ("Against a real
# SandboxFusion server") sets it up, for `bench/sandbox_throughput.py --peer`:
#
#   bench/sandboxfusion_local.sh SF_SOURCE DIR [PORT]
#
# SF_SOURCE: a SandboxFusion checkout (the bench's run used commit 469de0845cb7); DIR: where the copy, its two
# venvs and the stand-in conda root go (kept across sessions if DIR is). Starts the server in the background on
# 127.0.0.1:PORT (default 8181) and prints its pid for `--peer-pid`. Python 3.11 from PATH (PYTHON to override).
set -euo pipefail
src=$(realpath "$1"); dir=$(realpath -m "$2"); port=${3:-8181}; py=${PYTHON:-python3.11}
mkdir -p "$dir/sf" "$dir/conda/condabin" "$dir/conda/bin" "$dir/conda/envs" "$dir/home"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then git -C "$src" archive HEAD | tar -x -C "$dir/sf"  # a work tree or a bare repo
else cp -a "$src/." "$dir/sf"; fi
mkdir -p "$dir/sf/docs/build"  # its app mounts the built docs site
# its runner sources <conda root>/bin/activate <env> and runs that env's python: a stand-in root does the same
printf 'export PATH=%s/conda/envs/$1/bin:$PATH\n' "$dir" > "$dir/conda/bin/activate"
[ -x "$dir/conda/envs/sandbox/bin/python" ] || "$py" -m venv "$dir/conda/envs/sandbox"
[ -x "$dir/conda/envs/sandbox-runtime/bin/python" ] || "$py" -m venv "$dir/conda/envs/sandbox-runtime"
# the server's poetry.lock versions at that commit; the runtime gets the numpy alprl's runs import
"$dir/conda/envs/sandbox/bin/pip" install -q "pydantic==2.6.4" "fastapi==0.103.2" "uvicorn[standard]==0.25.0" \
    "structlog==23.3.0" "psutil==5.9.8" "aiofiles==23.2.1" "aiohttp==3.10.6" "tenacity==8.5.0" \
    "databases[aiomysql,aiosqlite]==0.9.0" "transformers==4.45.0" pyyaml
"$dir/conda/envs/sandbox-runtime/bin/pip" install -q "numpy==2.3.5"
cd "$dir/sf"
# HOME: an empty one, so the runner's `bash -c` reads no ~/.bashrc (a pyenv shim there replaced the runtime python)
HOME="$dir/home" PATH="$dir/conda/envs/sandbox/bin:$PATH" setsid nohup uvicorn sandbox.server.server:app \
    --host 127.0.0.1 --port "$port" > "$dir/server.log" 2>&1 &
for _ in $(seq 60); do
    if curl -sf -X POST "http://127.0.0.1:$port/run_code" -H 'Content-Type: application/json' \
        -d '{"code": "print(6 * 7)", "language": "python"}' | grep -q '"stdout":"42'; then
        echo "SandboxFusion on http://127.0.0.1:$port, pid $(pgrep -f "uvicorn sandbox.server.server:app --host 127.0.0.1 --port $port" | head -1)"
        exit 0
    fi
    sleep 1
done
echo "SandboxFusion did not answer on port $port within 60 s; see $dir/server.log" >&2
exit 1
