import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

import csv, io
c = read("total.txt")
want = sum(int(row["amount"]) for row in csv.DictReader(io.StringIO(pristine("sales.csv"))))
try:
    ok = c is not None and float(c.strip()) == want
except ValueError:
    ok = False
done(ok, want=want, found=c)
