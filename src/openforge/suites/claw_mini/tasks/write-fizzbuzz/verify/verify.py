import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

def fb(i):
    return "FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i)
bad = []
for n in (1, 15, 31):
    rc, out = run(["python3", "fizzbuzz.py", str(n)])
    if rc != 0 or (out or "").split() != [fb(i) for i in range(1, n + 1)]:
        bad.append(n)
done(not bad, bad=bad)
