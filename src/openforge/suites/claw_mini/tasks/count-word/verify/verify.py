import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("maple.txt")
want = pristine("data.txt").split().count("maple")
done(c is not None and c.strip() == str(want), want=want, found=c)
