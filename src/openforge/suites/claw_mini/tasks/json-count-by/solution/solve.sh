#!/bin/sh
set -e
python3 -c 'import json,collections; json.dump(collections.Counter(e["type"] for e in json.load(open("events.json"))), open("counts.json","w"))'
