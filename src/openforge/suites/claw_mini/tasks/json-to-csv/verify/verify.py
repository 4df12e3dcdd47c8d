import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

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
