import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("unique.txt")
want = sorted(set(pristine("names.txt").split()))
done(c is not None and c.split() == want and len(c.strip().splitlines()) == len(want))
