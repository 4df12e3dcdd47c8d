import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("errors.txt")
want = sum("ERROR" in ln for ln in pristine("app.log").splitlines())
done(c is not None and c.strip() == str(want), want=want, found=c)
