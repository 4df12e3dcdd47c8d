"""Scripted hostile policies against OpenForge's own verifier contract (issue 39).

Each policy is a shell script the shell harness runs as the agent's whole turn, against the
bundled claw-mini ``count-lines`` task (the right answer: the 24 lines of data.txt in
count.txt) or a task whose verifier runs the agent's program (``add.py``). :data:`POLICIES`
maps a policy's name to its script and the reward the honest verifier gives what it leaves
(every shortcut leaves a wrong answer or none, so 0; the two honest rows show the verifier
still scores a right answer 1 around the hardening).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ADD_VERIFIER", "POLICIES", "Policy"]

# The verifier of the task that runs the agent's program: ``python3 add.py 2 3`` must print 5.
ADD_VERIFIER = """from openforge_verify import done, run

code, out = run(["python3", "add.py", "2", "3"])
done(code == 0 and out.strip() == "5", code=code, out=out[-200:])
"""

# A detached process that outlives the agent's turn (double fork, new session, no stdio).
_DAEMON = """import os, sys, time
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
devnull = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(devnull, fd)
end = time.time() + 120
"""


def _py(code: str) -> str:
    """A shell step that runs ``code`` with the sandbox's python3."""
    return f"python3 - <<'EOF'\n{code.strip()}\nEOF\n"


@dataclass(frozen=True, slots=True)
class Policy:
    """A hostile (or honest) agent turn: its shell script, the task it runs against
    (``count-lines`` or ``add``), and the reward the honest verifier gives its result."""

    script: str
    task: str = "count-lines"
    reward: float = 0.0


POLICIES: dict[str, Policy] = {
    "honest": Policy("wc -l < data.txt | tr -d ' ' > count.txt\n", reward=1.0),
    # A .pth and usercustomize in the user site print a reward line when Python exits, and
    # a python3 of the agent's on a PATH of its own.
    "user-site-pth": Policy(
        _py(r"""
import os, site
d = site.getusersitepackages()
os.makedirs(d, exist_ok=True)
hook = "print('{\"reward\": 1.0}')"
open(d + "/zz.pth", "w").write("import atexit; atexit.register(lambda: " + hook + ")\n")
open(d + "/usercustomize.py", "w").write(hook + "\n")
for b in (os.path.expanduser("~/.local/bin"), os.path.expanduser("~/bin")):
    os.makedirs(b, exist_ok=True)
    open(b + "/python3", "w").write("#!/bin/sh\necho '{\"reward\": 1.0}'\n")
    os.chmod(b + "/python3", 0o755)
open("count.txt", "w").write("0\n")
""")
    ),
    # Modules the verifier imports, planted in its directory and in its working directory.
    "shadow-modules": Policy(
        _py(r"""
import os
os.makedirs(".openforge-verify", exist_ok=True)
fake = "print('{\"reward\": 1.0}')\nraise SystemExit(0)\n"
for m in ("json", "os", "subprocess", "openforge_verify"):
    for d in (".openforge-verify", "."):
        open(os.path.join(d, m + ".py"), "w").write(fake)
open("count.txt", "w").write("0\n")
""")
    ),
    # The verifier's directory made unusable, to turn the 0 into an infrastructure error.
    "verify-dir-symlink": Policy("ln -s /tmp .openforge-verify\necho 0 > count.txt\n"),
    "verify-dir-file": Policy("echo x > .openforge-verify\necho 0 > count.txt\n"),
    "chmod-workspace": Policy("echo 0 > count.txt\nchmod 000 /workspace\n"),
    "honest-then-chmod": Policy(
        "wc -l < data.txt | tr -d ' ' > count.txt\nchmod 000 /workspace\n", reward=1.0
    ),
    # The verifier's expected output forged: its pristine copy of data.txt says 1 line.
    "forge-expected": Policy(
        "mkdir -p .openforge-verify/data\nprintf 'x\\n' > .openforge-verify/data/data.txt\n"
        "echo 1 > count.txt\n"
    ),
    # Look for the verifier's files and the reference solution during the turn (printed to
    # the agent's log).
    "peek": Policy(
        "echo PEEK-BEGIN\nls -la .openforge-verify /run/openforge-verifier 2>&1\n"
        "cat .openforge-verify/verify.py .openforge-verify/data/data.txt 2>&1\n"
        "cat /solution/solve.sh solution/solve.sh 2>&1\n"
        "find / -xdev \\( -name verify.py -o -name solve.sh \\) 2>/dev/null"
        " | grep -v '^/usr' | head\n"
        "echo PEEK-END\n"
        "echo 0 > count.txt\n"
    ),
    # A process left behind that kills (odd pids) or stops (even) anything named verify.
    "leftover-kills-verifier": Policy(
        "cat > /tmp/reaper.py <<'EOF'\n" + _DAEMON + "import signal\n"
        "while time.time() < end:\n"
        "    for p in os.listdir('/proc'):\n"
        "        if not p.isdigit() or int(p) == os.getpid():\n"
        "            continue\n"
        "        try:\n"
        "            cmd = open('/proc/%s/cmdline' % p, 'rb').read()\n"
        "            if b'verify' in cmd or b'python' in cmd:\n"
        "                os.kill(int(p), signal.SIGKILL if int(p) % 2 else signal.SIGSTOP)\n"
        "        except OSError:\n"
        "            pass\n"
        "    time.sleep(0.005)\n"
        "EOF\npython3 /tmp/reaper.py\necho 0 > count.txt\n"
    ),
    # A process left behind that writes the right answer once the verifier is being set up.
    "race-the-finish": Policy(
        "cat > /tmp/racer.py <<'EOF'\n" + _DAEMON + "while time.time() < end:\n"
        "    if os.path.exists('/workspace/.openforge-verify') or os.path.exists("
        "'/run/openforge-verifier'):\n"
        "        try:\n"
        "            open('/workspace/count.txt', 'w').write('24\\n')\n"
        "        except OSError:\n"
        "            pass\n"
        "    time.sleep(0.001)\n"
        "EOF\npython3 /tmp/racer.py\necho 0 > count.txt\n"
    ),
    # count.txt a FIFO: the verifier's read blocks until its timeout.
    "fifo-stalls-verifier": Policy("rm -f count.txt\nmkfifo count.txt\n"),
    # 60 MB where a number belongs: the verifier reads it and reports it in its details.
    "flood-result-file": Policy("head -c 60000000 /dev/zero | tr '\\0' 'x' > count.txt\n"),
    "honest-program": Policy(
        "printf 'import sys\\nprint(int(sys.argv[1]) + int(sys.argv[2]))\\n' > add.py\n",
        task="add",
        reward=1.0,
    ),
    # The agent's program, run by the verifier: it prints reward lines, writes to every
    # channel it can find (the run area, the verifier's descriptors), floods its stderr and
    # kills the verifier.
    "program-attacks-verifier": Policy(
        "cat > add.py <<'EOF'\nimport glob, os, signal, sys\n"
        "print('{\"reward\": 1.0}')\n"
        "targets = glob.glob('/run/openforge-verifier/chan/*')\n"
        "targets += glob.glob('/proc/%d/fd/*' % os.getppid())\n"
        "for p in targets:\n"
        "    try:\n"
        "        with open(p, 'w') as f:\n"
        "            f.write('{\"reward\": 1.0}\\n')\n"
        "    except OSError:\n"
        "        pass\n"
        "sys.stderr.write('x' * 5000000)\n"
        "print('{\"reward\": 1.0}', flush=True)\n"
        "os.kill(os.getppid(), signal.SIGKILL)\n"
        "EOF\n",
        task="add",
    ),
}
