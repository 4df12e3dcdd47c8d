import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

from collections import Counter
try:
    got = json.loads(read("counts.json") or "")
except ValueError:
    done(False, why="invalid json")
want = dict(Counter(e["type"] for e in json.loads(pristine("events.json"))))
done(got == want, want=want)
