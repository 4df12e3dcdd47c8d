import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("lines.txt")
done(c is not None and c.split() == ["alpha", "beta"] and c.strip().splitlines() == ["alpha", "beta"], found=c)
