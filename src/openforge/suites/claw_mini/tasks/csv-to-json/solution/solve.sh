#!/bin/sh
set -e
python3 -c 'import csv,json; json.dump([dict(r, age=int(r["age"])) for r in csv.DictReader(open("people.csv"))], open("people.json","w"))'
