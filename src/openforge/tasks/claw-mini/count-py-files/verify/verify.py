import json, os, sys
V = os.environ.get("OPENFORGE_VERIFY_DIR", os.path.dirname(os.path.abspath(__file__)))


def done(ok, **details):
    print(json.dumps({"reward": 1.0 if ok else 0.0, "details": details}))
    sys.exit(0)


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def pristine(name):
    with open(os.path.join(V, "data", name), encoding="utf-8") as f:
        return f.read()


def run(argv, stdin=None):
    import subprocess
    try:
        p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    return p.returncode, p.stdout


c = read("n.txt")
done(c is not None and c.strip() == "5", found=c)
