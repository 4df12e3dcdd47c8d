import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

bad = []
for args in (["10", "9", "100", "1"], ["3", "-20", "7"], ["5"]):
    rc, out = run(["python3", "sort_nums.py", *args])
    want = " ".join(str(x) for x in sorted(int(a) for a in args))
    if rc != 0 or (out or "").strip() != want:
        bad.append((args, out))
done(not bad, bad=bad)
