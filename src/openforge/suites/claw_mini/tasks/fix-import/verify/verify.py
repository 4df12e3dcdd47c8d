import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

bad = []
for args in (["a"], ["x", "y z"], []):
    rc, out = run(["python3", "dump.py", *args])
    try:
        ok = rc == 0 and json.loads(out or "") == args
    except ValueError:
        ok = False
    if not ok:
        bad.append((args, out))
done(not bad, bad=bad)
