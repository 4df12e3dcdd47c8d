import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

import tempfile, random
rng = random.Random()
bad = []
for _ in range(3):
    rows = [rng.randint(1, 500) for _ in range(rng.randint(1, 9))]
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write("item,amount\n" + "".join(f"x{i},{v}\n" for i, v in enumerate(rows)))
    rc, out = run(["python3", "report.py", f.name])
    os.unlink(f.name)
    if rc != 0 or (out or "").strip() != str(sum(rows)):
        bad.append((rows, out))
done(not bad, bad=bad)
