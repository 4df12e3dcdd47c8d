"""What every program run inside a sandbox shares (standard library only, Python 3.8+).

It is shipped inside each program's bundle (:func:`openforge.guest.bundle`) and imported
as ``openforge.guest.common`` there and on the host alike, so host code and guests name the
sandbox's places with the same constants, and the guests share one model client, one step
loop's error handling, one JSON server and one guard for graders' judges.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Callable, Iterator, Optional

# $HOME in every sandbox (the local backend's bind, the container's user home): where harness
# adapters and environments put their files.
SANDBOX_HOME = "/home/sandbox"
# The task's working directory inside a sandbox unless the task names another.
SANDBOX_WORKDIR = "/workspace"
# OpenForge's own files under $HOME (agents, env files) and the GUI environment's under that.
STATE_DIR = ".openforge"
GUI_DIR = f"{STATE_DIR}/gui"

# Exit codes. An agent: 0 it finished, 2 out of steps, 3 the model API failed, 4 its
# environment is gone. A grader's child: 3 it needs a judge and has none, 4 the judge failed.
OUT_OF_STEPS = 2
MODEL_FAILED = 3
ENVIRONMENT_GONE = 4
NEEDS_JUDGE = 3
JUDGE_FAILED = 4

# (outcome, error) -> None: writes an agent's transcript as it stands.
Save = Callable[[str, Optional[str]], None]


class ModelError(Exception):
    """The model API refused or could not be reached."""


class EnvironmentGone(Exception):
    """The environment server (browser, desktop) did not answer."""


def write_text(path: str, text: str) -> None:
    """Write ``path`` whole: a reader sees the old file or the new one, never a part."""
    # A fresh temporary name each time: a fixed one ("result.json.tmp") is a name anyone
    # in the sandbox can take first (a directory there made every later write fail).
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".w-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def http_json(
    url: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = 120.0
) -> Any:
    """POST ``body`` as JSON (GET when None) and return the decoded answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def chat(
    base_url: str,
    api_key: str,
    body: dict[str, Any],
    timeout: float,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One Chat Completions call; the first choice's message, or :class:`ModelError`.

    ``headers`` come after ``Authorization`` (the claw agent's ``User-Agent``): the request's
    bytes are what a harness fingerprint records.
    """
    try:
        got = http_json(
            base_url.rstrip("/") + "/chat/completions",
            body,
            {"Authorization": f"Bearer {api_key}", **(headers or {})},
            timeout,
        )
        message = got["choices"][0]["message"]
        if not isinstance(message, dict):
            raise ValueError(f"the message is not an object: {message!r}"[:300])
        return message
    except urllib.error.HTTPError as exc:
        raise ModelError(f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:2000]}") from exc
    except (OSError, http.client.HTTPException, LookupError, TypeError, ValueError) as exc:
        raise ModelError(f"model API failed: {exc}") from exc


def function_tool(
    name: str, description: str, properties: dict[str, Any], required: list[str] | None = None
) -> dict[str, Any]:
    """A Chat Completions tool taking one JSON object (``required``: its mandatory keys)."""
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        parameters["required"] = required
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def ask(
    args: argparse.Namespace,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The agent's next message: :func:`chat` with the endpoint, ``max_tokens`` and
    ``temperature`` of its arguments (:func:`add_model_args`)."""
    body: dict[str, Any] = {"model": args.model, "messages": messages}
    if tools is not None:
        body["tools"] = tools
    body["max_tokens"] = args.max_tokens
    body["temperature"] = args.temperature
    return chat(args.base_url, args.api_key, body, args.request_timeout, headers)


def environment(url: str, path: str, body: Any = None, what: str = "environment") -> Any:
    """One request to an environment server; :class:`EnvironmentGone` if it does not answer."""
    try:
        return http_json(url.rstrip("/") + path, body, None, 120.0)
    except (OSError, ValueError) as exc:
        raise EnvironmentGone(f"{what} at {url}: {exc}") from exc


def add_model_args(parser: argparse.ArgumentParser, request_timeout: bool = True) -> None:
    """The instruction and the model endpoint, defaulting from the environment the harness
    adapter's env file sets (``OPENFORGE_INSTRUCTION``, ``OPENAI_BASE_URL``, …)."""
    env = os.environ
    parser.add_argument("instruction", nargs="?", default=env.get("OPENFORGE_INSTRUCTION", ""))
    parser.add_argument("--base-url", default=env.get("OPENAI_BASE_URL", ""))
    parser.add_argument("--api-key", default=env.get("OPENAI_API_KEY", "none"))
    parser.add_argument("--model", default=env.get("OPENFORGE_MODEL", "default"))
    parser.add_argument("--temperature", type=float, default=1.0)
    if request_timeout:
        parser.add_argument("--request-timeout", type=float, default=600.0)


def add_agent_args(
    parser: argparse.ArgumentParser,
    environment: str,
    transcript: str,
    max_steps: int,
    max_tokens: int,
) -> None:
    """The model's (:func:`add_model_args`), the step limits, the transcript (a path under
    $HOME) and ``--ENVIRONMENT-url`` (default ``$OPENFORGE_ENVIRONMENT_URL``): an agent that
    works on an environment server."""
    add_model_args(parser)
    url = os.environ.get(f"OPENFORGE_{environment.upper()}_URL", "")
    parser.add_argument(f"--{environment}-url", default=url)
    parser.add_argument("--transcript", default=os.path.join(os.path.expanduser("~"), transcript))
    parser.add_argument("--max-steps", type=int, default=max_steps)
    parser.add_argument("--max-tokens", type=int, default=max_tokens)


def parse_agent_args(
    parser: argparse.ArgumentParser, argv: list[str] | None, environment: str = ""
) -> argparse.Namespace:
    """``argv`` parsed: a usage error (exit 2) without a model endpoint, exit 4 without the
    ``environment`` server's URL."""
    args = parser.parse_args(argv)
    if not args.base_url:
        parser.error("no model API: pass --base-url or set OPENAI_BASE_URL")
    if environment and not getattr(args, f"{environment}_url"):
        var = f"OPENFORGE_{environment.upper()}_URL"
        print(f"{parser.prog}: no {environment} environment (${var})", file=sys.stderr)
        sys.exit(ENVIRONMENT_GONE)
    return args


def _transcript_writer(path: str, **fields: Any) -> Save:
    """A :data:`Save` writing ``{outcome, error, **fields}`` to ``path`` (``fields`` hold the
    agent's live lists, so each save writes them as they are then)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def save(outcome: str, error: str | None = None) -> None:
        write_text(path, json.dumps({"outcome": outcome, "error": error, **fields}, indent=1))

    return save


def run_steps(
    prog: str,
    transcript: str,
    loop: Callable[[], str | None],
    exhausted: str = "max_steps",
    **fields: Any,
) -> int:
    """Run an agent's step loop and transcribe how it ended; the process's exit code.

    ``loop`` returns the outcome it finished with (exit 0), or None when it ran out of steps
    (``exhausted``, exit 2). A failed model API is exit 3, a vanished environment exit 4;
    both are printed as ``"<prog>: …"`` and transcribed with their error. The transcript is
    ``{outcome, error, **fields}`` (``fields``: the agent's live lists, written as they end).
    """
    save = _transcript_writer(transcript, **fields)
    try:
        outcome = loop()
    except ModelError as exc:
        return _stopped(prog, save, "model_error", exc, MODEL_FAILED)
    except EnvironmentGone as exc:
        return _stopped(prog, save, "environment_error", exc, ENVIRONMENT_GONE)
    if outcome is None:
        save(exhausted, None)
        return OUT_OF_STEPS
    save(outcome, None)
    return 0


def _stopped(prog: str, save: Save, outcome: str, exc: Exception, code: int) -> int:
    print(f"{prog}: {exc}", file=sys.stderr)
    save(outcome, str(exc))
    return code


class JsonHandler(BaseHTTPRequestHandler):
    """An environment server's request handler: JSON in, JSON out, nothing logged (the
    agent's own transcript says what happened)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_json(self, code: int, body: dict[str, Any]) -> None:
        """Answer with ``body`` as JSON."""
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_action(self, act: dict[str, Any]) -> dict[str, Any]:
        """Do one action (``POST /action``); the answer. Each server's own."""
        raise NotImplementedError

    def do_POST(self) -> None:
        """``POST /action`` with a JSON object; 400 for anything else in the body."""
        if urllib.parse.urlsplit(self.path).path != "/action":
            self.send_json(404, {"error": f"no route {self.path}"})
            return
        try:
            act = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if not isinstance(act, dict):
                raise ValueError("an action is a JSON object")
        except ValueError as exc:
            self.send_json(400, {"error": f"bad action: {exc}"})
            return
        self.send_json(200, self.do_action(act))


def serve_until_term(
    server: HTTPServer, port_file: str, between: Callable[[], None] | None = None
) -> None:
    """Write the server's port to ``port_file``, then serve one request at a time until
    SIGTERM or SIGINT, calling ``between`` after each request or idle ``server.timeout``."""
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        # A flag, not an exception: raised inside a Playwright call (its greenlet), a
        # KeyboardInterrupt was swallowed there and the server never stopped.
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if server.timeout is None:
        server.timeout = 0.1  # how soon a signal is noticed when no request comes
    write_text(port_file, str(server.server_address[1]))
    try:
        while not stopping.is_set():
            server.handle_request()
            if between is not None:
                between()
    finally:
        server.server_close()


class JudgeFailed(BaseException):
    """A judge request failed. A BaseException, so a suite's own ``except Exception`` retry
    loop cannot turn it into an unscored rubric item."""


def fail_fast(owner: Any, attr: str) -> None:
    """Make ``owner.attr`` (a judge's request function) raise :class:`JudgeFailed` on any error."""
    call = getattr(owner, attr)

    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            raise JudgeFailed(f"{type(exc).__name__}: {exc}") from None

    setattr(owner, attr, guarded)


@contextlib.contextmanager
def judge_guard(what: str = "the LLM judge") -> Iterator[None]:
    """End the process with exit 4 when ``what`` failed inside the block."""
    try:
        yield
    except JudgeFailed as exc:
        print(f"{what} failed: {exc}", file=sys.stderr)
        sys.exit(JUDGE_FAILED)


def read_request() -> dict[str, Any]:
    """A request/response program's one JSON request, from stdin."""
    req: dict[str, Any] = json.load(sys.stdin)
    return req


def emit(result: dict[str, Any]) -> None:
    """Print the program's one JSON result line."""
    print(json.dumps(result))
