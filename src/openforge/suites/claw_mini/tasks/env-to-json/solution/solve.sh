#!/bin/sh
set -e
python3 -c 'import json; json.dump({k:int(v) for k,v in (l.split("=") for l in open("settings.env").read().split())}, open("settings.json","w"))'
