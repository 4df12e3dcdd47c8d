import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

c = read("low.txt")
it = json.loads(pristine("items.json"))
lo = min(i["stock"] for i in it)
want = [i["name"] for i in it if i["stock"] == lo]
done(c is not None and c.split() == want, want=want, found=c)
