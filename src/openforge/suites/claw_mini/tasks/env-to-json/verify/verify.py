import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

try:
    got = json.loads(read("settings.json") or "")
except ValueError:
    done(False, why="invalid json")
want = {k: int(v) for k, v in (ln.split("=") for ln in pristine("settings.env").split())}
done(got == want)
