import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

bad = []
for n in (0, 1, 2, 7, 10, -3):
    rc, out = run(["python3", "is_even.py", str(n)])
    if rc != 0 or (out or "").strip() != str(n % 2 == 0):
        bad.append((n, out))
done(not bad, bad=bad)
