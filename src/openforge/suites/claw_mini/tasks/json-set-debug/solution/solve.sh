#!/bin/sh
set -e
python3 -c 'import json; c=json.load(open("config.json")); c["debug"]=True; json.dump(c, open("config.json","w"), indent=2)'
