import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

import csv, io
try:
    got = json.loads(read("avg.json") or "")
except ValueError:
    done(False, why="invalid json")
acc = {}
for row in csv.DictReader(io.StringIO(pristine("scores.csv"))):
    acc.setdefault(row["student"], []).append(int(row["score"]))
want = {k: sum(v) / len(v) for k, v in acc.items()}
ok = isinstance(got, dict) and set(got) == set(want) and all(
    isinstance(got[k], (int, float)) and abs(got[k] - want[k]) < 0.01 for k in want)
done(ok, want=want)
