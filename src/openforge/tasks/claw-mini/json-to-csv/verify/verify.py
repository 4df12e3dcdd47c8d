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


def _f(x):
    try:
        return float(x)
    except ValueError:
        return None


import csv, io
c = read("items.csv")
got = list(csv.reader(io.StringIO(c))) if c else []
want = [["name", "price"]] + [[i["name"], i["price"]] for i in json.loads(pristine("items.json"))]
ok = len(got) == len(want) and got[0] == want[0] and all(
    g[0] == w[0] and _f(g[1]) == w[1] for g, w in zip(got[1:], want[1:]) if len(g) == 2)
ok = ok and all(len(g) == 2 for g in got)
done(ok)
