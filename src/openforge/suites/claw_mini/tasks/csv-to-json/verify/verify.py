import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

import csv, io
try:
    got = json.loads(read("people.json") or "")
except ValueError:
    done(False, why="invalid json")
want = [dict(r, age=int(r["age"])) for r in csv.DictReader(io.StringIO(pristine("people.csv")))]
done(got == want)
