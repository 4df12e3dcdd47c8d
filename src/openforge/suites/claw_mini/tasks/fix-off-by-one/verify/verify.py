import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

bad = []
for n in (1, 5, 10, 37):
    rc, out = run(["python3", "sum_to.py", str(n)])
    if rc != 0 or (out or "").strip() != str(n * (n + 1) // 2):
        bad.append((n, out))
done(not bad, bad=bad)
