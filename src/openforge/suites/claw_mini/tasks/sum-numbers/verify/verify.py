import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("sum.txt")
want = sum(int(x) for x in pristine("numbers.txt").split())
done(c is not None and c.strip() == str(want), want=want, found=c)
