import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("found.txt")
want = pristine("answer")
done(c is not None and c.strip().lstrip("./") == want.strip(), found=c)
