import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("warnings.txt")
want = [ln for ln in pristine("app.log").splitlines() if "WARN" in ln]
done(c is not None and c.strip().splitlines() == want, want=len(want))
