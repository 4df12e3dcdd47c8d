import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

import tempfile
bad = []
for n in (0, 3, 17):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("".join(f"line {i}\n" for i in range(n)))
    rc, out = run(["sh", "count.sh", f.name])
    os.unlink(f.name)
    if rc != 0 or (out or "").strip() != str(n):
        bad.append((n, out))
done(not bad, bad=bad)
