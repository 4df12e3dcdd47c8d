import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

try:
    got = json.loads(read("merged.json") or "")
except ValueError:
    done(False, why="invalid json")
want = {**json.loads(pristine("a.json")), **json.loads(pristine("b.json"))}
done(got == want)
