import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

cases = [(2, 3), (-7, 10), (123, 456)]
bad = []
for x, y in cases:
    rc, out = run(["python3", "add.py", str(x), str(y)])
    if rc != 0 or (out or "").strip() != str(x + y):
        bad.append((x, y, out))
done(not bad, bad=bad)
