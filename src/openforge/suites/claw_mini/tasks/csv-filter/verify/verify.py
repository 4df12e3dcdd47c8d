import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

import csv, io
c = read("north.csv")
rows = list(csv.reader(io.StringIO(pristine("sales.csv"))))
want = [rows[0]] + [x for x in rows[1:] if x[0] == "north"]
got = list(csv.reader(io.StringIO(c))) if c else []
done(got == want, want=len(want))
