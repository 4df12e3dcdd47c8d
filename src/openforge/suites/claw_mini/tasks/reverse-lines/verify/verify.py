import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("reversed.txt")
want = pristine("names.txt").splitlines()[::-1]
done(c is not None and c.rstrip("\n").split("\n") == want)
