import json, os, sys  # noqa: F401

from openforge_verify import V, done, pristine, read, run  # noqa: F401

import tempfile
cases = ["The cat saw the dog. THE end", "b a B c b", "Zed zed yak"]
wants = ["the", "b", "zed"]
bad = []
for text, want in zip(cases, wants):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    rc, out = run(["python3", "top_word.py", f.name])
    os.unlink(f.name)
    if rc != 0 or (out or "").strip() != want:
        bad.append((text, out))
done(not bad, bad=bad)
