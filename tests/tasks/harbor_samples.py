"""Hand-written tasks in Harbor's and Terminal-Bench 1's published layouts (none of theirs).

Their Dockerfiles say ``FROM debian:bookworm``, as published tasks do; the tests map that to
the local debootstrap image (``base_images``). Tasks that share an environment share its
bytes, so they share one cached image.
"""

from __future__ import annotations

from pathlib import Path

BASE = "localhost/openforge-debian:bookworm"
BASE_IMAGES = {"debian:bookworm": BASE, "ubuntu:24.04": BASE}

PYTEST_DOCKERFILE = """\
FROM debian:bookworm
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-pytest \\
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY data.txt /app/data.txt
"""
BARE_DOCKERFILE = "FROM debian:bookworm\nWORKDIR /app\nCOPY data.txt /app/data.txt\n"
DATA = "alpha\nbeta\ngamma\n"
# Harbor's pytest template: the reward file says whether pytest passed.
PYTEST_TEST_SH = """\
#!/bin/bash
cd /app || exit 1
pytest -q /tests/test_count.py
if [ $? -eq 0 ]; then r=1; else r=0; fi
echo $r > /logs/verifier/reward.txt
"""
TEST_COUNT_PY = """\
from pathlib import Path

def test_count():
    assert Path("/app/count.txt").read_text().strip() == "3"
"""
SOLVE_COUNT = "#!/bin/bash\nwc -l < /app/data.txt > /app/count.txt\n"


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def harbor_pytest(root: Path, name: str = "count-lines") -> Path:
    """A single-step Harbor task whose tests need pytest (installed by its Dockerfile)."""
    return _write(root / name, {
        "task.toml": (
            'schema_version = "1.1"\n[task]\nname = "samples/' + name + '"\n'
            '[metadata]\ntags = ["files"]\n[agent]\ntimeout_sec = 60.0\n'
            '[verifier]\ntimeout_sec = 60.0\nenv = { MARK = "v" }\n'
            "[environment]\nbuild_timeout_sec = 600.0\ncpus = 1\nmemory_mb = 512\n"
            'env = { GREETING = "${OPENFORGE_SAMPLE_UNSET:-hello}" }\n'
        ),
        "instruction.md": "Write the number of lines of /app/data.txt to /app/count.txt.\n",
        "environment/Dockerfile": PYTEST_DOCKERFILE,
        "environment/data.txt": DATA,
        "tests/test.sh": PYTEST_TEST_SH,
        "tests/test_count.py": TEST_COUNT_PY,
        "solution/solve.sh": SOLVE_COUNT,
    })  # fmt: skip


def harbor_multikey(root: Path) -> Path:
    """A task whose verifier writes a reward.json with two keys (correctness, style)."""
    test_sh = (
        "#!/bin/bash\n"
        'c=0; s=0\n[ "$(cat /app/count.txt 2>/dev/null)" = 3 ] && c=1\n'
        "[ -f /app/NOTES.md ] && s=1\n"
        'printf \'{"correctness": %s, "style": %s}\' $c $s > /logs/verifier/reward.json\n'
    )
    return _write(root / "multikey", {
        "task.toml": "[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n",
        "instruction.md": "Count the lines of /app/data.txt into /app/count.txt; add NOTES.md.\n",
        "environment/Dockerfile": PYTEST_DOCKERFILE,
        "environment/data.txt": DATA,
        "tests/test.sh": test_sh,
        "solution/solve.sh": SOLVE_COUNT + "echo done > /app/NOTES.md\n",
    })  # fmt: skip


def harbor_steps(root: Path) -> Path:
    """A two-step task: step one gates on reward 1; step two's setup.sh seeds a file."""
    return _write(root / "two-steps", {
        "task.toml": (
            'multi_step_reward_strategy = "mean"\n[agent]\ntimeout_sec = 60.0\n'
            '[[steps]]\nname = "one"\nmin_reward = 1.0\n[[steps]]\nname = "two"\n'
            "[steps.verifier]\ntimeout_sec = 30.0\n"
        ),
        "environment/Dockerfile": PYTEST_DOCKERFILE,
        "environment/data.txt": DATA,
        "tests/test_count.py": TEST_COUNT_PY,
        "steps/one/instruction.md": "Write the line count of /app/data.txt to /app/count.txt.\n",
        "steps/one/tests/test.sh": PYTEST_TEST_SH,
        "steps/one/solution/solve.sh": SOLVE_COUNT,
        "steps/two/instruction.md": "Copy /app/seed.txt to /app/out.txt.\n",
        "steps/two/workdir/setup.sh": "echo seeded > seed.txt\n",
        "steps/two/tests/test.sh": (
            "#!/bin/bash\nif cmp -s /app/seed.txt /app/out.txt; then r=1; else r=0; fi\n"
            "echo $r > /logs/verifier/reward.txt\n"
        ),
        "steps/two/solution/solve.sh": "cp /app/seed.txt /app/out.txt\n",
    })  # fmt: skip


GREET_TEST_SH = """\
#!/bin/bash
[ "$(/app/greet.sh 2>/dev/null)" = "$EXPECTED" ] && r=1 || r=0
echo $r > /logs/verifier/reward.txt
"""


def harbor_healthcheck(root: Path, first_check: str | None = None) -> Path:
    """Two steps, as the cookbook's multi-step recipe: step two's healthcheck needs what step
    one's agent had to make (``/app/greet.sh``); no ``min_reward``, so a failed step one still
    reaches it. ``first_check``: a healthcheck on step one too (before any agent ran)."""
    first = (
        ""
        if first_check is None
        else f'[steps.healthcheck]\ncommand = "{first_check}"\ninterval_sec = 0.2\nretries = 2\n'
    )
    return _write(root / "greet-steps", {
        "task.toml": (
            'schema_version = "1.1"\n[environment]\nworkdir = "/app"\nmcp_servers = []\n'
            f'[[steps]]\nname = "scaffold"\n{first}'
            '[steps.verifier.env]\nEXPECTED = "hello"\n'
            '[[steps]]\nname = "implement"\n[steps.verifier.env]\nEXPECTED = "Hello, Harbor!"\n'
            '[steps.healthcheck]\ncommand = "test -x /app/greet.sh"\ninterval_sec = 0.2\n'
            "timeout_sec = 5\nretries = 3\nstart_period_sec = 0.5\nstart_interval_sec = 0.1\n"
        ),
        "environment/Dockerfile": "FROM debian:bookworm\nWORKDIR /app\n",
        "tests/test.sh": GREET_TEST_SH,
        "steps/scaffold/instruction.md": "Make /app/greet.sh, an executable that prints hello.\n",
        "steps/scaffold/solution/solve.sh": (
            "#!/bin/bash\nprintf '#!/bin/sh\\necho hello\\n' > /app/greet.sh\n"
            "chmod +x /app/greet.sh\n"
        ),
        "steps/implement/instruction.md": "Make /app/greet.sh print Hello, Harbor!\n",
        "steps/implement/solution/solve.sh": (
            "#!/bin/bash\nprintf '#!/bin/sh\\necho \"Hello, Harbor!\"\\n' > /app/greet.sh\n"
        ),
    })  # fmt: skip


def harbor_skills(root: Path) -> Path:
    """A task whose image holds a skill under ``/skills`` (``skills_dir``), as the cookbook's
    skills recipe: the Dockerfile copies ``environment/skills/`` there."""
    return _write(root / "skills", {
        "task.toml": '[environment]\nskills_dir = "/skills"\n[verifier]\ntimeout_sec = 30.0\n',
        "instruction.md": "Use the make-greeting skill.\n",
        "environment/Dockerfile": "FROM debian:bookworm\nCOPY skills/ /skills/\nWORKDIR /app\n",
        "environment/skills/make-greeting/SKILL.md": (
            "---\nname: make-greeting\ndescription: Write the greeting file.\n---\n"
            "Write `Hello from skills!` to /app/greeting.txt.\n"
        ),
        "tests/test.sh": (
            "#!/bin/bash\ngrep -qx 'Hello from skills!' /app/greeting.txt && r=1 || r=0\n"
            "echo $r > /logs/verifier/reward.txt\n"
        ),
        "solution/solve.sh": "#!/bin/bash\necho 'Hello from skills!' > /app/greeting.txt\n",
    })  # fmt: skip


def harbor_broken(root: Path) -> Path:
    """A verifier that cannot run in its environment: pytest is not installed there."""
    return _write(root / "no-pytest", {
        "task.toml": "[verifier]\ntimeout_sec = 60.0\n",
        "instruction.md": "Write the number of lines of /app/data.txt to /app/count.txt.\n",
        "environment/Dockerfile": BARE_DOCKERFILE,
        "environment/data.txt": DATA,
        "tests/test.sh": PYTEST_TEST_SH,
        "tests/test_count.py": TEST_COUNT_PY,
        "solution/solve.sh": SOLVE_COUNT,
    })  # fmt: skip


def harbor_entrypoint(root: Path) -> Path:
    """A task whose image's ENTRYPOINT sets it up (a hosts entry, a background server on
    port 8080) and ends in ``exec "$@"``, as Harbor starts images: the solution and the
    verifier reach the server by that host name."""
    dockerfile = (
        "FROM debian:bookworm\nRUN apt-get update -qq && apt-get install -y -qq "
        "--no-install-recommends python3 curl && rm -rf /var/lib/apt/lists/*\n"
        "COPY entrypoint.sh /entrypoint.sh\nRUN chmod +x /entrypoint.sh\n"
        'ENTRYPOINT ["/entrypoint.sh"]\nWORKDIR /app\n'
    )
    entrypoint = (
        "#!/bin/bash\nset -euo pipefail\necho '127.0.0.1 api.task.test' >> /etc/hosts\n"
        "mkdir -p /srv && echo secret-42 > /srv/token\n"
        "(cd /srv && python3 -m http.server 8080 >/dev/null 2>&1 &)\n"
        'exec "$@"\n'
    )
    fetch = (
        "curl -sf --retry 20 --retry-connrefused --retry-delay 1 http://api.task.test:8080/token"
    )
    return _write(root / "entrypoint", {
        "task.toml": "[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n",
        "instruction.md": "Fetch http://api.task.test:8080/token into /app/token.txt.\n",
        "environment/Dockerfile": dockerfile,
        "environment/entrypoint.sh": entrypoint,
        "tests/test.sh": (
            f"#!/bin/bash\nwant=$({fetch})\n"
            'if [ -n "$want" ] && [ "$(cat /app/token.txt 2>/dev/null)" = "$want" ]; then r=1; '
            "else r=0; fi\necho $r > /logs/verifier/reward.txt\n"
        ),
        "solution/solve.sh": f"#!/bin/bash\n{fetch} > /app/token.txt\n",
    })  # fmt: skip


def terminal_bench(root: Path) -> Path:
    """A Terminal-Bench 1 task: task.yaml, Dockerfile, run-tests.sh, tests/, solution.sh."""
    return _write(root / "tb-count", {
        "task.yaml": (
            "instruction: |-\n  Write the number of lines of /app/data.txt to /app/count.txt.\n"
            "difficulty: easy\ncategory: file-operations\ntags: [files]\nparser_name: pytest\n"
            "max_agent_timeout_sec: 60.0\nmax_test_timeout_sec: 60.0\n"
            "run_tests_in_same_shell: false\n"
        ),
        "Dockerfile": PYTEST_DOCKERFILE,
        "data.txt": DATA,
        "docker-compose.yaml": (
            "services:\n  client:\n    build:\n      context: .\n      dockerfile: Dockerfile\n"
            "    environment:\n      - TEST_DIR=${T_BENCH_TEST_DIR}\n"
        ),
        "run-tests.sh": "#!/bin/bash\npytest -rA $TEST_DIR/test_outputs.py\n",
        "tests/test_outputs.py": TEST_COUNT_PY,
        "solution.sh": SOLVE_COUNT,
    })  # fmt: skip


# Harbor's shape, with tests that run the agent's own program (as many published tasks do):
# its output and a pytest check on count.txt must both be right.
RUNS_AGENT_TEST_SH = """\
#!/bin/bash
cd /app || exit 1
out=$(python3 /app/count.py 2>/dev/null)
pytest -q /tests/test_count.py
if [ $? -eq 0 ] && [ "$out" = "3" ]; then r=1; else r=0; fi
echo $r > /logs/verifier/reward.txt
"""


def harbor_runs_agent_code(root: Path, name: str = "count-py") -> Path:
    """A task whose verifier runs the agent's ``count.py`` (a 10 s verifier timeout)."""
    return _write(root / name, {
        "task.toml": "[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 10.0\n",
        "instruction.md": (
            "Write /app/count.py printing the number of lines of /app/data.txt, and write "
            "that number to /app/count.txt.\n"
        ),
        "environment/Dockerfile": PYTEST_DOCKERFILE,
        "environment/data.txt": DATA,
        "tests/test.sh": RUNS_AGENT_TEST_SH,
        "tests/test_count.py": TEST_COUNT_PY,
        "solution/solve.sh": SOLVE_COUNT + (
            "echo \"print(len(open('/app/data.txt').read().splitlines()))\" > /app/count.py\n"
        ),
    })  # fmt: skip


def terminal_bench_copy_all(root: Path) -> Path:
    """A Terminal-Bench task whose Dockerfile copies its whole directory (tests, solution.sh
    and run-tests.sh beside it) into the image: those must stay out of the agent's image."""
    d = terminal_bench(root)
    (d / "Dockerfile").write_text(
        PYTEST_DOCKERFILE.replace("COPY data.txt", "COPY . /app/\nCOPY data.txt")
    )
    return d


# A streamable-http MCP server of the task's own (a hand-written fixture, standard library):
# JSON answers, and its tool results as an event stream, as FastMCP servers send them.
MCP_SERVER_PY = """\
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOOL = {"name": "get_secret", "description": "Returns the secret.",
        "inputSchema": {"type": "object", "properties": {}}}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in msg:
            self.send_response(202)
            self.end_headers()
            return
        method, stream = msg.get("method"), False
        if method == "initialize":
            result = {"protocolVersion": msg["params"].get("protocolVersion", "2025-03-26"),
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "m", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        elif method == "tools/call" and self.headers.get("Mcp-Session-Id") == "s-1":
            stream = True
            result = {"content": [{"type": "text", "text": open("/srv/secret").read().strip()}]}
        else:
            result = {"content": [{"type": "text", "text": "no session"}], "isError": True}
        body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result})
        if stream:
            body = "event: message\\ndata: " + body + "\\n\\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        self.send_header("Mcp-Session-Id", "s-1")
        self.end_headers()
        self.wfile.write(body.encode())


ThreadingHTTPServer(("127.0.0.1", 8000), Handler).serve_forever()
"""
MCP_SOLVE = """\
#!/bin/bash
python3 - <<'EOF'
import json, urllib.request
def post(msg, sid=None):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if sid: h["Mcp-Session-Id"] = sid
    req = urllib.request.Request("http://127.0.0.1:8000/mcp", json.dumps(msg).encode(), h)
    with urllib.request.urlopen(req) as r:
        return r.headers.get("Mcp-Session-Id"), r.read().decode()
sid, _ = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
_, out = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "get_secret", "arguments": {}}}, sid)
data = json.loads(out.split("data: ", 1)[1])
open("/app/secret.txt", "w").write(data["result"]["content"][0]["text"])
EOF
"""


def harbor_mcp(root: Path, url: str = "http://127.0.0.1:8000/mcp") -> Path:
    """A task with its own MCP server (``[[environment.mcp_servers]]``, streamable-http), as
    the cookbook's mcp-tools recipe, but started by the image's ENTRYPOINT in the task's
    container (no sidecar): the agent must call ``get_secret`` and write what it returns."""
    dockerfile = (
        "FROM debian:bookworm\nRUN apt-get update -qq && apt-get install -y -qq "
        "--no-install-recommends python3 curl && rm -rf /var/lib/apt/lists/*\n"
        "COPY entrypoint.sh server.py /srv/\nRUN chmod +x /srv/entrypoint.sh\n"
        'ENTRYPOINT ["/srv/entrypoint.sh"]\nWORKDIR /app\n'
    )
    entrypoint = (
        "#!/bin/bash\nset -euo pipefail\necho forge-secret-7 > /srv/secret\n"
        "(python3 /srv/server.py >/dev/null 2>&1 &)\n"
        'exec "$@"\n'
    )
    return _write(root / "mcp", {
        "task.toml": (
            "[verifier]\ntimeout_sec = 30.0\n[[environment.mcp_servers]]\n"
            f'name = "secrets"\ntransport = "streamable-http"\nurl = "{url}"\n'
        ),
        "instruction.md": "Call the get_secret tool and write its answer to /app/secret.txt.\n",
        "environment/Dockerfile": dockerfile,
        "environment/entrypoint.sh": entrypoint,
        "environment/server.py": MCP_SERVER_PY,
        "tests/test.sh": (
            "#!/bin/bash\ngot=$(cat /app/secret.txt 2>/dev/null)\n"
            '[ "$got" = forge-secret-7 ] && r=1 || r=0\necho $r > /logs/verifier/reward.txt\n'
        ),
        "solution/solve.sh": MCP_SOLVE,
    })  # fmt: skip


PY_CURL = (
    "FROM debian:bookworm\nRUN apt-get update -qq && apt-get install -y -qq "
    "--no-install-recommends python3 curl && rm -rf /var/lib/apt/lists/*\n"
)


def harbor_sidecar(
    root: Path, health: str = "curl -sf http://localhost:5000/token", retries: int = 20
) -> Path:
    """A compose service besides ``main``, as the cookbook's multi-container recipe: an API
    sidecar (its own image, built from ``environment/api/``) the task reaches as ``api``."""
    compose = (
        "services:\n  main:\n    depends_on:\n      api:\n        condition: service_healthy\n"
        '  api:\n    build:\n      context: ./api\n    expose:\n      - "5000"\n'
        "    environment:\n      - TOKEN=side-${OPENFORGE_T_SIDE_UNSET:-car}-9\n"
        f'    healthcheck:\n      test: ["CMD-SHELL", "{health}"]\n'
        f"      interval: 500ms\n      timeout: 5s\n      retries: {retries}\n"
    )
    fetch = "curl -sf http://api:5000/token"
    return _write(root / "sidecar", {
        "task.toml": "[verifier]\ntimeout_sec = 30.0\n",
        "instruction.md": "Fetch http://api:5000/token into /app/token.txt.\n",
        "environment/Dockerfile": PY_CURL + "WORKDIR /app\n",
        "environment/docker-compose.yaml": compose,
        "environment/api/Dockerfile": (
            PY_CURL + "WORKDIR /srv\n"
            'CMD ["sh", "-c", "echo $TOKEN > token && exec python3 -m http.server 5000"]\n'
        ),
        "tests/test.sh": (
            f"#!/bin/bash\nwant=$({fetch})\n"
            'if [ -n "$want" ] && [ "$(cat /app/token.txt 2>/dev/null)" = "$want" ]; then r=1; '
            "else r=0; fi\necho $r > /logs/verifier/reward.txt\n"
        ),
        "solution/solve.sh": f"#!/bin/bash\n{fetch} > /app/token.txt\n",
    })  # fmt: skip


# A simulated user of the task's own, in the cookbook's simulated-user layout: a sidecar whose
# compose environment names ANTHROPIC_API_KEY and that asks Anthropic's Messages API (the
# wire format the official SDK speaks, with the SDK's ANTHROPIC_BASE_URL and x-api-key) for
# each answer. Standard library only: the Debian base has no anthropic package.
USER_SERVER_PY = """\
import json, os, urllib.parse, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PERSONA = "You are a user who wants the word forge-word-3 written to /app/word.txt."


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        question = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["q"][0]
        body = {"model": "claude-sonnet-4-6", "max_tokens": 64, "system": PERSONA,
                "messages": [{"role": "user", "content": question}]}
        base = os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        req = urllib.request.Request(base.rstrip("/") + "/v1/messages", json.dumps(body).encode(), {
            "content-type": "application/json", "anthropic-version": "2023-06-01",
            "x-api-key": os.environ.get("ANTHROPIC_API_KEY", "")})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                reply = json.load(r)
            text = "".join(b["text"] for b in reply["content"] if b["type"] == "text")
            code = 200
        except Exception as exc:
            text, code = f"the user is not there: {exc}", 502
        self.send_response(code)
        self.end_headers()
        self.wfile.write(text.encode())


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
"""
ASK_USER = "curl -sf 'http://user-server:8000/ask?q=Which%20word%20do%20you%20want%3F'"


def harbor_simulated_user(root: Path) -> Path:
    """A task whose requirement only its simulated user knows: a ``user-server`` sidecar that
    calls a model with ``ANTHROPIC_API_KEY`` (the cookbook's simulated-user recipe's shape);
    the agent asks it and writes the answer to ``/app/word.txt``."""
    probe = "import socket; socket.create_connection(('localhost', 8000), 2)"
    health = f'["CMD", "python3", "-c", "{probe}"]'
    compose = (
        "services:\n  main:\n    depends_on:\n      user-server:\n"
        "        condition: service_healthy\n"
        "  user-server:\n    build:\n      context: ./user-server\n"
        "    environment:\n      - ANTHROPIC_API_KEY=${ANTHROPIC_API_KEY}\n"
        "      - SIM_USER_MODEL=${SIM_USER_MODEL:-}\n"
        '    expose:\n      - "8000"\n'
        f"    healthcheck:\n      test: {health}\n"
        "      interval: 500ms\n      timeout: 5s\n      retries: 20\n"
    )
    return _write(root / "simulated-user", {
        "task.toml": "[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 60.0\n",
        "instruction.md": (
            "Ask the user at http://user-server:8000/ask?q=QUESTION which word they want, "
            "and write it to /app/word.txt.\n"
        ),
        "environment/Dockerfile": PY_CURL + "WORKDIR /app\n",
        "environment/docker-compose.yaml": compose,
        "environment/user-server/Dockerfile": (
            PY_CURL + "WORKDIR /srv\nCOPY server.py /srv/\nCMD [\"python3\", \"/srv/server.py\"]\n"
        ),
        "environment/user-server/server.py": USER_SERVER_PY,
        "tests/test.sh": (
            "#!/bin/bash\ngrep -qx forge-word-3 /app/word.txt && r=1 || r=0\n"
            "echo $r > /logs/verifier/reward.txt\n"
        ),
        "solution/solve.sh": f"#!/bin/bash\n{ASK_USER} > /app/word.txt\n",
    })  # fmt: skip


# Terminal-Bench 1's published verifier templates (laude-institute/terminal-bench-datasets),
# each in a hand-written task whose image names the t-bench Python base, mapped by the tests to
# the offline uv base (deploy/build-uv-base.sh): EvoEval's run-tests.sh (uv's installer, `source
# $HOME/.local/bin/env`, `uv init`, `uv add pytest==8.4.1`, `uv run pytest`), DevEval's (`set
# -e`; a heredoc setup script that pip-installs the project's requirements; the project's own
# tests run into a log that says ALL_PASSED or ALL_FAILED; then tests/setup-uv-pytest.sh, the
# same uv steps unpinned, sourced, and tests/run-uv-pytest.sh, whose test reads the log) and
# Aider Polyglot's (`pip3 install pytest`, `python3 -m pytest`).
TB_PYTHON = "ghcr.io/laude-institute/t-bench/python-3-13:20250620"
INSTALL_UV = """\
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
if [ "$PWD" = "/" ]; then
    echo "Error: No working directory set."
    exit 1
fi
uv init
"""
DEVEVAL_RUN_TESTS = """\
#!/bin/bash
set -e

cat <<'EOF_SETUP_SCRIPT' > setup_modified.sh
#!/bin/sh

pip install -r requirements.txt
EOF_SETUP_SCRIPT
chmod +x setup_modified.sh
./setup_modified.sh

cd /app
export PYTHONPATH=$(pwd)

if (python3 -m pytest unit_tests) > /app/unit_test.log 2>&1; then \
echo "ALL_PASSED" >> /app/unit_test.log; else echo "ALL_FAILED" >> /app/unit_test.log; fi

source $TEST_DIR/setup-uv-pytest.sh
bash $TEST_DIR/run-uv-pytest.sh"""
DEVEVAL_TEST_OUTPUTS = """\
import os

def test_unit_tests_passed():
    log_file = "/app/unit_test.log"
    assert os.path.exists(log_file)
    with open(log_file) as f:
        assert "ALL_PASSED" in f.read()
"""
TB_TEMPLATES = {
    "evoeval": {
        "run-tests.sh": "#!/bin/bash\n" + INSTALL_UV
        + "uv add pytest==8.4.1\n\nuv run pytest $TEST_DIR/test_outputs.py -rA",
    },
    "deveval": {
        "run-tests.sh": DEVEVAL_RUN_TESTS,
        "tests/setup-uv-pytest.sh": "#!/bin/bash\n" + INSTALL_UV + "uv add pytest ",
        "tests/run-uv-pytest.sh": "#! /bin/bash\n\nuv run pytest $TEST_DIR/test_outputs.py -rA ",
        "tests/test_outputs.py": DEVEVAL_TEST_OUTPUTS,
        "requirements.txt": "pytest\n",
        "unit_tests/test_add.py": "from solution import add\n\ndef test_add():\n"
        "    assert add(2, 5) == 7\n",
        "Dockerfile": f"FROM {TB_PYTHON}\nWORKDIR /app\nCOPY requirements.txt /app/\n"
        "COPY unit_tests/ /app/unit_tests/\n",
    },
    "aider": {
        "run-tests.sh": "#!/bin/bash\nset -Eeuo pipefail\ncd /app\n"
        "pip3 install --no-cache-dir pytest 2>/dev/null || pip install --no-cache-dir pytest\n"
        "python3 -m pytest $TEST_DIR/test_outputs.py -rA\n",
    },
}  # fmt: skip
SOLVE_ADD = "#!/bin/bash\nprintf 'def add(a, b):\\n    return a + b\\n' > /app/solution.py\n"
TEST_ADD_OUTPUTS = """\
import importlib.util

def test_solution():
    spec = importlib.util.spec_from_file_location("solution", "/app/solution.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.add(2, 5) == 7
"""


def terminal_bench_template(root: Path, shape: str) -> Path:
    """A task in one of :data:`TB_TEMPLATES`' shapes: write ``add(a, b)`` in /app/solution.py."""
    return _write(root / f"tb-{shape}", {
        "task.yaml": "instruction: |-\n  Write add(a, b) in /app/solution.py.\n"
        "parser_name: pytest\nmax_agent_timeout_sec: 60.0\nmax_test_timeout_sec: 120.0\n"
        "run_tests_in_same_shell: true\n",
        "Dockerfile": f"FROM {TB_PYTHON}\nWORKDIR /app\n",
        "tests/test_outputs.py": TEST_ADD_OUTPUTS,
        "solution.sh": SOLVE_ADD,
        **TB_TEMPLATES[shape],
    })  # fmt: skip
