import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

try:
    got = json.loads(read("config.json") or "")
except ValueError:
    done(False, why="invalid json")
want = json.loads(pristine("config.json"))
want["debug"] = True
done(got == want)
